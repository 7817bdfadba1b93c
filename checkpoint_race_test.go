package kvbuf

// TestCheckpointRacingCatalogChanges (issue 30): checkpoints taken back to
// back while keyspaces are created and dropped, bitslices created, ops
// written as single calls and batches, and flushes run in a tight loop, at
// GOMAXPROCS well above the cores. Every copy must open as an engine of its
// own at the watermark Checkpoint returned, hold every op at or below it
// wholly, and, after the host's log is replayed from that watermark + 1,
// have the digest of the source. (An earlier Checkpoint listed the
// bitslices before it held flushes off: a bitslice created and recorded by
// a flush in between was in the copy's store but not in its bits
// directory, and the copy failed to open with ErrCorruptDir.)

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ckOp is one op of the host log of TestCheckpointRacingCatalogChanges.
// Each op writes keys and bits no other op writes, so that whether it is
// wholly in a copy can be read off the copy.
type ckOp struct {
	n    uint64
	kind byte // 'p' single calls, 'b' Batch, 't' put into a churned keyspace, 'x' drop it, 'n' new bitslice
	ks   string
	bits string
}

// ckKeyspaces are never dropped; "t0".."t3" are created and dropped.
var ckKeyspaces = []string{"p0", "p1", "p2"}

const ckChurned = 4

// ckCopies is the number of checkpoints of the normal run; the stress
// flag (-kvbuf.stress or KVBUF_STRESS) takes as many as its duration
// allows. ckOpsPerCopy bounds the ops written per checkpoint made.
const (
	ckCopies     = 24
	ckOpsPerCopy = 25
)

func ckKey(n uint64, part byte) []byte   { return fmt.Appendf(nil, "k%08d%c", n, part) }
func ckValue(n uint64, part byte) []byte { return fmt.Appendf(nil, "v%d%c", n, part) }

// ckApply writes op o to db as the host does (replaying included): single
// calls ended with EndOp, or one Batch.
func ckApply(ctx context.Context, db *DB, o ckOp) error {
	n := o.n
	switch o.kind {
	case 'p':
		k, err := db.KV(o.ks)
		if err != nil {
			return err
		}
		live, err := db.Bits("live")
		if err != nil {
			return err
		}
		if err := k.Put(ctx, ckKey(n, 'a'), ckValue(n, 'a'), n); err != nil {
			return err
		}
		if err := k.Put(ctx, ckKey(n, 'b'), ckValue(n, 'b'), n); err != nil {
			return err
		}
		if err := k.Delete(ctx, ckKey(n, 'b'), n); err != nil {
			return err
		}
		if err := live.Set(ctx, n, true, n); err != nil {
			return err
		}
	case 'b':
		k, err := db.KV(o.ks)
		if err != nil {
			return err
		}
		k2, err := db.KV(ckKeyspaces[(n+1)%uint64(len(ckKeyspaces))])
		if err != nil {
			return err
		}
		live, err := db.Bits("live")
		if err != nil {
			return err
		}
		return db.Update(ctx, n, func(b *Batch) error {
			b.Put(k, ckKey(n, 'a'), ckValue(n, 'a'))
			b.Put(k, ckKey(n, 'b'), ckValue(n, 'b'))
			b.Put(k, ckKey(n, 'c'), ckValue(n, 'c'))
			b.DeleteRange(k, ckKey(n, 'b'), ckKey(n, 'c'))
			b.Put(k2, ckKey(n, 'z'), ckValue(n, 'z'))
			b.SetRange(live, n*4, n*4+3, true)
			return nil
		})
	case 't':
		k, err := db.KV(o.ks)
		if err != nil {
			return err
		}
		if err := k.Put(ctx, ckKey(n, 'a'), ckValue(n, 'a'), n); err != nil {
			return err
		}
	case 'x':
		if err := db.DropKV(ctx, o.ks, n); err != nil {
			return err
		}
	case 'n':
		b, err := db.Bits(o.bits)
		if err != nil {
			return err
		}
		if err := b.Set(ctx, n%1000, true, n); err != nil {
			return err
		}
	}
	return db.EndOp(ctx, n)
}

// ckWhole checks that op o is wholly in db (every op up to the copy's
// watermark is). Ops on churned keyspaces are not checked: a drop of a
// later op may be in the copy too (a flush persists every pending write).
func ckWhole(db *DB, o ckOp) error {
	n := o.n
	want := func(ks string, part byte, present bool) error {
		k, err := db.KV(ks)
		if err != nil {
			return err
		}
		v, err := k.Get(ckKey(n, part))
		switch {
		case present && (err != nil || string(v) != string(ckValue(n, part))):
			return fmt.Errorf("op %d (%c): %s/%s = %q, %v; want %q", n, o.kind, ks, ckKey(n, part), v, err, ckValue(n, part))
		case !present && !errors.Is(err, ErrNotFound):
			return fmt.Errorf("op %d (%c): %s/%s = %q, %v; want it absent", n, o.kind, ks, ckKey(n, part), v, err)
		}
		return nil
	}
	bit := func(name string, i uint64) error {
		if !slices.Contains(db.Bitslices(), name) {
			return fmt.Errorf("op %d (%c): bitslice %q missing", n, o.kind, name)
		}
		b, err := db.Bits(name)
		if err != nil {
			return err
		}
		if v, err := b.Get(i); err != nil || !v {
			return fmt.Errorf("op %d (%c): bitslice %q bit %d = %v, %v; want true", n, o.kind, name, i, v, err)
		}
		return nil
	}
	var errs []error
	switch o.kind {
	case 'p':
		errs = append(errs, want(o.ks, 'a', true), want(o.ks, 'b', false), bit("live", n))
	case 'b':
		errs = append(errs, want(o.ks, 'a', true), want(o.ks, 'b', false), want(o.ks, 'c', true),
			want(ckKeyspaces[(n+1)%uint64(len(ckKeyspaces))], 'z', true), bit("live", n*4), bit("live", n*4+2))
	case 'n':
		errs = append(errs, bit(o.bits, n%1000))
	}
	return errors.Join(errs...)
}

// ckHost numbers ops under its log's lock, begins each there and records it.
type ckHost struct {
	db  *DB
	mu  sync.Mutex
	log []ckOp // log[i] is op i+1
}

func (h *ckHost) begin(ctx context.Context, o ckOp) (ckOp, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	o.n = uint64(len(h.log)) + 1
	if o.kind == 'n' {
		o.bits = fmt.Sprintf("n%05d", o.n)
	}
	if err := h.db.BeginOp(ctx, o.n); err != nil {
		return o, err
	}
	h.log = append(h.log, o)
	return o, nil
}

func (h *ckHost) logged() []ckOp {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.log)
}

type ckCopy struct {
	dir string
	wm  uint64
}

func TestCheckpointRacingCatalogChanges(t *testing.T) {
	stressSetup(t)
	seed := testSeed(t)
	db := stressOpen(t, filepath.Join(t.TempDir(), "engine"), &Options{FlushInterval: time.Millisecond, MaxPendingBytes: 1 << 20})
	h := &ckHost{db: db}
	ctx := context.Background()
	r := newStressRun(t)
	var (
		ops        atomic.Int64
		copiesMade atomic.Int64
		inFlight   atomic.Bool // a Checkpoint is running
		cpMu       sync.Mutex
		copies     []ckCopy
	)
	// The ops are spread over the checkpoints (every copy replays the log
	// from its watermark): at most ckOpsPerCopy more per copy made.
	paced := func(sw *stressWorker) bool {
		for ops.Load() >= (copiesMade.Load()+1)*ckOpsPerCopy {
			if sw.stopped() {
				return false
			}
			time.Sleep(100 * time.Microsecond)
		}
		sw.pause()
		return !sw.stopped()
	}
	for w := range 3 {
		r.goWork(fmt.Sprintf("writer %d", w), func(sw *stressWorker) {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for paced(sw) {
				o := ckOp{kind: "pb"[rng.IntN(2)], ks: ckKeyspaces[rng.IntN(len(ckKeyspaces))]}
				o, err := h.begin(ctx, o)
				if err == nil {
					err = ckApply(ctx, db, o)
				}
				if err != nil {
					r.failf("writer %d: op %d: %v", w, o.n, err)
					return
				}
				ops.Add(1)
			}
		})
	}
	// One goroutine churns the catalogs: keyspaces t0..t3 are written and
	// dropped, and bitslices are created, mostly while a checkpoint runs
	// (every copy holds every bitslice: they are kept few). Its ops are
	// sequential, so a replay in op order reproduces them.
	r.goWork("churner", func(sw *stressWorker) {
		rng := rand.New(rand.NewPCG(seed, 99))
		for paced(sw) {
			o := ckOp{ks: fmt.Sprintf("t%d", rng.IntN(ckChurned))}
			switch k := rng.IntN(100); {
			case k < 70 && inFlight.Load(), k < 2:
				o.kind = 'n'
			case k < 85:
				o.kind = 't'
			default:
				o.kind = 'x'
			}
			o, err := h.begin(ctx, o)
			if err == nil {
				err = ckApply(ctx, db, o)
			}
			if err != nil {
				r.failf("churner: op %d: %v", o.n, err)
				return
			}
			ops.Add(1)
		}
	})
	stressFlusher(r, db, 7, nil)
	// The engine is on the disk (its flushes hold generation writes for
	// the time of real syncs, as in production); the copies, opened and
	// replayed one by one afterwards, on tmpfs if there is one.
	cpRoot := filepath.Dir(stressDir(t))
	r.goWork("checkpointer", func(sw *stressWorker) {
		for i := 0; !sw.stopped(); i++ {
			dir := filepath.Join(cpRoot, fmt.Sprintf("cp%03d", i))
			inFlight.Store(true)
			wm, err := db.Checkpoint(ctx, dir)
			inFlight.Store(false)
			if err != nil {
				r.failf("Checkpoint %d: %v", i, err)
				return
			}
			cpMu.Lock()
			copies = append(copies, ckCopy{dir, wm})
			cpMu.Unlock()
			copiesMade.Add(1)
		}
	})
	n := int64(ckCopies)
	if *stressFor > 0 || os.Getenv("KVBUF_STRESS") != "" {
		n = math.MaxInt64 // as many as the duration allows
	}
	r.runUntil(stressDuration(time.Second), stressDuration(time.Minute), func() bool { return copiesMade.Load() >= n })

	log := h.logged()
	snap, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	want, err := snap.Digest(ctx)
	snap.Close()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	var bad []string
	for _, c := range copies {
		r.main.beat()
		if err := ckVerifyCopy(ctx, c, log, want); err != nil {
			bad = append(bad, fmt.Sprintf("checkpoint %s (watermark %d of %d ops): %v", filepath.Base(c.dir), c.wm, len(log), err))
		}
	}
	if len(bad) > 0 {
		t.Fatalf("%d of %d checkpoints are wrong; the first:\n%s", len(bad), len(copies), bad[0])
	}
	t.Logf("%d checkpoints of %d ops verified in %v (%d bitslices, %d keyspaces at the end)",
		len(copies), len(log), time.Since(began).Round(time.Millisecond), len(db.Bitslices()), len(db.Keyspaces()))
}

// ckVerifyCopy opens copy c, checks it at its watermark, replays the log
// from there and compares its digest with want.
func ckVerifyCopy(ctx context.Context, c ckCopy, log []ckOp, want string) error {
	cdb, err := Open(c.dir, nil)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer cdb.Close()
	if got := cdb.Watermark(); got != c.wm {
		return fmt.Errorf("opens at watermark %d", got)
	}
	for _, o := range log[:c.wm] {
		if err := ckWhole(cdb, o); err != nil {
			return fmt.Errorf("at its watermark: %w", err)
		}
	}
	for _, o := range log[c.wm:] {
		if err := ckApply(ctx, cdb, o); err != nil {
			return fmt.Errorf("replay of op %d: %w", o.n, err)
		}
	}
	snap, err := cdb.NewSnapshot()
	if err != nil {
		return err
	}
	defer snap.Close()
	got, err := snap.Digest(ctx)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("digest after the replay of ops %d..%d is %s, the engine's %s", c.wm+1, len(log), got, want)
	}
	return cdb.Close()
}

// TestCheckpointBitsCreatedMidway puts a bitslice's creation and the flush
// that records it exactly where Checkpoint has listed the bitslices it
// copies: the copy must open, with the new bitslice whole or without it
// (and then its watermark below the op that set its bit).
func TestCheckpointBitsCreatedMidway(t *testing.T) {
	hooks := &testHooks{}
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1, hooks: hooks})
	mustSet(t, mustBits(t, db, "old"), 1, true, 1)
	if err := db.EndOp(ctx, 1); err != nil {
		t.Fatal(err)
	}
	flushed := make(chan error, 1)
	hooks.checkpointListed = func() {
		hooks.checkpointListed = nil
		b, err := db.Bits("new")
		if err == nil {
			err = b.Set(ctx, 7, true, 2)
		}
		if err == nil {
			err = db.EndOp(ctx, 2)
		}
		if err != nil {
			flushed <- err
			return
		}
		// Checkpoint holds flushes off here, so the flush waits for it;
		// if it does not (the lock is free), the flush completes first.
		if db.writeMu.TryLock() {
			db.writeMu.Unlock()
			flushed <- db.Flush(ctx)
			return
		}
		go func() { flushed <- db.Flush(ctx) }()
	}
	cp := filepath.Join(t.TempDir(), "cp")
	wm, err := db.Checkpoint(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	closeT(t, db)
	c, err := Open(cp, nil)
	if err != nil {
		t.Fatalf("the checkpoint (watermark %d) does not open: %v", wm, err)
	}
	defer closeT(t, c)
	switch has := slices.Contains(c.Bitslices(), "new"); {
	case has && wm >= 2:
		wantBit(t, mustBits(t, c, "new"), 7, true)
	case !has && wm >= 2:
		t.Fatalf("the checkpoint's watermark %d covers op 2, but it has no bitslice \"new\"", wm)
	}
	wantBit(t, mustBits(t, c, "old"), 1, true)
}
