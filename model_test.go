package kvbuf

// A model-based randomized test: goroutines run random operations — Put,
// Delete, DeleteRange, Get, GetMany, scans in both directions, Set,
// SetRange, bit reads, batches, snapshots, DropKV and Flush — against the
// engine and an in-memory model; between rounds the engine is flushed,
// closed and reopened, or closed while the goroutines are still writing.
// Each goroutine owns its keys ("g<i>/..." in the shared keyspace "model"),
// its own keyspace "own-<i>" (which it drops and recreates), its bits
// (indexes = i mod G, so goroutines share words but never bits) and a block
// of bits for SetRange, which makes every read exactly checkable despite
// the concurrency. Writes carry op numbers as a database with concurrent
// writers hands them out (issue 20): a goroutine numbers its op and begins
// it (BeginOp) under one lock, writes it and ends it (EndOp, or a batch)
// outside it, so ops end in any order; no such write may be refused. Now
// and then a goroutine writes an op it ended before (a host bug): that
// write must fail with ErrStaleOp or be skipped as redelivered, and change
// nothing. Between rounds the watermark must cover no op still open. A
// failure prints the seed; replay it with -kvbuf.seed (and the same
// -model.steps and -model.goroutines).

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

var (
	modelSteps      = flag.Int("model.steps", 2400, "operations per goroutine in TestModel")
	modelGoroutines = flag.Int("model.goroutines", 4, "goroutines in TestModel")
)

// Op kinds counted by modelWorker, for the logs.
const (
	mPut = iota
	mDelete
	mDeleteRange
	mGet
	mGetMany
	mScan
	mSet
	mSetRange
	mGetBit
	mBatch
	mSnapshot
	mDropKV
	mFlush
	mStale
	mClosed
	mKinds
)

var modelKindNames = [mKinds]string{"put", "delete", "deleterange", "get", "getmany", "scan", "set", "setrange",
	"getbit", "batch", "snapshot", "dropkv", "flush", "stale", "closed"}

// modelCounts counts operations by kind.
type modelCounts [mKinds]atomic.Int64

func (c *modelCounts) String() string {
	var b bytes.Buffer
	for i := range c {
		fmt.Fprintf(&b, "%s=%d ", modelKindNames[i], c[i].Load())
	}
	return b.String()
}

// goModel is one goroutine's share of the model.
type goModel struct {
	kv   map[string]string // its keys in the shared keyspace "model"
	own  map[string]string // its keyspace "own-<g>"
	bits map[uint64]bool   // its bits (only true ones)
}

func newGoModel() *goModel {
	return &goModel{kv: map[string]string{}, own: map[string]string{}, bits: map[uint64]bool{}}
}

func (m *goModel) clone() *goModel {
	return &goModel{kv: maps.Clone(m.kv), own: maps.Clone(m.own), bits: maps.Clone(m.bits)}
}

// modelEnv is what the workers share.
type modelEnv struct {
	db       *DB
	G        int
	op       atomic.Uint64 // op numbers handed out
	maxAcked atomic.Uint64 // highest op of an acknowledged write
	counts   modelCounts

	logMu     sync.Mutex      // the host's log lock: numbers and begins ops
	open      map[uint64]bool // ops begun whose end did not return (under logMu)
	abandoned bool            // a close midway left ops open, and no op ended since (under logMu)
}

// begin numbers and begins the next op, as a host does under its log lock.
func (e *modelEnv) begin() (uint64, error) {
	e.logMu.Lock()
	defer e.logMu.Unlock()
	o := e.op.Add(1)
	if err := e.db.BeginOp(ctx, o); err != nil {
		return 0, err
	}
	if e.open == nil {
		e.open = map[uint64]bool{}
	}
	e.open[o] = true
	return o, nil
}

// end ends o; ended says a batch ended it already.
func (e *modelEnv) end(o uint64, ended bool) error {
	if !ended {
		if err := e.db.EndOp(ctx, o); err != nil {
			return err
		}
	}
	e.logMu.Lock()
	delete(e.open, o)
	e.abandoned = false // every op below o is complete now
	e.logMu.Unlock()
	return nil
}

// minOpen returns the lowest op still open, or 0.
func (e *modelEnv) minOpen() uint64 {
	e.logMu.Lock()
	defer e.logMu.Unlock()
	var lo uint64
	for o := range e.open {
		if lo == 0 || o < lo {
			lo = o
		}
	}
	return lo
}

func (e *modelEnv) acked(o uint64) {
	for cur := e.maxAcked.Load(); o > cur && !e.maxAcked.CompareAndSwap(cur, o); cur = e.maxAcked.Load() {
	}
}

// Bit layout: bit j*G+g belongs to goroutine g (j < modelBitSpan, plus a
// few far ones, j < modelBitSpan+2^14, that grow the file); goroutine g's
// SetRange block is
// [modelBlockBase+g*modelBlock, +modelBlock).
const (
	modelBitSpan   = 2048
	modelBlockBase = 1 << 22 // above every ownBit of up to 200 goroutines
	modelBlock     = 512
)

func ownBit(rng *rand.Rand, g, G int) uint64 {
	j := uint64(rng.IntN(modelBitSpan))
	if rng.IntN(50) == 0 {
		j += uint64(rng.IntN(1 << 14)) // far: grows the file
	}
	return j*uint64(G) + uint64(g)
}

// modelWorker runs n random operations of goroutine g. An ErrClosed ends
// it quietly (Close began); any other surprise is returned.
func modelWorker(e *modelEnv, g int, rng *rand.Rand, n int, m *goModel, tick func()) error {
	db, G, counts := e.db, e.G, &e.counts
	closed := func(err error) bool {
		if errors.Is(err, ErrClosed) {
			counts[mClosed].Add(1)
			return true
		}
		return false
	}
	k, err := db.KV("model")
	if err != nil {
		if closed(err) {
			return nil
		}
		return err
	}
	ownName := fmt.Sprintf("own-%d", g)
	own, err := db.KV(ownName)
	if err != nil {
		if closed(err) {
			return nil
		}
		return err
	}
	b, err := db.Bits("model")
	if err != nil {
		if closed(err) {
			return nil
		}
		return err
	}
	key := func() string { return fmt.Sprintf("g%d/%03d", g, rng.IntN(64)) }
	ownKey := func() string { return fmt.Sprintf("%02d", rng.IntN(32)) }
	// write begins an op, runs a write of it, applies it to the model if
	// it was acknowledged, and ends the op. One write in 16 is instead a
	// late write of an op this goroutine ended: refused with ErrStaleOp or
	// skipped as redelivered, it must change nothing.
	var lastEnded uint64
	write := func(kind int, do func(o uint64) error, apply func()) error {
		counts[kind].Add(1)
		if lastEnded > 0 && rng.IntN(16) == 0 {
			err := do(lastEnded)
			if err == nil || errors.Is(err, ErrStaleOp) {
				counts[mStale].Add(1)
				return nil
			}
			return err
		}
		o, err := e.begin()
		if err != nil {
			return err
		}
		if err := do(o); err != nil {
			return err
		}
		apply()
		e.acked(o)
		if rng.IntN(4) == 0 {
			runtime.Gosched() // let later ops end first
		}
		if err := e.end(o, kind == mBatch); err != nil {
			return err
		}
		lastEnded = o
		return nil
	}
	var snap *Snapshot
	var snapModel *goModel
	defer func() {
		if snap != nil {
			snap.Close()
		}
	}()
	for range n {
		tick()
		var err error
		switch p := rng.IntN(100); {
		case p < 20:
			kk, v := key(), fmt.Sprintf("v%d-%d", g, rng.Uint32())
			err = write(mPut, func(o uint64) error { return k.Put(ctx, []byte(kk), []byte(v), o) }, func() { m.kv[kk] = v })
		case p < 25:
			kk := key()
			err = write(mDelete, func(o uint64) error { return k.Delete(ctx, []byte(kk), o) }, func() { delete(m.kv, kk) })
		case p < 27:
			lo, hi := key(), key()
			if lo > hi {
				lo, hi = hi, lo
			}
			err = write(mDeleteRange, func(o uint64) error { return k.DeleteRange(ctx, []byte(lo), []byte(hi), o) }, func() {
				for kk := range m.kv {
					if kk >= lo && kk < hi {
						delete(m.kv, kk)
					}
				}
			})
		case p < 32:
			kk, v := ownKey(), fmt.Sprint(rng.Uint32())
			err = write(mPut, func(o uint64) error { return own.Put(ctx, []byte(kk), []byte(v), o) }, func() { m.own[kk] = v })
		case p < 42:
			kk := key()
			var v []byte
			v, err = k.Get([]byte(kk))
			want, ok := m.kv[kk]
			switch {
			case closed(err):
				return nil
			case ok && (err != nil || string(v) != want):
				return fmt.Errorf("g%d Get(%s) = %q, %v; want %q", g, kk, v, err, want)
			case !ok && !errors.Is(err, ErrNotFound):
				return fmt.Errorf("g%d Get(%s) = %q, %v; want ErrNotFound", g, kk, v, err)
			}
			err = nil
			counts[mGet].Add(1)
		case p < 45:
			keys := make([][]byte, 1+rng.IntN(40))
			for i := range keys {
				keys[i] = []byte(key())
			}
			vals := make([][]byte, len(keys))
			if _, err = k.GetMany(keys, vals, nil); err == nil {
				for i, kk := range keys {
					want, ok := m.kv[string(kk)]
					if ok != (vals[i] != nil) || ok && string(vals[i]) != want {
						return fmt.Errorf("g%d GetMany(%s) = %q; want %q (present %v)", g, kk, vals[i], want, ok)
					}
				}
			}
			counts[mGetMany].Add(1)
		case p < 50:
			err = scanOwn(k, g, m.kv, rng.IntN(2) == 0)
			if err == nil {
				err = scanKeyspace(own, m.own, ownName)
			}
			counts[mScan].Add(1)
		case p < 62:
			i, v := ownBit(rng, g, G), rng.IntN(2) == 0
			err = write(mSet, func(o uint64) error { return b.Set(ctx, i, v, o) }, func() { setModelBit(m.bits, i, v) })
		case p < 65:
			base := uint64(modelBlockBase + g*modelBlock)
			lo := base + uint64(rng.IntN(modelBlock))
			hi := lo + uint64(rng.IntN(int(base+modelBlock-lo)+1))
			v := rng.IntN(2) == 0
			err = write(mSetRange, func(o uint64) error { return b.SetRange(ctx, lo, hi, v, o) }, func() {
				for i := lo; i < hi; i++ {
					setModelBit(m.bits, i, v)
				}
			})
		case p < 75:
			i := ownBit(rng, g, G)
			if rng.IntN(4) == 0 {
				i = modelBlockBase + uint64(g*modelBlock+rng.IntN(modelBlock))
			}
			var v bool
			v, err = b.Get(i)
			if err == nil && v != m.bits[i] {
				return fmt.Errorf("g%d bit %d = %v, want %v", g, i, v, m.bits[i])
			}
			counts[mGetBit].Add(1)
		case p < 85:
			kk, kk2, v := key(), key(), fmt.Sprintf("b%d-%d", g, rng.Uint32())
			ok2 := ownKey()
			i := ownBit(rng, g, G)
			err = write(mBatch, func(o uint64) error {
				bt := db.NewBatch()
				bt.Put(k, []byte(kk), []byte(v))
				bt.Delete(k, []byte(kk2))
				bt.Put(own, []byte(ok2), []byte(v))
				bt.Set(b, i, true)
				return db.Apply(ctx, bt, o)
			}, func() {
				m.kv[kk] = v
				if kk2 != kk {
					delete(m.kv, kk2)
				} else {
					delete(m.kv, kk)
				}
				m.own[ok2] = v
				m.bits[i] = true
			})
		case p < 90:
			counts[mSnapshot].Add(1)
			if snap == nil {
				snap, err = db.NewSnapshot()
				if err == nil {
					snapModel = m.clone()
				}
				break
			}
			err = checkSnapshot(snap, g, G, snapModel)
			snap.Close()
			snap = nil
		case p < 91:
			err = write(mDropKV, func(o uint64) error { return db.DropKV(ctx, ownName, o) }, func() { clear(m.own) })
			if err == nil {
				own, err = db.KV(ownName) // a new, empty keyspace
			}
		default:
			err = db.Flush(ctx)
			counts[mFlush].Add(1)
		}
		if err != nil {
			if closed(err) {
				return nil
			}
			return fmt.Errorf("g%d: %w", g, err)
		}
	}
	return nil
}

func setModelBit(bits map[uint64]bool, i uint64, v bool) {
	if v {
		bits[i] = true
	} else {
		delete(bits, i)
	}
}

// scanOwn compares a scan of goroutine g's keys in the shared keyspace
// with its model, forwards or backwards.
func scanOwn(k *KV, g int, m map[string]string, reverse bool) error {
	lo, hi := fmt.Sprintf("g%d/", g), fmt.Sprintf("g%d0", g) // '0' follows '/'
	it, err := k.NewIter(&IterOptions{LowerBound: []byte(lo), UpperBound: []byte(hi)})
	if err != nil {
		return err
	}
	var got []string
	if reverse {
		for ok := it.Last(); ok; ok = it.Prev() {
			got = append(got, string(it.Key())+"="+string(it.Value()))
		}
		slices.Reverse(got)
	} else {
		for ok := it.First(); ok; ok = it.Next() {
			got = append(got, string(it.Key())+"="+string(it.Value()))
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return err
	}
	want := sortedKV(m)
	if !slices.Equal(got, want) && len(got)+len(want) > 0 {
		return fmt.Errorf("g%d scan (reverse %v):\n got %v\nwant %v", g, reverse, got, want)
	}
	return nil
}

// scanKeyspace compares a full scan of r with m.
func scanKeyspace(r iterable, m map[string]string, name string) error {
	it, err := r.NewIter(nil)
	if err != nil {
		return err
	}
	var got []string
	for ok := it.First(); ok; ok = it.Next() {
		got = append(got, string(it.Key())+"="+string(it.Value()))
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return err
	}
	if want := sortedKV(m); !slices.Equal(got, want) && len(got)+len(want) > 0 {
		return fmt.Errorf("scan of %s:\n got %v\nwant %v", name, got, want)
	}
	return nil
}

func sortedKV(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, kk := range slices.Sorted(maps.Keys(m)) {
		out = append(out, kk+"="+m[kk])
	}
	return out
}

// checkSnapshot compares what snapshot s shows of goroutine g with the
// model taken at the snapshot.
func checkSnapshot(s *Snapshot, g, G int, m *goModel) error {
	sk, err := s.KV("model")
	if err != nil {
		return err
	}
	lo, hi := fmt.Sprintf("g%d/", g), fmt.Sprintf("g%d0", g)
	it, err := sk.NewIter(&IterOptions{LowerBound: []byte(lo), UpperBound: []byte(hi)})
	if err != nil {
		return err
	}
	var got []string
	for ok := it.First(); ok; ok = it.Next() {
		got = append(got, string(it.Key())+"="+string(it.Value()))
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return err
	}
	if want := sortedKV(m.kv); !slices.Equal(got, want) && len(got)+len(want) > 0 {
		return fmt.Errorf("g%d snapshot scan:\n got %v\nwant %v", g, got, want)
	}
	so, err := s.KV(fmt.Sprintf("own-%d", g))
	if err != nil {
		return err
	}
	for kk, v := range m.own {
		if got, err := so.Get([]byte(kk)); err != nil || string(got) != v {
			return fmt.Errorf("g%d snapshot own Get(%s) = %q, %w; want %q", g, kk, got, err, v)
		}
	}
	sb, err := s.Bits("model")
	if err != nil {
		return err
	}
	for i := range m.bits {
		if v, err := sb.Get(i); err != nil || !v {
			return fmt.Errorf("g%d snapshot bit %d = %v, %w; want true", g, i, v, err)
		}
	}
	for j := range uint64(64) {
		i := j*uint64(G) + uint64(g)
		if v, err := sb.Get(i); err != nil || v != m.bits[i] {
			return fmt.Errorf("g%d snapshot bit %d = %v, %w; want %v", g, i, v, err, m.bits[i])
		}
	}
	return nil
}

// verifyModel checks every goroutine's keys (by Get and by scan), its own
// keyspace, its bits, and the bitslice's Count (the sum of the models).
func verifyModel(db *DB, G int, models []*goModel) error {
	k, err := db.KV("model")
	if err != nil {
		return err
	}
	b, err := db.Bits("model")
	if err != nil {
		return err
	}
	total := 0
	for g, m := range models {
		if err := scanOwn(k, g, m.kv, false); err != nil {
			return err
		}
		if err := scanOwn(k, g, m.kv, true); err != nil {
			return err
		}
		own, err := db.KV(fmt.Sprintf("own-%d", g))
		if err != nil {
			return err
		}
		if err := scanKeyspace(own, m.own, own.Name()); err != nil {
			return err
		}
		for i := range 64 {
			kk := fmt.Sprintf("g%d/%03d", g, i)
			v, err := k.Get([]byte(kk))
			want, ok := m.kv[kk]
			if ok && (err != nil || string(v) != want) || !ok && !errors.Is(err, ErrNotFound) {
				return fmt.Errorf("Get(%s) = %q, %v; want %q (present %v)", kk, v, err, want, ok)
			}
		}
		for i := range m.bits {
			if v, err := b.Get(i); err != nil || !v {
				return fmt.Errorf("bit %d (g%d) = %v, %v; want true", i, g, v, err)
			}
		}
		for j := range uint64(modelBitSpan) { // bits never set read false
			i := j*uint64(G) + uint64(g)
			if !m.bits[i] {
				if v, err := b.Get(i); err != nil || v {
					return fmt.Errorf("bit %d (g%d) = %v, %v; want false", i, g, v, err)
				}
			}
		}
		for i := uint64(modelBlockBase + g*modelBlock); i < uint64(modelBlockBase+(g+1)*modelBlock); i++ {
			if v, err := b.Get(i); err != nil || v != m.bits[i] {
				return fmt.Errorf("block bit %d (g%d) = %v, %v; want %v", i, g, v, err, m.bits[i])
			}
		}
		total += len(m.bits)
	}
	if c, err := b.Count(); err != nil || c != uint64(total) {
		return fmt.Errorf("Count = %d, %v; want %d", c, err, total)
	}
	return nil
}

func waitChan(wg *sync.WaitGroup) <-chan struct{} {
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	return ch
}

func TestModel(t *testing.T) {
	seed := testSeed(t)
	steps, G := *modelSteps, *modelGoroutines
	if testing.Short() {
		steps = min(steps, 400)
	}
	t.Logf("%d goroutines × %d steps (-model.steps, -model.goroutines)", G, steps)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d: "+format, append([]any{seed}, args...)...)
	}
	dir := t.TempDir()
	models := make([]*goModel, G)
	for g := range models {
		models[g] = newGoModel()
	}
	const rounds = 8
	main := rand.New(rand.NewPCG(seed, 0))
	opts := func() *Options {
		// Generations through the WAL or ingested, and a read tier that
		// evicts often or none.
		return &Options{FlushInterval: -1, MaxPendingBytes: 1 << 20, PipelineDepth: 1 + main.IntN(4),
			IngestThreshold: []int64{-1, 1, 64 << 10}[main.IntN(3)], ReadTierBytes: []int64{-1, 256 << 10}[main.IntN(2)]}
	}
	e := &modelEnv{db: openT(t, dir, opts()), G: G}
	defer func() { closeT(t, e.db) }()
	// checkWatermark: the watermark covers no op still open (begun, its
	// end not returned), and, with none open, every acknowledged op (but
	// not when a close midway left ops open and no op ended since).
	checkWatermark := func(when string) {
		wm, op, acked, lo := e.db.Watermark(), e.op.Load(), e.maxAcked.Load(), e.minOpen()
		if wm > op || lo > 0 && wm >= lo || lo == 0 && wm < acked && !e.abandoned {
			fail("%s: watermark %d; ops handed out %d, highest acknowledged %d, lowest open %d", when, wm, op, acked, lo)
		}
	}
	for r := range rounds {
		closeMidway := main.IntN(4) == 0
		var progress atomic.Int64
		half := make(chan struct{})
		var halfOnce sync.Once
		var wg sync.WaitGroup
		errs := make(chan error, G)
		for g := range G {
			rng := rand.New(rand.NewPCG(seed, uint64(r*G+g+1)))
			wg.Go(func() {
				if err := modelWorker(e, g, rng, steps/rounds, models[g], func() {
					if progress.Add(1) == int64(G*steps/rounds/2) {
						halfOnce.Do(func() { close(half) })
					}
				}); err != nil {
					errs <- err
				}
			})
		}
		if closeMidway {
			// Close while the goroutines are still working: they see
			// ErrClosed from then on, and the model holds only what they
			// were acknowledged.
			select {
			case <-half:
			case <-waitChan(&wg):
			}
			closeT(t, e.db)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			fail("round %d: %v", r, err)
		}
		switch {
		case closeMidway:
			e.db = openT(t, dir, opts())
			checkWatermark("reopen after a close midway")
			// Ops left open by the close are gone with the session; the
			// host replays them (here: none of their writes were
			// acknowledged as a whole, and the model holds only what was).
			e.abandoned = len(e.open) > 0
			clear(e.open)
		case main.IntN(3) == 0:
			closeT(t, e.db)
			e.db = openT(t, dir, opts())
			checkWatermark("reopen")
		case main.IntN(2) == 0:
			if err := e.db.Flush(ctx); err != nil {
				fail("flush: %v", err)
			}
			checkWatermark("flush")
		}
		if err := verifyModel(e.db, G, models); err != nil {
			fail("after round %d (close midway %v): %v", r, closeMidway, err)
		}
	}
	closeT(t, e.db)
	e.db = openT(t, dir, nil)
	if err := verifyModel(e.db, G, models); err != nil {
		fail("after the final reopen: %v", err)
	}
	checkWatermark("final reopen")
	last := e.op.Add(1) // an op without writes: an empty batch
	if err := e.db.Apply(ctx, e.db.NewBatch(), last); err != nil {
		fail("Apply of an empty batch: %v", err)
	}
	if err := e.db.Flush(ctx); err != nil {
		fail("flush: %v", err)
	}
	if wm := e.db.Watermark(); wm != last {
		fail("watermark %d after the last op %d", wm, last)
	}
	t.Logf("ops: %v", &e.counts)
}
