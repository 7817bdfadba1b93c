//go:build kvbuf_failpoints

package kvbuf

// TestCrashPowerCut (issue 30; go test -tags kvbuf_failpoints): simulated
// power cuts of the whole engine. The store runs on pebble's crashable
// MemFS, the engine directory's own files (bitslices, manifest, lock, a
// checkpoint's copies) on the OS file system under the power-cut model of
// powercut_model_failpoints_test.go: a cut keeps what was synced, and
// pages written since at random, whole ("pages") or torn at 512-byte
// boundaries ("torn").
//
// Each round opens an engine (the cut may fall in its initialisation) and
// runs the host of powercut_host_failpoints_test.go: three writers with
// their own log (ops begun under its lock, single calls with EndOp or
// batches; puts, deletes, range deletes, drops, bit sets and ranges in
// files that keep growing, bitslices created), two flushers in a loop and
// a checkpointer. A round takes several cuts while it runs: at the n-th
// hit of sync boundaries of the protocols (pcPoints: bitslice syncs,
// growth and creation, the manifest, a checkpoint's copy and its ready
// manifest, pebble's log write and sync, sstable, MANIFEST and directory
// syncs) and at random moments. A cut does not stop the engine: it records
// an image (the store's CrashClone and the OS files as the model leaves
// them), and the round goes on to its next cut.
//
// After the round every image is put back in place and checked:
//
//   - Open succeeds (a refusal would be data loss: every state the model
//     leaves is one a correct protocol survives);
//   - the watermark is at least every watermark a returned Flush reported
//     before the cut, and at most the last op begun;
//   - the state holds, for every key and bit, the value the ops up to the
//     watermark imply, or one a later begun op wrote (a flush persists
//     everything pending): never wrong data under the watermark;
//   - replaying the host's log from Watermark()+1 to the last op begun
//     gives exactly the state the log implies, and survives a flush;
//   - every checkpoint that returned before the cut opens, at the
//     watermark Checkpoint returned, with no wrong data under it.
//
// The normal run takes a few hundred cuts; -kvbuf.powercuts=N (or
// KVBUF_POWERCUTS=N) takes N (10,000 for the soak). The test logs
// the cuts per mode and per sync boundary, and fails if a boundary was
// never cut at in a run of 200 cuts or more. The raft log store
// (package raftkv) has its own test, raftkv's TestRaftPowerCut.

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/kvbuf/kvbuf/internal/failpoint"
	"github.com/kvbuf/kvbuf/internal/flush"
	"github.com/kvbuf/kvbuf/internal/testutil"
)

var powerCuts = flag.Int("kvbuf.powercuts", 0, "power cuts TestCrashPowerCut takes (0: the normal run's; env KVBUF_POWERCUTS; 10000 for a soak)")

// pcPoint is a sync boundary the test cuts at: a failpoint, or a store
// operation (before it runs) of pebble's on the MemFS. maxHit bounds the
// hit number a round picks: rare points are cut at early hits.
type pcPoint struct {
	name   string
	maxHit int
}

// pcPoints are the sync boundaries of the flush protocol, bitslice growth
// and creation, the engine directory and checkpoints. A boundary added with
// a new protocol step (flush by sstable ingestion: the sstable's write and
// sync, the ingest's MANIFEST edit) is a failpoint named in
// internal/failpoint, or a store operation classified by pcStoreOp, and is
// listed here.
var pcPoints = []pcPoint{
	{failpoint.BitsliceSyncMsync, 15},
	{failpoint.BitsliceSyncHeader, 15},
	{failpoint.BitsliceSyncHeaderWritten, 15},
	{failpoint.BitsliceSyncDone, 15},
	{failpoint.FlushBitsHeader, 15},
	{failpoint.BitsliceApplyWords, 15},
	{failpoint.BitsliceGrowAllocate, 6},
	{failpoint.BitsliceGrowHeader, 6},
	{failpoint.BitsliceCreatePublish, 4},
	{failpoint.BitsliceCreateDirSync, 4},
	{failpoint.EnginedirManifest, 2},
	{failpoint.EnginedirManifestRename, 2},
	{failpoint.CheckpointCopy, 6},
	{failpoint.CheckpointReady, 2},
	{failpoint.StorageIngestSync, 4},
	{failpoint.StorageIngestApply, 4},
	{failpoint.StorageIngestApplied, 4},
	{"pebble/wal-write", 20},
	{"pebble/wal-sync", 20},
	{"pebble/sst-sync", 3},
	{"pebble/manifest-sync", 3},
	{"pebble/dir-sync", 4},
}

// pcStoreOp names the sync boundary a store operation is, or "".
func pcStoreOp(op errorfs.Op) string {
	base := filepath.Base(op.Path)
	sync := op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo
	switch {
	case strings.HasSuffix(base, ".log") && (op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt):
		return "pebble/wal-write"
	case strings.HasSuffix(base, ".log") && sync:
		return "pebble/wal-sync"
	case strings.HasSuffix(base, ".sst") && sync:
		return "pebble/sst-sync"
	case strings.HasPrefix(base, "MANIFEST-") && sync:
		return "pebble/manifest-sync"
	case sync && !strings.Contains(base, "."):
		return "pebble/dir-sync" // a directory (OpenDir, then Sync)
	}
	return ""
}

// pcCut is one image and what the host had been told before it.
type pcCut struct {
	point   string // the boundary, or "random"
	mode    pcCutMode
	img     *pcImage
	ackWM   uint64         // a returned Flush's watermark, before the cut
	started uint64         // the last op begun, after it
	cps     []pcCheckpoint // checkpoints returned before it
}

// pcStats counts the cuts of a test.
type pcStats struct {
	cuts, replayed, checkpoints int
	// checkpoints a cut interrupted that opened (and were checked) or
	// were refused
	interruptedOpened, interruptedRefused int
	byMode                                map[string]int
	byPoint                               map[string]int
}

func TestCrashPowerCut(t *testing.T) {
	total := testutil.EnvInt(t, "KVBUF_POWERCUTS", 200)
	if *powerCuts > 0 {
		total = *powerCuts
	}
	if testing.Short() {
		total = min(total, 48)
	}
	seed := crashTestSeed(t)
	st := &pcStats{byMode: map[string]int{}, byPoint: map[string]int{}}
	began := time.Now()
	nextReport := 1000 // a soak reports its progress (shown with -v)
	for r := 0; st.cuts < total; r++ {
		rng := rand.New(rand.NewPCG(seed, uint64(r)))
		if err := pcRound(t, r, rng, min(6, total-st.cuts), st); err != nil {
			t.Fatalf("round %d (seed %d; replay with -crash.seed %d): %v", r, seed, seed, err)
		}
		if st.cuts >= nextReport && st.cuts < total {
			t.Logf("%d of %d power cuts survived in %v (round %d)", st.cuts, total, time.Since(began).Round(time.Second), r)
			nextReport += 1000
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d power cuts survived in %v (seed %d): %d replayed to the last op, %d completed checkpoints opened and checked; of the checkpoints a cut interrupted %d opened (and were checked), %d were refused",
		st.cuts, time.Since(began).Round(time.Millisecond), seed, st.replayed, st.checkpoints, st.interruptedOpened, st.interruptedRefused)
	sb.WriteString("\n  per mode:")
	for _, k := range slices.Sorted(maps.Keys(st.byMode)) {
		fmt.Fprintf(&sb, "\n    %-32s %d", k, st.byMode[k])
	}
	sb.WriteString("\n  per sync boundary:")
	var never []string
	for _, p := range append(slices.Clone(pcPoints), pcPoint{name: "random"}) {
		fmt.Fprintf(&sb, "\n    %-36s %d", p.name, st.byPoint[p.name])
		if st.byPoint[p.name] == 0 {
			never = append(never, p.name)
		}
	}
	t.Log(sb.String())
	if st.cuts >= 200 && len(never) > 0 {
		t.Errorf("no cut at %v in %d cuts", never, st.cuts)
	}
}

// pcRound runs one engine with its host until it has taken want cuts (or
// its time is up), then checks every image.
func pcRound(t *testing.T, r int, rng *rand.Rand, want int, st *pcStats) error {
	root := t.TempDir()
	mem := testutil.NewCrashableMem()
	m := newPCModel(root, mem)
	stopObs := failpoint.Observe(m)
	defer stopObs()

	// The plan: want-1 boundaries (cycling through pcPoints from round to
	// round) at a random hit each, and one random moment.
	type slot struct {
		point string
		hit   int
		taken bool
	}
	var (
		planMu sync.Mutex
		plan   []*slot
		hits   = map[string]int{}
		cuts   []*pcCut
		cutN   uint64
		host   *pcHost
	)
	plansIngest := false
	for j := range want - 1 {
		p := pcPoints[(r*5+j)%len(pcPoints)]
		plan = append(plan, &slot{point: p.name, hit: 1 + rng.IntN(p.maxHit)})
		plansIngest = plansIngest || strings.HasPrefix(p.name, "storage/ingest/")
	}
	modes := []pcCutMode{{false, 0}, {true, 0}, {false, 50}, {true, 50}}
	mode := modes[r%len(modes)]
	cutSeed := rng.Uint64()
	take := func(point string) {
		planMu.Lock()
		n := cutN
		cutN++
		h := host
		planMu.Unlock()
		c := &pcCut{point: point, mode: mode}
		crng := rand.New(rand.NewPCG(cutSeed, n))
		c.img = m.cutWith(crng, mode, func() {
			if h != nil {
				c.ackWM = h.ackWM.Load()
				c.cps = h.checkpoints()
			}
		})
		if h != nil {
			c.started = h.started.Load()
		}
		planMu.Lock()
		cuts = append(cuts, c)
		planMu.Unlock()
	}
	hit := func(name string) {
		planMu.Lock()
		hits[name]++
		k := hits[name]
		var s *slot
		for _, x := range plan {
			if !x.taken && x.point == name && x.hit == k {
				x.taken, s = true, x
				break
			}
		}
		planMu.Unlock()
		if s != nil {
			take(name)
		}
	}
	disableAll := failpoint.EnableAll(func(name string) error { hit(name); return nil })
	defer disableAll()
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if p := pcStoreOp(op); p != "" {
			hit(p)
		}
		return nil
	})
	opts := &Options{
		FlushInterval:   time.Duration(1+rng.IntN(3)) * time.Millisecond,
		MaxPendingBytes: int64(128<<10) << rng.IntN(4),
		PipelineDepth:   []int{1, 2, flush.MaxPipelineDepth}[rng.IntN(3)],
		// Flush by ingestion in half the rounds: every generation (1),
		// or the larger ones (64 KiB); the batch path in the others.
		IngestThreshold: []int64{1, 64 << 10, -1, -1}[rng.IntN(4)],
		storeFS:         errorfs.Wrap(mem, inj),
		WatchRetain:     &WatchRetention{}, // pcVerify checks the retained feed
	}
	if opts.IngestThreshold < 0 && plansIngest {
		// A round planned to cut at an ingest boundary ingests (every
		// generation), or its cut could never come: a 200-cut run left
		// storage/ingest/before-apply and after-apply with none once.
		opts.IngestThreshold = 1
	}
	ctx := context.Background()
	dir := filepath.Join(root, "engine")
	// The store lives in the engine directory, which is on the OS file
	// system (the model decides whether it survives a cut); in the MemFS
	// its path exists, durably, from the start.
	if err := testutil.MkdirDurable(mem, dir); err != nil {
		return err
	}
	db, err := Open(dir, opts)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	h := &pcHost{t: t, db: db}
	planMu.Lock()
	host = h
	planMu.Unlock()
	randomAt := time.Duration(rng.IntN(400)) * time.Millisecond
	var randomTaken bool
	for w := range pcWriters {
		h.wg.Go(func() { h.writer(ctx, w) })
	}
	for range 2 {
		h.wg.Go(func() { h.flusher(ctx) })
	}
	crng := rand.New(rand.NewPCG(rng.Uint64(), 0))
	h.wg.Go(func() {
		h.checkpointer(ctx, root, func() { time.Sleep(time.Duration(20+crng.IntN(60)) * time.Millisecond) },
			func(dir string) error { return testutil.MkdirDurable(mem, dir) })
	})
	start := time.Now()
	deadline := start.Add(1500 * time.Millisecond)
	for {
		time.Sleep(5 * time.Millisecond)
		if !randomTaken && time.Since(start) >= randomAt {
			randomTaken = true
			take("random")
		}
		planMu.Lock()
		done := len(cuts) >= want
		planMu.Unlock()
		if done || time.Now().After(deadline) || h.stop.Load() {
			break
		}
	}
	h.stop.Store(true)
	cerr := db.Close()
	h.wg.Wait()
	stopObs()
	disableAll()
	if h.firstErr != nil {
		return h.firstErr
	}
	if cerr != nil {
		return fmt.Errorf("close: %w", cerr)
	}
	// Boundaries not reached in the round's time are not cut at: later
	// rounds take the cuts missing.
	planMu.Lock()
	taken := slices.Clone(cuts)
	planMu.Unlock()
	for i, c := range taken {
		c.started = min(c.started, uint64(len(h.log))) // numbered, never begun: no write
		if err := pcVerify(ctx, root, c, h.log, st); err != nil {
			return fmt.Errorf("cut %d (%s, %s; acknowledged watermark %d, ops begun <= %d): %w", i, c.point, c.mode, c.ackWM, c.started, err)
		}
		st.cuts++
		st.replayed++
		st.checkpoints += len(c.cps)
		st.byMode[c.mode.String()]++
		st.byPoint[c.point]++
	}
	return nil
}

// cutWith is cut with before run under the model's lock before the images
// are taken (what the host had been told must be in them).
func (m *pcModel) cutWith(rng *rand.Rand, mode pcCutMode, before func()) *pcImage {
	m.mu.Lock()
	before()
	m.mu.Unlock()
	return m.cut(rng, mode)
}

// pcVerify puts c's image in place under root and checks it (see the top
// of the file).
func pcVerify(ctx context.Context, root string, c *pcCut, log []pcOp, st *pcStats) error {
	if err := emptyDir(root); err != nil {
		return err
	}
	fs, err := c.img.materialize(root)
	if err != nil {
		return err
	}
	db, err := Open(filepath.Join(root, "engine"), &Options{FlushInterval: -1, storeFS: fs, WatchRetain: &WatchRetention{}})
	if err != nil {
		return fmt.Errorf("Open after the cut: %w", err)
	}
	defer db.Close()
	wm := db.Watermark()
	switch {
	case wm < c.ackWM:
		return fmt.Errorf("watermark %d is behind %d, which a Flush returned before the cut", wm, c.ackWM)
	case wm > c.started:
		return fmt.Errorf("watermark %d is ahead of every op begun (<= %d)", wm, c.started)
	}
	got, err := pcRead(db)
	if err != nil {
		return err
	}
	if err := pcCheckAt(wm, got, pcStateAt(log, wm), pcLaterOf(log[wm:c.started])); err != nil {
		return err
	}
	// The retained feed is exactly the ops up to the watermark.
	if err := pcCheckFeed(ctx, db, log, wm); err != nil {
		return fmt.Errorf("after the cut: %w", err)
	}
	// The host replays its log from the watermark.
	for _, o := range log[wm:c.started] {
		if err := pcApply(ctx, db, o); err != nil {
			return fmt.Errorf("replay of op %d: %w", o.n, err)
		}
	}
	if err := db.Flush(ctx); err != nil {
		return fmt.Errorf("flush after the replay: %w", err)
	}
	if got := db.Watermark(); got != c.started {
		return fmt.Errorf("watermark %d after replaying ops %d..%d", got, wm+1, c.started)
	}
	got, err = pcRead(db)
	if err != nil {
		return err
	}
	if err := pcEqual(got, pcStateAt(log, c.started)); err != nil {
		return fmt.Errorf("after replaying ops %d..%d: %w", wm+1, c.started, err)
	}
	// The replay's changes follow the retained ones: none missing, none
	// twice.
	if err := pcCheckFeed(ctx, db, log, c.started); err != nil {
		return fmt.Errorf("after replaying ops %d..%d: %w", wm+1, c.started, err)
	}
	if err := db.Close(); err != nil {
		return err
	}
	done := map[string]bool{}
	for _, cp := range c.cps {
		done[cp.dir] = true
		if err := pcVerifyCheckpoint(filepath.Join(root, cp.dir), fs, cp.wm, c.started, log); err != nil {
			return fmt.Errorf("checkpoint %s (watermark %d): %w", cp.dir, cp.wm, err)
		}
	}
	// A checkpoint the cut interrupted promises nothing, but if it opens,
	// nothing under its watermark may be wrong.
	ents, _ := os.ReadDir(filepath.Join(root, "cps"))
	for _, e := range ents {
		rel := "cps/" + e.Name()
		if done[rel] {
			continue
		}
		opened, err := pcTryCheckpoint(filepath.Join(root, rel), fs, c.started, log)
		if err != nil {
			return fmt.Errorf("interrupted checkpoint %s: %w", rel, err)
		}
		if opened {
			st.interruptedOpened++
		} else {
			st.interruptedRefused++
		}
	}
	return nil
}

// pcTryCheckpoint opens a checkpoint the cut interrupted: a refusal is
// fine; an engine that opens must hold no wrong data under its watermark.
func pcTryCheckpoint(dir string, fs vfs.FS, started uint64, log []pcOp) (opened bool, err error) {
	db, err := Open(dir, &Options{FlushInterval: -1, storeFS: fs})
	if err != nil {
		return false, nil
	}
	defer db.Close()
	wm := db.Watermark()
	if wm > started {
		return true, fmt.Errorf("opens at watermark %d, above every op begun (<= %d)", wm, started)
	}
	got, err := pcRead(db)
	if err != nil {
		return true, err
	}
	if err := pcCheckAt(wm, got, pcStateAt(log, wm), pcLaterOf(log[wm:started])); err != nil {
		return true, err
	}
	return true, db.Close()
}

// pcVerifyCheckpoint opens a checkpoint that returned before the cut and
// checks it at its watermark.
func pcVerifyCheckpoint(dir string, fs vfs.FS, wm, started uint64, log []pcOp) error {
	db, err := Open(dir, &Options{FlushInterval: -1, storeFS: fs})
	if err != nil {
		return fmt.Errorf("Open after the cut: %w", err)
	}
	defer db.Close()
	if got := db.Watermark(); got != wm {
		return fmt.Errorf("opens at watermark %d", got)
	}
	got, err := pcRead(db)
	if err != nil {
		return err
	}
	if err := pcCheckAt(wm, got, pcStateAt(log, wm), pcLaterOf(log[wm:started])); err != nil {
		return err
	}
	return db.Close()
}

// pcCheckFeed checks that a durable watch from op 1 gets exactly the
// changes of ops 1..wm of the log, in op order, then a mark at wm: the
// retained change feed after a power cut (and a replay) is the durable
// state.
func pcCheckFeed(ctx context.Context, db *DB, log []pcOp, wm uint64) error {
	if wm == 0 {
		return nil
	}
	if from := db.Metrics().WatchRetainedFrom; from != 1 {
		return fmt.Errorf("the retained feed starts at op %d, not 1", from)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	w, err := db.Watch(wctx, &WatchOptions{From: 1, Durable: true})
	if err != nil {
		return fmt.Errorf("watch from op 1: %w", err)
	}
	defer w.Close()
	var want []string
	for _, o := range log[:wm] {
		for _, x := range o.writes {
			e := WatchEvent{Op: o.n}
			switch x.kind {
			case 'p':
				e.Kind, e.Keyspace, e.Key, e.Value = EventPut, x.ks, []byte(x.key), []byte(x.value)
			case 'd':
				e.Kind, e.Keyspace, e.Key = EventDelete, x.ks, []byte(x.key)
			case 'r':
				e.Kind, e.Keyspace, e.Key, e.End = EventDeleteRange, x.ks, []byte(x.key), []byte(x.hi)
			case 'x':
				e.Kind, e.Keyspace = EventDropKeyspace, x.ks
			case 'S':
				e.Kind, e.Bitslice, e.Lo, e.Hi, e.Bit = EventSetBits, x.bs, x.lo, x.hiBit, x.v
			default: // 's', 'c'
				e.Kind, e.Bitslice, e.Lo, e.Hi, e.Bit = EventSetBits, x.bs, x.lo, x.lo+1, x.v
			}
			want = append(want, evText(e))
		}
	}
	var got []string
	for {
		e, err := w.Next(wctx)
		if err != nil {
			return fmt.Errorf("watch from op 1: %w", err)
		}
		if e.Kind == EventResolved {
			if e.Op != wm {
				return fmt.Errorf("watch from op 1: first mark %d, watermark %d", e.Op, wm)
			}
			break
		}
		got = append(got, evText(e))
	}
	if !slices.Equal(got, want) {
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				return fmt.Errorf("retained feed to op %d: %d changes, want %d; first difference at %d: %s, want %s", wm, len(got), len(want), i, got[i], want[i])
			}
		}
		return fmt.Errorf("retained feed to op %d: %d changes, want %d", wm, len(got), len(want))
	}
	return nil
}
