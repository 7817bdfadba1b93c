package raftkv

// TestRaftPowerCut (issue 30): simulated power cuts of the nodes of an
// in-process 3-node cluster under a concurrent client workload.
//
// The model. A node's own files (the raft log store, a pebble database;
// IDENTITY; LOCK) are on a pebble crashable MemFS of its own (testHooks.fs),
// behind a gate (pcFS): every operation that changes the file system holds
// the gate shared while it runs, and a cut holds it exclusively, so no
// write or sync completes between the cut's image and the node's death. A
// cut of a set of nodes (one, a majority, all three "at once": their gates
// are all held while the images are taken):
//
//  1. holds the gates of the nodes cut;
//  2. takes each node's image of its files with MemFS.CrashClone: what
//     was synced, plus (mode "unsynced-50%") each block and directory
//     entry written since, at random;
//  3. kills the nodes as their peers and clients see it: every link of
//     theirs drops everything from here on (faults.setDown), their servers
//     answer 503, and a result a client gets from a node after it was cut
//     counts as unknown (a write: its outcome is unknown; a read: dropped);
//  4. copies each node's engine as the image's log expects it: a kvbuf
//     Checkpoint of the live engine, taken while the gate is held. The
//     node applies only entries its log synced (so that are in the image)
//     and the checkpoint holds every applied entry up to its watermark:
//     the engine image is the engine of this instant after a crash in
//     which everything applied reached the disk. The engine's own power
//     cuts (its pages, manifest and store) are the root package's
//     TestCrashPowerCut; kvbuf's store file system is not settable from
//     this package, and the engine directories stay on the OS's;
//  5. lets the gates go: the dead nodes go on writing to their live MemFS,
//     which nothing reads again, until the test closes them.
//
// The cut nodes then restart from their images. A cut is taken at a random
// moment, or at the n-th hit of a sync boundary of the log store on a node
// cut, before the operation runs: a write to pebble's WAL (a HardState,
// entries, a compaction or a membership record being committed), its sync,
// the MANIFEST's sync, an sstable's sync and a directory sync (of the log
// store's directory or the node's; the log store's memtable is flushed now
// and then so that the last three occur).
//
// Required: every node restarts (an Open error or a panic fails the test:
// with only unsynced data lost, nothing is damaged beyond repair), every
// write acknowledged to a client is there once the cluster recovers, every
// node has the same digest, and the clients' history is linearizable
// (porcupine, per key and per bit). The normal run takes 24 cuts (8 per
// mode); KVRAFT_POWERCUTS=N takes N.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/internal/testutil"
)

// pcGate orders a node's file system operations against cuts.
type pcGate struct {
	mu  sync.RWMutex
	hit func(point string) // called before an operation at a sync boundary, outside mu
}

// pcFS is a node's file system: its MemFS behind its gate.
type pcFS struct {
	vfs.FS // the MemFS
	g      *pcGate
}

// pcPoint names the sync boundary an operation on path is, or "".
func pcPoint(path string, sync, write bool) string {
	base := filepath.Base(path)
	switch {
	case strings.HasSuffix(base, ".log") && write:
		return "log/wal-write"
	case strings.HasSuffix(base, ".log") && sync:
		return "log/wal-sync"
	case strings.HasPrefix(base, "MANIFEST-") && sync:
		return "log/manifest-sync"
	case strings.HasSuffix(base, ".sst") && sync:
		return "log/sst-sync"
	case strings.HasPrefix(base, identityFile) && sync:
		return "node/identity-sync"
	case sync && !strings.Contains(base, "."):
		return "dir-sync" // the log store's directory, or the node's
	}
	return ""
}

// pcPoints are the boundaries cut at, with the hit numbers a cut picks
// from (the rarer ones early).
var pcPoints = []struct {
	name   string
	maxHit int
}{
	{"log/wal-write", 40},
	{"log/wal-sync", 40},
	{"log/manifest-sync", 2},
	{"log/sst-sync", 2},
	{"dir-sync", 2},
}

func (f *pcFS) enter(point string) func() {
	if point != "" && f.g.hit != nil {
		f.g.hit(point)
	}
	f.g.mu.RLock()
	return f.g.mu.RUnlock
}

func (f *pcFS) wrap(file vfs.File, name string, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &pcFile{File: file, fs: f, name: name}, nil
}

func (f *pcFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	defer f.enter("")()
	file, err := f.FS.Create(name, c)
	return f.wrap(file, name, err)
}

func (f *pcFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, o ...vfs.OpenOption) (vfs.File, error) {
	defer f.enter("")()
	file, err := f.FS.OpenReadWrite(name, c, o...)
	return f.wrap(file, name, err)
}

func (f *pcFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	defer f.enter("")()
	file, err := f.FS.ReuseForWrite(old, name, c)
	return f.wrap(file, name, err)
}

func (f *pcFS) OpenDir(name string) (vfs.File, error) {
	file, err := f.FS.OpenDir(name)
	return f.wrap(file, name, err)
}

func (f *pcFS) Link(old, name string) error   { defer f.enter("")(); return f.FS.Link(old, name) }
func (f *pcFS) Remove(name string) error      { defer f.enter("")(); return f.FS.Remove(name) }
func (f *pcFS) RemoveAll(name string) error   { defer f.enter("")(); return f.FS.RemoveAll(name) }
func (f *pcFS) Rename(old, name string) error { defer f.enter("")(); return f.FS.Rename(old, name) }
func (f *pcFS) MkdirAll(d string, m os.FileMode) error {
	defer f.enter("")()
	return f.FS.MkdirAll(d, m)
}

// pcFile is a file of a pcFS: its writes and syncs go through the gate.
type pcFile struct {
	vfs.File
	fs   *pcFS
	name string
}

func (p *pcFile) Write(b []byte) (int, error) {
	defer p.fs.enter(pcPoint(p.name, false, true))()
	return p.File.Write(b)
}

func (p *pcFile) WriteAt(b []byte, off int64) (int, error) {
	defer p.fs.enter(pcPoint(p.name, false, true))()
	return p.File.WriteAt(b, off)
}

func (p *pcFile) Preallocate(off, n int64) error {
	defer p.fs.enter("")()
	return p.File.Preallocate(off, n)
}

func (p *pcFile) Sync() error {
	defer p.fs.enter(pcPoint(p.name, true, false))()
	return p.File.Sync()
}

func (p *pcFile) SyncData() error {
	defer p.fs.enter(pcPoint(p.name, true, false))()
	return p.File.SyncData()
}

func (p *pcFile) SyncTo(n int64) (bool, error) {
	defer p.fs.enter(pcPoint(p.name, true, false))()
	return p.File.SyncTo(n)
}

// pcLife is one life of a node: its file system and the Node.
type pcLife struct {
	id   uint64
	mem  *vfs.MemFS
	gate *pcGate
	node *Node
	dead atomic.Bool // cut: its results no longer count
}

// pcCluster is the cluster under the power-cut test.
type pcCluster struct {
	t    *testing.T
	c    *cluster
	seed uint64

	mu    sync.Mutex
	lives map[uint64]*pcLife // the current life of each node
	plan  *pcPlan            // the armed cut, or nil
	cuts  []*pcCut           // taken, not yet restarted
	hits  map[string]int     // per boundary, for the armed plan

	closeMu sync.RWMutex   // held by the memtable flusher, and by restart while it closes a dead life
	cutMu   sync.Mutex     // one cut at a time
	cutWG   sync.WaitGroup // cuts begun (restart waits for them)
	cutSeq  uint64         // guarded by mu: seeds the images' randomness

	log     []string // the cuts, for a failure's message
	byMode  map[string]int
	byPoint map[string]int
}

// pcPlan is a cut armed for the hit-th hit of point on one of victims.
type pcPlan struct {
	point   string
	hit     int
	victims []uint64
	mode    string
	pct     int
}

// pcCut is a cut taken: the images of the nodes cut.
type pcCut struct {
	point, mode string
	at          time.Time
	victims     []uint64
	lives       []*pcLife
	images      []*vfs.MemFS
	engines     []string // the directory holding each node's engine copy
	err         error
}

func (pc *pcCluster) life(id uint64) *pcLife {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.lives[id]
}

// start opens node id on mem (a new life).
func (pc *pcCluster) start(id uint64, mem *vfs.MemFS) error {
	l := &pcLife{id: id, mem: mem, gate: &pcGate{}}
	l.gate.hit = func(point string) { pc.hit(l, point) }
	var n *Node
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic in Open: %v", r)
			}
		}()
		n, err = open(pc.c.options(id, false), &testHooks{fs: &pcFS{FS: mem, g: l.gate}})
		return err
	}()
	if err != nil {
		return fmt.Errorf("open node %d: %w", id, err)
	}
	l.node = n
	pc.mu.Lock()
	pc.lives[id] = l
	pc.mu.Unlock()
	pc.c.faults.setDown(id, false)
	pc.c.tn(id).cur.Store(n)
	return nil
}

// hit counts a boundary reached by l and takes the armed cut if it is its.
func (pc *pcCluster) hit(l *pcLife, point string) {
	pc.mu.Lock()
	p := pc.plan
	if p == nil || p.point != point || !slices.Contains(p.victims, l.id) || pc.lives[l.id] != l || l.dead.Load() {
		pc.mu.Unlock()
		return
	}
	pc.hits[point]++
	if pc.hits[point] < p.hit {
		pc.mu.Unlock()
		return
	}
	pc.plan = nil
	pc.cutSeq++
	rng := rand.New(rand.NewPCG(pc.seed, 1<<32|pc.cutSeq))
	pc.cutWG.Add(1)
	pc.mu.Unlock()
	defer pc.cutWG.Done()
	pc.cut(p.victims, point, p.mode, p.pct, rng)
}

// arm sets the next cut.
func (pc *pcCluster) arm(p *pcPlan) {
	pc.mu.Lock()
	pc.plan = p
	clear(pc.hits)
	pc.mu.Unlock()
}

// disarm drops the armed cut; it reports whether it was still armed.
func (pc *pcCluster) disarm() bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	armed := pc.plan != nil
	pc.plan = nil
	return armed
}

// cut cuts the power of victims (see the top of the file).
func (pc *pcCluster) cut(victims []uint64, point, mode string, pct int, rng *rand.Rand) {
	pc.cutMu.Lock()
	defer pc.cutMu.Unlock()
	c := &pcCut{point: point, mode: mode, victims: victims, at: time.Now()}
	for _, id := range victims {
		c.lives = append(c.lives, pc.life(id))
	}
	for _, l := range c.lives {
		l.gate.mu.Lock()
	}
	for _, l := range c.lives {
		cfg := vfs.CrashCloneCfg{UnsyncedDataPercent: pct}
		if pct > 0 {
			cfg.RNG = rng
		}
		c.images = append(c.images, l.mem.CrashClone(cfg))
		l.dead.Store(true)
		pc.c.faults.setDown(l.id, true)
		pc.c.tn(l.id).cur.Store(nil)
	}
	for i, l := range c.lives {
		dir, err := pc.copyEngine(l, c.images[i])
		if err != nil && c.err == nil {
			c.err = fmt.Errorf("node %d: %w", l.id, err)
		}
		c.engines = append(c.engines, dir)
	}
	for _, l := range c.lives {
		l.gate.mu.Unlock()
	}
	pc.mu.Lock()
	pc.cuts = append(pc.cuts, c)
	pc.mu.Unlock()
}

// copyEngine checkpoints l's engine into a new directory, under the name
// the image's log store gives it, and returns the directory.
func (pc *pcCluster) copyEngine(l *pcLife, img *vfs.MemFS) (string, error) {
	// The engine the image names: read from a copy of the image (opening
	// the log store writes to it).
	whole := img.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(1, 1))})
	ls, err := openLogStore(whole, filepath.Join(pc.c.tn(l.id).dir, logDir))
	if err != nil {
		return "", fmt.Errorf("the log store's image: %w", err)
	}
	name, err := ls.engineName()
	if cerr := ls.close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	if name == "" {
		name = initialEngine
	}
	out := filepath.Join(pc.t.TempDir(), fmt.Sprintf("n%d", l.id))
	n := l.node
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	// A snapshot's install is durable in the log before the node switches
	// engines: wait for the switch (the Ready loop does not need the log
	// for it).
	for {
		n.engMu.RLock()
		live := n.engName
		if live == name {
			sm, ok := n.sm.(*engineSM)
			var err error
			if !ok {
				err = errors.New("the state machine is not the engine")
			} else {
				_, err = sm.db.Checkpoint(ctx, filepath.Join(out, name))
			}
			n.engMu.RUnlock()
			return out, err
		}
		n.engMu.RUnlock()
		if ctx.Err() != nil {
			return "", fmt.Errorf("the image names engine %q, the node runs %q", name, live)
		}
		time.Sleep(time.Millisecond)
	}
}

// restart closes the nodes of every cut taken and starts them from their
// images.
func (pc *pcCluster) restart() error {
	pc.cutWG.Wait()
	pc.mu.Lock()
	cuts := pc.cuts
	pc.cuts = nil
	pc.mu.Unlock()
	for _, c := range cuts {
		if c.err != nil {
			return c.err
		}
		for i, l := range c.lives {
			// Close may report what the dead node ran into after its cut:
			// nothing of that life is looked at again.
			pc.c.installed.Add(l.node.Metrics().SnapshotsInstalled)
			pc.closeMu.Lock()
			_ = l.node.Close()
			pc.closeMu.Unlock()
			dir := pc.c.tn(l.id).dir
			if err := os.RemoveAll(dir); err != nil {
				return err
			}
			if err := os.Rename(c.engines[i], dir); err != nil {
				return err
			}
			if err := pc.start(l.id, c.images[i]); err != nil {
				return fmt.Errorf("after a cut at %s (%s, nodes %v): %w", c.point, c.mode, c.victims, err)
			}
		}
		pc.log = append(pc.log, fmt.Sprintf("%s %s nodes %v", c.at.Format("15:04:05.000000"), c.point, c.victims))
		pc.byMode[c.mode]++
		pc.byPoint[c.point]++
	}
	return nil
}

// alive returns the node to send to and a check, after the call, that its
// result counts (the node was not cut meanwhile).
func (pc *pcCluster) alive(id uint64) (*Node, func() bool) {
	l := pc.life(id)
	if l == nil || l.dead.Load() {
		return nil, nil
	}
	return l.node, func() bool { return !l.dead.Load() }
}

// pcAcked is what the durability writers were told.
type pcAcked struct {
	mu      sync.Mutex
	value   map[string]string   // key -> value of an acknowledged put
	deleted map[string]bool     // key -> acknowledged delete
	unsure  map[string]bool     // key -> a write of unknown outcome
	events  map[string][]string // key -> what its writes returned (for a failure's message)
	writes  int
}

// pcWriter writes keys of its own (each put once, some deleted later), in
// batches of 1-4 pipelined writes, through the node it believes leads.
func (pc *pcCluster) pcWriter(w int, rng *rand.Rand, stop *atomic.Bool, acked *pcAcked) {
	ids := pc.c.ids()
	leader := ids[0]
	seq := 0
	var live []string // keys put and not yet deleted
	for !stop.Load() {
		n, counts := pc.alive(leader)
		if n == nil {
			leader = ids[rng.IntN(len(ids))]
			time.Sleep(5 * time.Millisecond)
			continue
		}
		var ws []Write
		for range 1 + rng.IntN(4) {
			if len(live) > 0 && rng.IntN(5) == 0 {
				i := rng.IntN(len(live))
				k := live[i]
				live = slices.Delete(live, i, i+1)
				ws = append(ws, Write{Keyspace: "ks", Key: []byte(k), Delete: true})
				continue
			}
			seq++
			k := fmt.Sprintf("w%d-%06d", w, seq)
			live = append(live, k)
			ws = append(ws, Write{Keyspace: "ks", Key: []byte(k), Value: []byte(fmt.Sprintf("v%d.%d", w, seq))})
		}
		ctx, cancel := context.WithTimeout(bg, 2*time.Second)
		errs := n.Write(ctx, ws)
		cancel()
		ok := counts()
		acked.mu.Lock()
		for i, wr := range ws {
			k := string(wr.Key)
			acked.events[k] = append(acked.events[k], fmt.Sprintf("%s delete=%v via node %d (counts %v): %v", time.Now().Format("15:04:05.000000"), wr.Delete, n.id, ok, errs[i]))
			var nl *NotLeaderError
			switch err := errs[i]; {
			case err == nil && ok:
				acked.writes++
				if wr.Delete {
					acked.deleted[k] = true
				} else {
					acked.value[k] = string(wr.Value)
				}
			case errors.Is(err, ErrOutcomeUnknown):
				acked.unsure[k] = true
			case errors.As(err, &nl) || errors.Is(err, ErrProposalDropped) || errors.Is(err, ErrStopped):
				// Refused: nothing proposed. A refused put's key is not
				// looked at (it stays in live: a later delete is fine).
				if nl != nil && nl.Leader != 0 {
					leader = nl.Leader
				} else {
					leader = ids[rng.IntN(len(ids))]
				}
			default:
				acked.unsure[k] = true
			}
		}
		acked.mu.Unlock()
		if !ok {
			leader = ids[rng.IntN(len(ids))]
		}
	}
}

// pcLinClient runs single-key operations (put, delete, get; set and read a
// bit) for porcupine until stop.
func (pc *pcCluster) pcLinClient(client int, rng *rand.Rand, stop *atomic.Bool, rec *linRecorder) {
	ids := pc.c.ids()
	leader := ids[0]
	seq := 0
	for !stop.Load() {
		var in linIn
		switch r := rng.IntN(100); {
		case r < 30:
			seq++
			in = linIn{op: "put", key: rng.IntN(linKeys), val: fmt.Sprintf("c%d.%d", client, seq)}
		case r < 40:
			in = linIn{op: "del", key: rng.IntN(linKeys)}
		case r < 70:
			in = linIn{op: "get", key: rng.IntN(linKeys)}
		case r < 85:
			in = linIn{op: "set", bit: rng.IntN(linBits), on: rng.IntN(2) == 0}
		default:
			in = linIn{op: "bit", bit: rng.IntN(linBits)}
		}
		write := in.op == "put" || in.op == "del" || in.op == "set"
		target := leader
		if !write {
			target = ids[rng.IntN(len(ids))]
		}
		n, counts := pc.alive(target)
		if n == nil {
			leader = ids[rng.IntN(len(ids))]
			time.Sleep(5 * time.Millisecond)
			continue
		}
		ctx, cancel := context.WithTimeout(bg, time.Second)
		call := time.Now().UnixNano()
		out, err := linDo(ctx, n, in)
		ret := time.Now().UnixNano()
		cancel()
		ok := counts()
		var nl *NotLeaderError
		switch {
		case err == nil && ok:
			rec.add(client, in, call, out, ret)
		case err == nil && !ok && write, write && errors.Is(err, ErrOutcomeUnknown):
			// The node was cut: as for a lost connection, the write may
			// take effect at any later time.
			rec.add(client, in, call, linOut{unknown: true}, math.MaxInt64)
		case errors.As(err, &nl):
			if nl.Leader != 0 {
				leader = nl.Leader
			} else {
				leader = ids[rng.IntN(len(ids))]
				time.Sleep(5 * time.Millisecond)
			}
		default:
			if write && !errors.Is(err, ErrProposalDropped) && !errors.Is(err, ErrStopped) && err != nil {
				rec.add(client, in, call, linOut{unknown: true}, math.MaxInt64)
			}
			leader = ids[rng.IntN(len(ids))]
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// pcLinModel is raftLinModel checked per key and per bit (the clients of
// this test do no ranges or scans), which keeps porcupine fast with the
// writes of unknown outcome every cut leaves.
var pcLinModel = func() porcupine.Model {
	m := raftLinModel
	m.Partition = func(h []porcupine.Operation) [][]porcupine.Operation {
		parts := make([][]porcupine.Operation, linKeys+linBits)
		for _, op := range h {
			in := op.Input.(linIn)
			if in.op == "set" || in.op == "bit" {
				parts[linKeys+in.bit] = append(parts[linKeys+in.bit], op)
			} else {
				parts[in.key] = append(parts[in.key], op)
			}
		}
		return parts
	}
	return m
}()

func TestRaftPowerCut(t *testing.T) {
	total := testutil.EnvInt(t, "KVRAFT_POWERCUTS", 24)
	if testing.Short() {
		total = min(total, 9)
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	// The cluster: servers first, then each node on its own MemFS.
	c := &cluster{t: t, faults: newFaults(seed), nodes: map[uint64]*testNode{}, peers: map[uint64]string{},
		tune: func(o *Options) {
			o.LogRetain = 20 // compacted while the test runs: a node down for a while catches up by snapshot
			o.Engine = &kvbuf.Options{FlushInterval: 20 * time.Millisecond}
		}}
	c.client = &http.Client{Transport: c.faults}
	if os.Getenv("RAFTKV_TEST_LOG") != "" {
		c.logw = os.Stderr
	}
	t.Cleanup(c.close)
	for id := uint64(1); id <= 3; id++ {
		c.peers[id] = c.listen(id).addr
	}
	pc := &pcCluster{t: t, c: c, seed: seed, lives: map[uint64]*pcLife{}, hits: map[string]int{},
		byMode: map[string]int{}, byPoint: map[string]int{}}
	t.Cleanup(func() {
		// Nodes cut and not restarted (a failed test).
		pc.cutWG.Wait()
		for _, cut := range pc.cuts {
			for _, l := range cut.lives {
				_ = l.node.Close()
			}
		}
	})
	for id := uint64(1); id <= 3; id++ {
		// The directories above the node's exist, durably (the test made
		// them); the node makes its own.
		mem := vfs.NewCrashableMem()
		if err := testutil.MkdirDurable(mem, filepath.Dir(c.tn(id).dir)); err != nil {
			t.Fatal(err)
		}
		if err := pc.start(id, mem); err != nil {
			t.Fatal(err)
		}
	}
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateKeyspace(ctx, "ks") })
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateBitslice(ctx, "bs") })

	var stop atomic.Bool
	var wg sync.WaitGroup
	acked := &pcAcked{value: map[string]string{}, deleted: map[string]bool{}, unsure: map[string]bool{}, events: map[string][]string{}}
	var rec linRecorder
	for w := range 3 {
		wg.Go(func() { pc.pcWriter(w, rand.New(rand.NewPCG(seed, 10+uint64(w))), &stop, acked) })
	}
	for client := range 3 {
		wg.Go(func() { pc.pcLinClient(client, rand.New(rand.NewPCG(seed, 20+uint64(client))), &stop, &rec) })
	}
	// The log stores' memtables are flushed now and then, so that their
	// MANIFEST, sstable and directory syncs are boundaries a cut can reach.
	flushStop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-flushStop:
				return
			case <-time.After(150 * time.Millisecond):
			}
			pc.closeMu.RLock()
			for _, id := range c.ids() {
				if l := pc.life(id); l != nil && !l.dead.Load() {
					_ = l.node.ls.db.Flush()
				}
			}
			pc.closeMu.RUnlock()
		}
	})
	// A failed test stops the workload before the nodes close.
	var stopOnce sync.Once
	stopAll := func() {
		stopOnce.Do(func() {
			stop.Store(true)
			close(flushStop)
			wg.Wait()
		})
	}
	t.Cleanup(stopAll)

	began := time.Now()
	modes := []struct {
		name string
		n    int
	}{{"one", 1}, {"majority", 2}, {"all", 3}}
	var missed int
	for r := 0; r < total; r++ {
		mode := modes[r%len(modes)]
		pct := []int{0, 50}[(r/len(modes))%2]
		ids := c.ids()
		perm := rng.Perm(len(ids))
		var victims []uint64
		for _, p := range perm[:mode.n] {
			victims = append(victims, ids[p])
		}
		slices.Sort(victims)
		modeName := fmt.Sprintf("%s/unsynced-%d%%", mode.name, pct)
		// Let the cluster elect and take writes between cuts.
		time.Sleep(time.Duration(60+rng.IntN(200)) * time.Millisecond)
		if r%4 == 3 {
			time.Sleep(time.Duration(rng.IntN(100)) * time.Millisecond)
			pc.cut(victims, "random", modeName, pct, rand.New(rand.NewPCG(seed, 1000+uint64(r))))
		} else {
			p := pcPoints[(r/4*3+r%4)%len(pcPoints)]
			pc.arm(&pcPlan{point: p.name, hit: 1 + rng.IntN(p.maxHit), victims: victims, mode: modeName, pct: pct})
			deadline := time.Now().Add(3 * time.Second)
			for time.Now().Before(deadline) {
				pc.mu.Lock()
				taken := len(pc.cuts) > 0
				pc.mu.Unlock()
				if taken {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			if pc.disarm() {
				// Not reached in time (a rare boundary): a random cut instead.
				missed++
				pc.cut(victims, "random", modeName, pct, rand.New(rand.NewPCG(seed, 1000+uint64(r))))
			}
		}
		if mode.n == 1 && r%2 == 0 {
			// A node cut alone stays down a while (the others go on), and
			// often catches up by snapshot.
			time.Sleep(time.Duration(200+rng.IntN(400)) * time.Millisecond)
		}
		if err := pc.restart(); err != nil {
			t.Fatalf("cut %d (seed %d): %v", r, seed, err)
		}
		if (r+1)%100 == 0 {
			t.Logf("%d cuts survived in %v", r+1, time.Since(began).Round(time.Second))
		}
	}
	stopAll()
	elapsed := time.Since(began).Round(time.Millisecond)

	c.converge(60 * time.Second)
	// Every acknowledged write, on every node.
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	keys := slices.Sorted(maps.Keys(acked.value))
	for _, id := range c.ids() {
		n := c.tn(id).node()
		for _, k := range keys {
			if acked.unsure[k] && !acked.deleted[k] {
				continue // a delete of unknown outcome may have removed it
			}
			v, err := n.Get(ctx, "ks", []byte(k), &ReadOptions{Stale: true})
			switch {
			case acked.deleted[k]:
				if !errors.Is(err, kvbuf.ErrNotFound) {
					t.Fatalf("node %d: key %s, whose delete was acknowledged, is there (%q, %v)", id, k, v, err)
				}
			case err != nil:
				t.Fatalf("node %d: acknowledged key %s: %v; its writes: %q; cuts: %s", id, k, err, acked.events[k], strings.Join(pc.log, "\n"))
			case string(v) != acked.value[k]:
				t.Fatalf("node %d: acknowledged key %s is %q, want %q", id, k, v, acked.value[k])
			}
		}
	}
	var unknown int
	for _, op := range rec.ops {
		if op.Output.(linOut).unknown {
			unknown++
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d power cuts survived in %v (seed %d): %d acknowledged writes present on every node (%d keys of unknown outcome skipped), %d operations checked linearizable (%d of unknown outcome), %d snapshots installed; %d armed boundaries not reached in time (cut at random instead)",
		total, elapsed, seed, acked.writes, len(acked.unsure), len(rec.ops), unknown, c.snapshotsInstalled(), missed)
	sb.WriteString("\n  per mode:")
	for _, k := range slices.Sorted(maps.Keys(pc.byMode)) {
		fmt.Fprintf(&sb, "\n    %-28s %d", k, pc.byMode[k])
	}
	sb.WriteString("\n  per sync boundary:")
	for _, p := range pcPoints {
		fmt.Fprintf(&sb, "\n    %-28s %d", p.name, pc.byPoint[p.name])
	}
	fmt.Fprintf(&sb, "\n    %-28s %d", "random", pc.byPoint["random"])
	t.Log(sb.String())
	if acked.writes < 50 {
		t.Errorf("only %d acknowledged writes", acked.writes)
	}
	requireLinearizable(t, pcLinModel, rec.ops, "raftkv-powercut", seed)
}
