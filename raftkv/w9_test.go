package raftkv

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/bench"
	"github.com/kvbuf/kvbuf/internal/testutil"
	"github.com/kvbuf/kvbuf/storage"
)

// W9 (doc/workloads.md): replicated writes on a 3-node cluster on loopback
// at 1, 16 and 64 concurrent clients, and the restart after many applied
// writes, for the same host (this package: raft, log store, transport,
// proposal batching) with three state machines, each what a replica
// engineer would write:
//
//   - kvbuf: the engine; entry i is op i, made durable by the engine's
//     flusher every 100 ms, whose watermark is the durable applied index.
//   - pebble-ready-nosync+logsync: pebble applying each Ready's committed
//     entries as one unsynced batch that also records the applied index,
//     and a synced LogData every 100 ms (the engine's flush interval) that
//     makes everything before it durable; at Open it reads its applied
//     index back, so that a restart replays only what followed (etcd's
//     backend batches and consistent index).
//   - pebble-ready-sync: each Ready's committed entries as one synced batch
//     with the applied index: nothing to replay after a crash, a sync per
//     Ready.
//
// Both pebble databases have kvbuf's memory: a memtable of the engine's
// pending budget and its block cache (storage.PebbleOptions otherwise),
// and the store's key layout. Every row reads back what it wrote.
//
// go test -run '^$' -bench BenchmarkW9 ./raftkv runs one round;
// scripts/w9.sh runs several, the k-th with -w9.rotate=k (the
// implementations in the order of bench.RoundOrder), and prints per row the
// median over rounds and the per-round ratios with their range.

var (
	w9Writes      = flag.Int("w9.writes", 1_000_000, "W9 restart rows: writes acknowledged before the crash")
	w9Rotate      = flag.Int("w9.rotate", 0, "W9: run the implementations in the order of round k (bench.RoundOrder; scripts/w9.sh sets it)")
	w9Cache       = flag.String("w9.cache", "", "W9 restart rows: keep the crashed data directories here across runs (default: a temporary directory per run)")
	w9Sample      = flag.Int("w9.readback", 1000, "W9 write rows: values read back after each row (-1: all)")
	w9NoLogSync   = flag.Bool("w9.nologsync", false, "W9 write rows: never sync the raft log (unsafe; measures what its syncs cost)")
	w9Pending     = flag.Int("w9.pending", 0, "W9: appends with entries a leader may have in flight before it proposes again (0: raftkv's default, -1: no bound; a design comparison)")
	w9LoopSends   = flag.Bool("w9.loopsends", false, "W9: a follower's acknowledgements leave from the Ready loop, not from the append loop (a design comparison)")
	w9LogMemTable = flag.Uint64("w9.logmemtable", 0, "W9: the raft log store's memtable size in bytes (0: storage's default; a design comparison)")
	w9SyncReady   = flag.Bool("w9.syncready", false, "W9: handle raft's Readies synchronously (the design before AsyncStorageWrites; for A/B runs)")
	w9EngineFlush = flag.Duration("w9.engineflush", 0, "W9 write rows: the state machines' durability interval, kvbuf's engine FlushInterval and the +logsync baseline's LogData period (0: raftkv's default; 1h: none while timed; a design comparison)")
)

const (
	w9ValueSize = 100
	w9Loader    = "raftkv-w9-loader"

	w9Kvbuf       = "kvbuf"
	w9PebbleLog   = "pebble-ready-nosync+logsync"
	w9PebbleReady = "pebble-ready-sync"
)

func init() { childRoles[w9Loader] = w9LoaderChild }

// w9Impls are the state machines of W9, in their order in round 0.
var w9Impls = []string{w9Kvbuf, w9PebbleLog, w9PebbleReady}

// w9Hooks builds a node with the state machine impl; interval is the
// +logsync baseline's period between synced LogData (the engine's
// FlushInterval).
func w9Hooks(impl string, interval time.Duration) *testHooks {
	h := &testHooks{noLogSync: *w9NoLogSync, syncReady: *w9SyncReady, pendingAppends: *w9Pending, loopSends: *w9LoopSends, logMemTable: *w9LogMemTable}
	switch impl {
	case w9PebbleLog:
		h.newSM = newPebbleSM(false, interval)
	case w9PebbleReady:
		h.newSM = newPebbleSM(true, interval)
	}
	return h
}

// w9WriteFlushInterval is the durability interval of the write rows: the
// engine's FlushInterval and the +logsync baseline's period, raftkv's
// default unless -w9.engineflush sets one.
func w9WriteFlushInterval() time.Duration {
	if *w9EngineFlush > 0 {
		return *w9EngineFlush
	}
	return DefaultEngineFlushInterval
}

// pebbleSM is a W9 baseline state machine: pebble, keys in the engine
// store's layout ([0x02][keyspace ID, 4 bytes][key]), the keyspace catalog
// and the applied index as [0x01] meta keys. The entries of one run of
// applies (a Ready's committed entries, which the node commits together)
// go into one batch that records the last applied index. With sync, the
// batch is committed with a sync and the applied index is durable at
// once; without, a goroutine makes everything committed durable every
// interval with a synced LogData.
type pebbleSM struct {
	db       *pebble.DB
	sync     bool
	interval time.Duration

	batch   *pebble.Batch
	applied uint64 // the index the open batch records
	ids     map[string]uint32
	nextID  uint32

	committed atomic.Uint64 // the applied index of the last committed batch
	dur       atomic.Uint64 // the durable applied index
	notifyMu  sync.Mutex
	notify    chan struct{} // closed when dur advances

	stop chan struct{}
	wg   sync.WaitGroup
}

var (
	pebbleKeyApplied = []byte("\x01applied")
	pebbleKsPrefix   = []byte("\x01keyspace/")
)

// w9EngineOptions are the options of the kvbuf engines of W9 (raftkv's
// defaults), whose memory the pebble baselines get: their memtable is the
// pending budget, their block cache the engine's cache plus its read tier.
func w9EngineOptions() *kvbuf.Options {
	return (&kvbuf.Options{FlushInterval: DefaultEngineFlushInterval}).EnsureDefaults()
}

func newPebbleSM(sync bool, interval time.Duration) func(dir string) (stateMachine, error) {
	return func(dir string) (stateMachine, error) {
		eo := w9EngineOptions()
		db, err := pebble.Open(dir, storage.PebbleOptions(&storage.Options{
			MemTableSize: uint64(eo.MaxPendingBytes), CacheSize: eo.CacheSize + max(eo.ReadTierBytes, 0)}))
		if err != nil {
			return nil, err
		}
		p := &pebbleSM{db: db, sync: sync, interval: interval, ids: map[string]uint32{}, nextID: 1,
			notify: make(chan struct{}), stop: make(chan struct{})}
		if err := p.load(); err != nil {
			_ = db.Close()
			return nil, err
		}
		if !sync {
			p.wg.Add(1)
			go p.syncLoop()
		}
		return p, nil
	}
}

// load reads back the applied index and the keyspace catalog.
func (p *pebbleSM) load() error {
	v, c, err := p.db.Get(pebbleKeyApplied)
	switch {
	case err == nil:
		idx := binary.BigEndian.Uint64(v)
		c.Close()
		p.applied = idx
		p.committed.Store(idx)
		p.dur.Store(idx)
	case !errors.Is(err, pebble.ErrNotFound):
		return err
	}
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: pebbleKsPrefix, UpperBound: append(slices.Clone(pebbleKsPrefix), 0xff)})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		id := binary.BigEndian.Uint32(it.Value())
		p.ids[string(it.Key()[len(pebbleKsPrefix):])] = id
		p.nextID = max(p.nextID, id+1)
	}
	return it.Close()
}

// syncLoop makes every committed batch durable every interval.
func (p *pebbleSM) syncLoop() {
	defer p.wg.Done()
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-p.stop:
			return
		}
		idx := p.committed.Load() // every batch up to idx is in the WAL
		if err := p.db.LogData(nil, pebble.Sync); err != nil {
			return
		}
		p.advance(idx)
	}
}

func (p *pebbleSM) advance(idx uint64) {
	if idx <= p.dur.Load() {
		return
	}
	p.dur.Store(idx)
	p.notifyMu.Lock()
	close(p.notify)
	p.notify = make(chan struct{})
	p.notifyMu.Unlock()
}

func (p *pebbleSM) durable() uint64 { return p.dur.Load() }

func (p *pebbleSM) durableNotify() <-chan struct{} {
	p.notifyMu.Lock()
	defer p.notifyMu.Unlock()
	return p.notify
}

func (p *pebbleSM) key(id uint32, k []byte) []byte {
	b := make([]byte, 0, 5+len(k))
	b = append(b, 0x02)
	b = binary.BigEndian.AppendUint32(b, id)
	return append(b, k...)
}

func (p *pebbleSM) open() *pebble.Batch {
	if p.batch == nil {
		p.batch = p.db.NewBatch()
	}
	return p.batch
}

func (p *pebbleSM) skip(_ context.Context, index uint64) error {
	p.open()
	p.applied = index
	return nil
}

func (p *pebbleSM) apply(_ context.Context, index uint64, cmds []*command, results []error) error {
	b := p.open()
	p.applied = index
	if index <= p.dur.Load() {
		return nil // redelivered: durable already
	}
	for i, c := range cmds {
		if c.kind == cmdCreateKeyspace {
			if _, ok := p.ids[c.name]; !ok {
				p.ids[c.name] = p.nextID
				p.nextID++
				if err := b.Set(append(slices.Clone(pebbleKsPrefix), c.name...), binary.BigEndian.AppendUint32(nil, p.ids[c.name]), nil); err != nil {
					return err
				}
			}
			continue
		}
		id, ok := p.ids[c.name]
		if !ok {
			results[i] = errorf("keyspace %q: %w", c.name, ErrUnknownKeyspace)
			continue
		}
		var err error
		switch c.kind {
		case cmdPut:
			err = b.Set(p.key(id, c.key), c.value, nil)
		case cmdDelete:
			err = b.Delete(p.key(id, c.key), nil)
		default:
			results[i] = errorf("%v: not supported by the W9 baseline", c.kind)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (p *pebbleSM) commit(context.Context) error {
	b := p.batch
	if b == nil {
		return nil
	}
	p.batch = nil
	defer b.Close()
	if err := b.Set(pebbleKeyApplied, binary.BigEndian.AppendUint64(nil, p.applied), nil); err != nil {
		return err
	}
	wo := pebble.NoSync
	if p.sync {
		wo = pebble.Sync
	}
	if err := b.Commit(wo); err != nil {
		return err
	}
	p.committed.Store(p.applied)
	if p.sync {
		p.advance(p.applied)
	}
	return nil
}

func (p *pebbleSM) get(keyspace string, key []byte) ([]byte, error) {
	id, ok := p.ids[keyspace] // created before any read of W9 (not synchronized)
	if !ok {
		return nil, errorf("keyspace %q: %w", keyspace, ErrUnknownKeyspace)
	}
	v, c, err := p.db.Get(p.key(id, key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, kvbuf.ErrNotFound
	} else if err != nil {
		return nil, err
	}
	defer c.Close()
	return slices.Clone(v), nil
}

var errW9Baseline = errors.New("raftkv: not supported by the W9 baseline")

func (p *pebbleSM) getBit(string, uint64) (bool, error) { return false, errW9Baseline }
func (p *pebbleSM) scan(string, []byte, []byte, int) ([]KeyValue, bool, error) {
	return nil, false, errW9Baseline
}
func (p *pebbleSM) names() ([]string, []string)        { return nil, nil }
func (p *pebbleSM) snapshot() (*kvbuf.Snapshot, error) { return nil, errW9Baseline }
func (p *pebbleSM) metrics() kvbuf.Metrics             { return kvbuf.Metrics{} }

func (p *pebbleSM) close() error {
	close(p.stop)
	p.wg.Wait()
	if p.batch != nil {
		p.batch.Close()
	}
	return p.db.Close()
}

func BenchmarkW9(b *testing.B) {
	order := bench.RoundOrder(len(w9Impls), max(*w9Rotate, 0))
	for _, clients := range []int{1, 16, 64} {
		for _, k := range order {
			impl := w9Impls[k]
			b.Run(fmt.Sprintf("writes/clients=%d/impl=%s", clients, impl), func(b *testing.B) {
				w9WriteRow(b, clients, 1, impl, w9Hooks(impl, w9WriteFlushInterval()))
			})
		}
	}
	// One client, pipelined: Node.Write of 64 writes at a time.
	for _, k := range order {
		impl := w9Impls[k]
		b.Run(fmt.Sprintf("writes-pipelined/clients=1/depth=64/impl=%s", impl), func(b *testing.B) {
			w9WriteRow(b, 1, 64, impl, w9Hooks(impl, w9WriteFlushInterval()))
		})
	}
	for _, k := range order {
		impl := w9Impls[k]
		b.Run(fmt.Sprintf("restart/writes=%d/impl=%s", *w9Writes, impl), func(b *testing.B) {
			w9Restart(b, impl)
		})
	}
}

// w9Key and w9Value are write i's key and value: every value differs, so
// that the read-back catches a write applied to the wrong key.
func w9Key(i uint64) []byte { return fmt.Appendf(nil, "key%013d", i) }

func w9Value(i uint64) []byte {
	v := make([]byte, w9ValueSize)
	binary.BigEndian.PutUint64(v, i)
	for j := 8; j < len(v); j++ {
		v[j] = byte(i>>(j%8)) ^ byte(j)
	}
	return v
}

// w9WriteRow measures replicated writes on a fresh 3-node cluster: each
// iteration is one write of a 100-byte value to a new key, issued by one of
// clients goroutines to the leader and acknowledged once applied there.
// It reports writes/s, the client latency's p50 and p99, the CPU time of
// the whole process per write (every node, the clients) and the values
// read back.
//
// With depth > 1 each client writes depth writes at a time with one
// Node.Write (the pipelined path of one client: kvraft's POST /kv/{ks}),
// and each write's latency is that of its Write call.
func w9WriteRow(b *testing.B, clients, depth int, impl string, hooks *testHooks) {
	// etcd's timing (100 ms heartbeats, 1 s election timeout) at 20 ms
	// ticks: a loaded machine must not turn a slow turn of the loop into
	// an election mid-row.
	c := newClusterHooks(b, 3, func(o *Options) {
		o.TickInterval, o.HeartbeatTicks, o.ElectionTicks = 20*time.Millisecond, 5, 50
		o.Engine = &kvbuf.Options{FlushInterval: w9WriteFlushInterval()}
	}, hooks)
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateKeyspace(ctx, "ks") })
	l := c.leader(10 * time.Second)
	var seq atomic.Uint64
	put := func() (time.Duration, error) {
		i := seq.Add(1)
		start := time.Now()
		err := l.Put(bg, "ks", w9Key(i), w9Value(i))
		return time.Since(start), err
	}
	for range 100 { // warm-up: connections, pebble, the engine's tables
		if _, err := put(); err != nil {
			b.Fatal(err)
		}
	}
	write := func(k int) (time.Duration, error) {
		if k == 1 {
			return put()
		}
		ws := make([]Write, k)
		for j := range ws {
			i := seq.Add(1)
			ws[j] = Write{Keyspace: "ks", Key: w9Key(i), Value: w9Value(i)}
		}
		start := time.Now()
		errs := l.Write(bg, ws)
		return time.Since(start), errors.Join(errs...)
	}
	work := make(chan struct{}, clients*depth)
	lat := make([][]time.Duration, clients)
	var failed atomic.Value
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := 0
				for range work {
					if k++; k == depth {
						break
					}
				}
				if k == 0 {
					return
				}
				d, err := write(k)
				if err != nil {
					failed.CompareAndSwap(nil, err)
					continue
				}
				for range k {
					lat[i] = append(lat[i], d)
				}
			}
		}()
	}
	b.ReportAllocs()
	cpu0 := processCPU()
	start := time.Now()
	n := 0
	for b.Loop() {
		work <- struct{}{}
		n++
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(start)
	cpu := processCPU() - cpu0
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("a write failed: %v", err)
	}
	checked, err := w9ReadBack(l, seq.Load(), *w9Sample)
	if err != nil {
		b.Fatalf("%s: %v", impl, err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	b.ReportMetric(float64(n)/elapsed.Seconds(), "writes/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-us")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-us")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/op")
	b.ReportMetric(float64(checked), "read-back")
}

// w9ReadBack reads back, on the leader, sample of the writes 1..written
// (all if sample < 0 or >= written), spread over them, after a
// linearizable read: every one must hold its value. It returns how many
// it checked, or an error wrapping bench.ErrReadBack.
func w9ReadBack(l *Node, written uint64, sample int) (int, error) {
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	if err := l.linearize(ctx, nil); err != nil {
		return 0, err
	}
	n := uint64(sample)
	if sample < 0 || n > written {
		n = written
	}
	for j := range n {
		i := 1 + j*written/n
		v, err := l.Get(ctx, "ks", w9Key(i), &ReadOptions{Stale: true})
		switch {
		case errors.Is(err, kvbuf.ErrNotFound):
			return 0, fmt.Errorf("%w: key %s was written but is missing", bench.ErrReadBack, w9Key(i))
		case err != nil:
			return 0, err
		case string(v) != string(w9Value(i)):
			return 0, fmt.Errorf("%w: key %s holds %x, %x was written", bench.ErrReadBack, w9Key(i), v, w9Value(i))
		}
	}
	return int(n), nil
}

// processCPU is the user and system CPU time of the whole process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A state machine that loses writes fails W9's read-back: the check can
// fail.
func TestW9ReadBackCatchesLoss(t *testing.T) {
	lossy := &testHooks{newSM: func(dir string) (stateMachine, error) {
		sm, err := newPebbleSM(false, DefaultEngineFlushInterval)(dir)
		if err != nil {
			return nil, err
		}
		return &lossySM{stateMachine: sm}, nil
	}}
	c := newClusterHooks(t, 1, nil, lossy)
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateKeyspace(ctx, "ks") })
	l := c.leader(10 * time.Second)
	for i := uint64(1); i <= 20; i++ {
		if err := l.Put(bg, "ks", w9Key(i), w9Value(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w9ReadBack(l, 20, -1); !errors.Is(err, bench.ErrReadBack) {
		t.Fatalf("read-back of a state machine that drops every 7th write: %v", err)
	}
	// The same check passes on the baseline itself.
	c2 := newClusterHooks(t, 1, nil, w9Hooks(w9PebbleLog, DefaultEngineFlushInterval))
	c2.mustDo(func(ctx context.Context, n *Node) error { return n.CreateKeyspace(ctx, "ks") })
	l2 := c2.leader(10 * time.Second)
	for i := uint64(1); i <= 20; i++ {
		if err := l2.Put(bg, "ks", w9Key(i), w9Value(i)); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := w9ReadBack(l2, 20, -1); err != nil || n != 20 {
		t.Fatalf("read-back of the baseline: %d, %v", n, err)
	}
}

// lossySM drops every 7th put it applies.
type lossySM struct {
	stateMachine
	puts int
}

func (s *lossySM) apply(ctx context.Context, index uint64, cmds []*command, results []error) error {
	kept := make([]*command, 0, len(cmds))
	for _, c := range cmds {
		if c.kind == cmdPut {
			if s.puts++; s.puts%7 == 0 {
				continue
			}
		}
		kept = append(kept, c)
	}
	return s.stateMachine.apply(ctx, index, kept, results[:len(kept)])
}

// w9LoaderChild writes on a single-node cluster in W9_DIR with the state
// machine W9_IMPL from 256 goroutines, prints "done <applied index>" once
// the writes 1..W9_WRITES are all acknowledged and writes on until its
// parent kills it.
func w9LoaderChild() int {
	total, _ := strconv.Atoi(os.Getenv("W9_WRITES"))
	impl := os.Getenv("W9_IMPL")
	n, err := open(w9RestartOptions(os.Getenv("W9_DIR")), w9Hooks(impl, DefaultEngineFlushInterval))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for !n.IsLeader() {
		time.Sleep(5 * time.Millisecond)
	}
	if err := n.CreateKeyspace(bg, "ks"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var seq, acked atomic.Uint64 // acked: of the writes 1..total
	var wg sync.WaitGroup
	for range 256 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := seq.Add(1)
				if err := n.Put(bg, "ks", w9Key(i), w9Value(i)); err != nil {
					fmt.Fprintln(os.Stderr, err)
					return
				}
				if i <= uint64(total) && acked.Add(1) == uint64(total) {
					fmt.Printf("done %d\n", n.appliedNow.Load())
				}
			}
		}()
	}
	wg.Wait()
	return 1
}

// w9RestartOptions are the restart rows' node options: one node, short
// ticks (an election takes 100-200ms, in every row alike).
func w9RestartOptions(dir string) *Options {
	return &Options{
		ID:            1,
		Peers:         map[uint64]string{1: "127.0.0.1:1"},
		Dir:           dir,
		TickInterval:  10 * time.Millisecond,
		ElectionTicks: 10,
		LogRetain:     uint64(*w9Writes) * 2, // the log is never compacted: every row could replay all of it
	}
}

// w9Crashed returns a data directory in which a node acknowledged
// -w9.writes writes and was SIGKILLed with writes in flight (made once per
// implementation, in -w9.cache or a temporary directory).
func w9Crashed(b *testing.B, impl string) string {
	cache := *w9Cache
	if cache == "" {
		cache = filepath.Join(os.TempDir(), fmt.Sprintf("kvbuf-w9-%d", os.Getpid()))
		b.Cleanup(func() { _ = os.RemoveAll(cache) })
	}
	dir := filepath.Join(cache, fmt.Sprintf("%s-%d", strings.ReplaceAll(impl, "+", "_"), *w9Writes))
	if _, err := os.Stat(filepath.Join(dir, "done")); err == nil {
		return dir
	}
	_ = os.RemoveAll(dir)
	b.Logf("W9 restart: loading %d writes with %s (once per run)", *w9Writes, impl)
	cmd := testutil.Reexec(b, w9Loader, "W9_DIR="+filepath.Join(dir, "node"), "W9_IMPL="+impl,
		"W9_WRITES="+strconv.Itoa(*w9Writes), "GORACE=atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "done ") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		b.Fatalf("W9 loader: %q", sc.Text())
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	if err := os.WriteFile(filepath.Join(dir, "done"), nil, 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

// copyTree copies the directory src to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if d.Name() == "LOCK" {
			return nil
		}
		return exec.Command("cp", p, target).Run()
	})
}

// w9Restart measures the time from Open to a served linearizable read (one
// op, ns/op; copying the crashed directory is not timed) on a node that
// crashed after -w9.writes acknowledged writes: each state machine replays
// the entries after its durable applied index (kvbuf's watermark, the
// pebble baselines' applied index read back at Open). It reports the
// entries replayed and the CPU time per restart, and reads back a sample
// of the writes.
func w9Restart(b *testing.B, impl string) {
	crashed := w9Crashed(b, impl)
	var replayed uint64
	var cpu time.Duration
	restarts := 0
	for b.Loop() {
		b.StopTimer()
		dir := filepath.Join(b.TempDir(), "node")
		if err := copyTree(filepath.Join(crashed, "node"), dir); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		cpu0 := processCPU()
		n, err := open(w9RestartOptions(dir), w9Hooks(impl, DefaultEngineFlushInterval))
		if err != nil {
			b.Fatal(err)
		}
		m := n.Metrics()
		ctx, cancel := context.WithTimeout(bg, 10*time.Minute)
		if err := n.WaitApplied(ctx, m.RestartLastIndex); err != nil {
			b.Fatal(err)
		}
		if err := n.linearize(ctx, nil); err != nil {
			b.Fatal(err)
		}
		cancel()
		b.StopTimer()
		cpu += processCPU() - cpu0
		restarts++
		m = n.Metrics()
		replayed = m.Reapplied + m.Redelivered
		// Every acknowledged write survived the crash.
		if _, err := w9ReadBack(n, uint64(*w9Writes), *w9Sample); err != nil {
			b.Fatalf("%s after the restart: %v", impl, err)
		}
		if err := n.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(replayed), "replayed-entries")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(max(restarts, 1)), "cpu-ns/op")
}
