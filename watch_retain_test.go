package kvbuf

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/kvbuf/kvbuf/internal/testutil"
)

// retainHost is a host that numbers its ops, writes each as one Batch and
// keeps every op's changes in its log (as the events a watch reports).
type retainHost struct {
	ops    map[uint64][]string
	rng    *rand.Rand
	noBits bool // KV changes only
}

func newRetainHost(seed uint64) *retainHost {
	return &retainHost{ops: map[uint64][]string{}, rng: rand.New(rand.NewPCG(seed, 31))}
}

// evText renders a change event for comparison.
func evText(e WatchEvent) string {
	switch e.Kind {
	case EventSetBits:
		return fmt.Sprintf("%d %s %s %d-%d %v", e.Op, e.Kind, e.Bitslice, e.Lo, e.Hi, e.Bit)
	case EventDeleteRange:
		return fmt.Sprintf("%d %s %s %q-%q %v %v", e.Op, e.Kind, e.Keyspace, e.Key, e.End, e.Key == nil, e.End == nil)
	}
	return fmt.Sprintf("%d %s %s %q=%q", e.Op, e.Kind, e.Keyspace, e.Key, e.Value)
}

// write writes ops [from, to] to db (keyspaces "a" and "b", bitslice
// "bits"); big makes some ops large enough for a flush by ingestion.
func (h *retainHost) write(t testing.TB, db *DB, from, to uint64, big bool) {
	t.Helper()
	ctx := context.Background()
	ka, kb := mustKV(t, db, "a"), mustKV(t, db, "b")
	var bs *Bits
	if !h.noBits {
		bs = mustBits(t, db, "bits")
	}
	for op := from; op <= to; op++ {
		b := db.NewBatch()
		var evs []string
		n := 1 + h.rng.IntN(4)
		if big && h.rng.IntN(4) == 0 {
			n = 64
		}
		for i := range n {
			k, name := ka, "a"
			if h.rng.IntN(3) == 0 {
				k, name = kb, "b"
			}
			key := []byte(fmt.Sprintf("k%03d-%d", h.rng.IntN(200), i))
			kind := h.rng.IntN(6)
			if h.noBits && kind == 2 {
				kind = 3
			}
			switch kind {
			case 0:
				b.Delete(k, key)
				evs = append(evs, evText(WatchEvent{Kind: EventDelete, Op: op, Keyspace: name, Key: key}))
			case 1:
				lo := []byte(fmt.Sprintf("k%03d", h.rng.IntN(200)))
				var hi []byte
				if h.rng.IntN(3) > 0 {
					hi = append(slices.Clone(lo), 'z')
				}
				b.DeleteRange(k, lo, hi)
				evs = append(evs, evText(WatchEvent{Kind: EventDeleteRange, Op: op, Keyspace: name, Key: lo, End: hi}))
			case 2:
				i := uint64(h.rng.IntN(5000))
				v := h.rng.IntN(2) == 0
				b.Set(bs, i, v)
				evs = append(evs, evText(WatchEvent{Kind: EventSetBits, Op: op, Bitslice: "bits", Lo: i, Hi: i + 1, Bit: v}))
			default:
				val := []byte(fmt.Sprintf("v%d-%s", op, strings.Repeat("x", h.rng.IntN(120))))
				b.Put(k, key, val)
				evs = append(evs, evText(WatchEvent{Kind: EventPut, Op: op, Keyspace: name, Key: key, Value: val}))
			}
		}
		if err := db.Apply(ctx, b, op); err != nil {
			t.Fatalf("apply op %d: %v", op, err)
		}
		h.ops[op] = evs
	}
}

// want is the host's log of ops [from, to] in op order.
func (h *retainHost) want(from, to uint64) []string {
	var out []string
	for op := from; op <= to; op++ {
		out = append(out, h.ops[op]...)
	}
	return out
}

// readTo reads w until a resolved mark >= n, returning the changes read;
// marks must not go back.
func readTo(t testing.TB, w *Watch, n uint64) []string {
	t.Helper()
	var out []string
	var last uint64
	for {
		e := nextEvent(t, w)
		if e.Kind == EventResolved {
			if e.Op < last {
				t.Fatalf("mark %d after mark %d", e.Op, last)
			}
			last = e.Op
			if e.Op >= n {
				return out
			}
			continue
		}
		out = append(out, evText(e))
	}
}

func checkSame(t testing.TB, what string, got, want []string) {
	t.Helper()
	if slices.Equal(got, want) {
		return
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Fatalf("%s: %d events, want %d; first difference at %d: %s, want %s", what, len(got), len(want), i, got[i], want[i])
		}
	}
	t.Fatalf("%s: %d events, want %d", what, len(got), len(want))
}

// TestWatchRetainRestart: with retention, a watch from any retained op
// after Close and Open gets exactly the host's changes after it, in op
// order, then goes on with the live feed without a gap or a repeat; flushes
// by batch and by ingestion; trims by ops; a session without retention
// leaves a gap a watch cannot start in (ErrCompacted).
func TestWatchRetainRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	h := newRetainHost(uint64(testSeed(t)))
	opts := &Options{FlushInterval: -1, IngestThreshold: 4 << 10, WatchRetain: &WatchRetention{}}
	db := openT(t, dir, opts)
	for op := uint64(1); op <= 60; op += 10 {
		h.write(t, db, op, op+9, true)
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if db.Metrics().IngestedGenerations == 0 {
		t.Fatal("no flush by ingestion: the test covers only batches")
	}
	closeT(t, db)

	db = openT(t, dir, opts)
	if wm := db.Watermark(); wm != 60 {
		t.Fatalf("watermark %d after reopen, want 60", wm)
	}
	for _, from := range []uint64{1, 2, 17, 59, 60} {
		for _, durable := range []bool{false, true} {
			w, err := db.Watch(ctx, &WatchOptions{From: from, Durable: durable})
			if err != nil {
				t.Fatal(err)
			}
			if w.From() != from {
				t.Fatalf("From() = %d, want %d", w.From(), from)
			}
			checkSame(t, fmt.Sprintf("from %d durable %v", from, durable), readTo(t, w, 60), h.want(from, 60))
			w.Close()
		}
	}
	// Resume, then the live feed: ops 61-90 written after the watch began.
	wv, err := db.Watch(ctx, &WatchOptions{From: 5})
	if err != nil {
		t.Fatal(err)
	}
	wd, err := db.Watch(ctx, &WatchOptions{From: 5, Durable: true, Keyspaces: []WatchKeyspace{{Name: "a"}, {Name: "b"}}, Bitslices: []string{"bits"}, Buffer: 7})
	if err != nil {
		t.Fatal(err)
	}
	h.write(t, db, 61, 75, false)
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	h.write(t, db, 76, 90, true)
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	checkSame(t, "visible from 5 across the restart", readTo(t, wv, 90), h.want(5, 90))
	checkSame(t, "durable from 5 across the restart", readTo(t, wd, 90), h.want(5, 90))
	wv.Close()
	wd.Close()
	m := db.Metrics()
	if m.WatchRetainedBytes <= 0 || m.WatchRetainedFrom != 1 || m.WatchDelivered == 0 {
		t.Fatalf("metrics: retained %d bytes from op %d, %d delivered", m.WatchRetainedBytes, m.WatchRetainedFrom, m.WatchDelivered)
	}
	closeT(t, db)

	// Trim by ops: only the last 20 ops at the watermark are kept.
	opts2 := &Options{FlushInterval: -1, WatchRetain: &WatchRetention{MaxOps: 20}}
	db = openT(t, dir, opts2)
	h.write(t, db, 91, 100, false)
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Watch(ctx, &WatchOptions{From: 80}); !errors.Is(err, ErrCompacted) || !errors.Is(err, ErrResync) {
		t.Fatalf("watch below the retained ops: %v, want ErrCompacted", err)
	}
	w, err := db.Watch(ctx, &WatchOptions{From: 81, Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	checkSame(t, "from 81 after a trim", readTo(t, w, 100), h.want(81, 100))
	w.Close()
	closeT(t, db)

	// A session without retention: its ops are not retained.
	db = openT(t, dir, &Options{FlushInterval: -1})
	h.write(t, db, 101, 105, false)
	closeT(t, db)
	db = openT(t, dir, opts2)
	defer closeT(t, db)
	if _, err := db.Watch(ctx, &WatchOptions{From: 95}); !errors.Is(err, ErrCompacted) {
		t.Fatalf("watch across a session without retention: %v, want ErrCompacted", err)
	}
	w, err = db.Watch(ctx, &WatchOptions{From: 106})
	if err != nil {
		t.Fatal(err)
	}
	h.write(t, db, 106, 110, false)
	checkSame(t, "from 106", readTo(t, w, 110), h.want(106, 110))
	w.Close()
}

// TestWatchRetainSelection: retention of some keyspaces: a watch from the
// store may select only what is retained; what it gets is filtered.
func TestWatchRetainSelection(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	h := newRetainHost(uint64(testSeed(t)))
	opts := &Options{FlushInterval: -1, WatchRetain: &WatchRetention{Keyspaces: []string{"a"}}}
	db := openT(t, dir, opts)
	h.write(t, db, 1, 30, false)
	closeT(t, db)
	db = openT(t, dir, opts)
	defer closeT(t, db)
	for _, o := range []*WatchOptions{{From: 1}, {From: 1, Keyspaces: []WatchKeyspace{{Name: "b"}}}, {From: 1, Bitslices: []string{"bits"}}} {
		if _, err := db.Watch(ctx, o); !errors.Is(err, ErrCompacted) {
			t.Fatalf("watch %+v of what is not retained: %v, want ErrCompacted", o, err)
		}
	}
	w, err := db.Watch(ctx, &WatchOptions{From: 3, Keyspaces: []WatchKeyspace{{Name: "a", Prefix: []byte("k1")}}})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, s := range h.want(3, 30) {
		if strings.Contains(s, " a \"k1") || strings.Contains(s, "delete-range a") {
			want = append(want, s)
		}
	}
	got := readTo(t, w, 30)
	var gotPuts, wantPuts []string
	for _, s := range got {
		if !strings.Contains(s, "delete-range") {
			gotPuts = append(gotPuts, s)
		}
	}
	for _, s := range want {
		if !strings.Contains(s, "delete-range") {
			wantPuts = append(wantPuts, s)
		}
	}
	checkSame(t, "prefix k1 of a", gotPuts, wantPuts)
	w.Close()
}

// TestWatchRetainBadOptions: retention's options are checked.
func TestWatchRetainBadOptions(t *testing.T) {
	for _, r := range []*WatchRetention{{MaxBytes: -1}, {Keyspaces: []string{""}}, {Bitslices: []string{".."}}} {
		if _, err := Open(t.TempDir(), &Options{WatchRetain: r}); !errors.Is(err, ErrBadOptions) {
			t.Fatalf("WatchRetain %+v: %v, want ErrBadOptions", r, err)
		}
	}
	if got := (&Options{WatchRetain: &WatchRetention{}}).EnsureDefaults().WatchRetain.MaxBytes; got != DefaultWatchRetainBytes {
		t.Fatalf("default MaxBytes %d", got)
	}
}

// TestWatchRetainBytesBound: retention past MaxBytes deletes the oldest
// ops' changes; a watch from the floor still gets everything after it.
func TestWatchRetainBytesBound(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	h := newRetainHost(uint64(testSeed(t)))
	opts := &Options{FlushInterval: -1, WatchRetain: &WatchRetention{MaxBytes: 8 << 10}}
	db := openT(t, dir, opts)
	for op := uint64(1); op <= 200; op += 20 {
		h.write(t, db, op, op+19, false)
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	m := db.Metrics()
	closeT(t, db)
	if m.WatchRetainedFrom <= 1 || m.WatchRetainedBytes > 8<<10+64<<10 {
		t.Fatalf("retained %d bytes from op %d: not trimmed", m.WatchRetainedBytes, m.WatchRetainedFrom)
	}
	db = openT(t, dir, opts)
	defer closeT(t, db)
	floor := m.WatchRetainedFrom
	if _, err := db.Watch(ctx, &WatchOptions{From: floor - 1}); !errors.Is(err, ErrCompacted) {
		t.Fatalf("watch below the floor %d: %v", floor, err)
	}
	w, err := db.Watch(ctx, &WatchOptions{From: floor})
	if err != nil {
		t.Fatal(err)
	}
	checkSame(t, "from the floor", readTo(t, w, 200), h.want(floor, 200))
	w.Close()
	_ = time.Second
}

// TestWatchModelRestart is the feed's model test over restarts: in each of
// several sessions, concurrent host writers (ops numbered and begun under
// the log's lock, single calls or batches, range deletes, DropKV, bit
// sets) and subscribers that resume, after each Close and Open, from their
// last resolved mark + 1 (read from the retained feed, then live); at every
// resolved mark each subscriber's stream, folded across the sessions,
// equals the host's log folded in op order.
func TestWatchModelRestart(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(16))
	seed := testSeed(t)
	const goroutines, sessions = 4, 4
	steps := 80
	if testing.Short() {
		steps = 30
	}
	dir := t.TempDir()
	ctx := context.Background()
	opts := &Options{FlushInterval: 5 * time.Millisecond, IngestThreshold: 2 << 10, WatchRetain: &WatchRetention{}}
	h := &hostLog{ops: map[uint64][]WatchEvent{}}
	type sub struct {
		name string
		opts WatchOptions
		st   *feedState
		rp   *replayer
		last uint64
		// quits: the subscriber keeps a checkpoint (its fold at a mark
		// chosen at random) and, after each restart, resumes from it as a
		// subscriber that lost its later progress: from the store.
		quits  bool
		ck     uint64
		ckFold *feedState
	}
	subs := []*sub{
		{name: "all-visible", opts: WatchOptions{}},
		{name: "all-durable", opts: WatchOptions{Durable: true}},
		{name: "prefix-durable-quits", opts: WatchOptions{Durable: true, Buffer: 3, Keyspaces: []WatchKeyspace{{Name: "model", Prefix: []byte("g1/")}}, Bitslices: []string{"bits"}}, quits: true},
		{name: "prefix-visible-quits", opts: WatchOptions{Buffer: 5, Keyspaces: []WatchKeyspace{{Name: "model", Prefix: []byte("g2/")}, {Name: "own-3"}}}, quits: true},
		{name: "all-visible-quits", opts: WatchOptions{}, quits: true},
	}
	for _, s := range subs {
		s.st, s.rp, s.ckFold = newFeedState(), &replayer{h: h, st: newFeedState()}, newFeedState()
	}
	for session := range sessions {
		db := openT(t, dir, opts)
		shared := mustKV(t, db, "model")
		bits := mustBits(t, db, "bits")
		for g := range goroutines {
			mustKV(t, db, fmt.Sprintf("own-%d", g))
		}
		if wm := db.Watermark(); wm != h.next {
			t.Fatalf("session %d: watermark %d at Open, the host's last op is %d", session, wm, h.next)
		}
		errs := make(chan error, 16)
		var readers sync.WaitGroup
		for si, s := range subs {
			if s.quits {
				s.last, s.st = s.ck, s.ckFold.clone()
				s.rp = &replayer{h: h, st: newFeedState()}
				s.rp.to(s.last)
			}
			o := s.opts
			o.From = s.last + 1
			w, err := db.Watch(ctx, &o)
			if err != nil {
				t.Fatalf("session %d: %s resumes from %d: %v", session, s.name, o.From, err)
			}
			readers.Add(1)
			go func() {
				defer readers.Done()
				defer w.Close()
				rng := rand.New(rand.NewPCG(seed, uint64(session*10+si)))
				for {
					e, err := w.Next(ctx)
					if errors.Is(err, ErrClosed) {
						return
					}
					if err != nil {
						errs <- fmt.Errorf("%s: %w", s.name, err)
						return
					}
					if o.Buffer > 0 && rng.IntN(40) == 0 {
						time.Sleep(time.Millisecond) // a slow consumer
					}
					if e.Kind != EventResolved {
						if e.Op <= s.last {
							errs <- fmt.Errorf("%s: change of op %d at or below the last mark %d", s.name, e.Op, s.last)
							return
						}
						s.st.apply(e)
						continue
					}
					if e.Op < s.last {
						errs <- fmt.Errorf("%s: mark %d after mark %d", s.name, e.Op, s.last)
						return
					}
					s.last = e.Op
					if s.quits && rng.IntN(4) == 0 {
						s.ck, s.ckFold = e.Op, s.st.clone()
					}
					if got, want := s.st.view(&s.opts), s.rp.to(e.Op).view(&s.opts); got != want {
						errs <- fmt.Errorf("%s, session %d: at resolved op %d the stream folds to\n%s\nthe host's log to\n%s", s.name, session, e.Op, got, want)
						return
					}
				}
			}()
		}
		var writers sync.WaitGroup
		for g := range goroutines {
			writers.Add(1)
			go func() {
				defer writers.Done()
				rng := rand.New(rand.NewPCG(seed, uint64(1000+session*10+g)))
				own := fmt.Sprintf("own-%d", g)
				for step := range steps {
					var chs []WatchEvent
					batch := rng.IntN(3) == 0
					for range 1 + rng.IntN(3) {
						key := fmt.Sprintf("g%d/%02d", g, rng.IntN(20))
						switch r := rng.IntN(10); {
						case r < 5:
							chs = append(chs, WatchEvent{Kind: EventPut, Keyspace: "model", Key: []byte(key), Value: []byte(fmt.Sprint(session, step))})
						case r < 6:
							chs = append(chs, WatchEvent{Kind: EventDelete, Keyspace: "model", Key: []byte(key)})
						case r < 7:
							lo := rng.IntN(20)
							chs = append(chs, WatchEvent{Kind: EventDeleteRange, Keyspace: "model",
								Key: fmt.Appendf(nil, "g%d/%02d", g, lo), End: fmt.Appendf(nil, "g%d/%02d", g, lo+rng.IntN(6))})
						case r < 8:
							chs = append(chs, WatchEvent{Kind: EventPut, Keyspace: own, Key: []byte(key), Value: []byte(strings.Repeat("v", rng.IntN(300)))})
						default:
							i := uint64(g + goroutines*rng.IntN(40))
							chs = append(chs, WatchEvent{Kind: EventSetBits, Bitslice: "bits", Lo: i, Hi: i + 1, Bit: rng.IntN(2) == 0})
						}
					}
					if !batch && rng.IntN(40) == 0 {
						chs = []WatchEvent{{Kind: EventDropKeyspace, Keyspace: own}}
					}
					h.mu.Lock()
					h.next++
					op := h.next
					for i := range chs {
						chs[i].Op = op
					}
					h.ops[op] = chs
					err := db.BeginOp(ctx, op)
					h.mu.Unlock()
					if err == nil {
						err = writeChanges(ctx, db, shared, bits, chs, op, batch)
					}
					if err == nil && !batch {
						err = db.EndOp(ctx, op)
					}
					if err != nil {
						errs <- fmt.Errorf("op %d: %w", op, err)
						return
					}
				}
			}()
		}
		writers.Wait()
		mustFlush(t, db)
		m := db.Metrics()
		if m.WatchRetainedFrom != 1 || m.WatchRetainedBytes == 0 {
			t.Fatalf("session %d: retained %d bytes from op %d (watermark %d, %d generations)", session, m.WatchRetainedBytes, m.WatchRetainedFrom, m.Watermark, m.Generations)
		}
		closeT(t, db) // the final flush; the watches read what is ready, then end
		readers.Wait()
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
		for _, s := range subs {
			// A subscriber still reading the store when the engine
			// closes ends with ErrClosed (it resumes from its
			// checkpoint next time); the others read everything.
			if !s.quits && s.last != h.next {
				t.Fatalf("session %d: %s's last mark %d, the host's last op %d", session, s.name, s.last, h.next)
			}
			t.Logf("session %d: %s at mark %d of %d, checkpoint %d", session, s.name, s.last, h.next, s.ck)
		}
	}
}

func (s *feedState) clone() *feedState {
	c := newFeedState()
	for ks, m := range s.kv {
		c.kv[ks] = maps.Clone(m)
	}
	for b, m := range s.bits {
		c.bits[b] = maps.Clone(m)
	}
	return c
}

// TestWatchRetainPowerCut: a power cut at every WAL sync and every
// ingested table's sync of a run (flushes by batch and by ingestion, the
// host flushing at random): each image, opened, has a retained feed that
// is exactly the changes of the ops up to its watermark, from op 1, with
// its first mark at the watermark (R1: the retained changes and the
// watermark are in one commit).
func TestWatchRetainPowerCut(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	mem := testutil.NewCrashableMem()
	syncedMkdirAll(t, mem, dir)
	const maxImages = 40
	var (
		mu     sync.Mutex
		images []*vfs.MemFS
	)
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !storeOpMatches("pebble/wal-sync", op) && !storeOpMatches("ingest/sst-sync", op) {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if len(images) < maxImages {
			images = append(images, mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0}))
		}
		return nil
	})
	h := newRetainHost(uint64(testSeed(t)))
	h.noBits = true
	opts := &Options{FlushInterval: -1, IngestThreshold: 4 << 10, storeFS: errorfs.Wrap(mem, inj), WatchRetain: &WatchRetention{}}
	db := openT(t, dir, opts)
	for op := uint64(1); op <= 300; {
		n := 1 + uint64(h.rng.IntN(12))
		h.write(t, db, op, op+n-1, true)
		op += n
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	closeT(t, db)
	mu.Lock()
	defer mu.Unlock()
	checked := 0
	for i, img := range images {
		db, err := Open(dir, &Options{FlushInterval: -1, storeFS: img, WatchRetain: &WatchRetention{}})
		if err != nil {
			t.Fatalf("image %d: %v", i, err)
		}
		wm := db.Watermark()
		if wm > 0 {
			w, err := db.Watch(ctx, &WatchOptions{From: 1, Durable: i%2 == 0})
			if err != nil {
				t.Fatalf("image %d, watermark %d: %v", i, wm, err)
			}
			var got []string
			for {
				e := nextEvent(t, w)
				if e.Kind == EventResolved {
					if e.Op != wm {
						t.Fatalf("image %d: first mark %d, watermark %d", i, e.Op, wm)
					}
					break
				}
				got = append(got, evText(e))
			}
			w.Close()
			checkSame(t, fmt.Sprintf("image %d, watermark %d", i, wm), got, h.want(1, wm))
			checked++
		}
		if err := db.Close(); err != nil {
			t.Fatalf("image %d: close: %v", i, err)
		}
	}
	if checked < 10 {
		t.Fatalf("%d power-cut images with a watermark, want at least 10", checked)
	}
}

// TestWatchRetainTrimmedLog: with a tiny in-memory buffer every durable
// step leaves memory at once, so a watch reading the store while ops are
// written and flushed finds the log's floor past what it read; it reads on
// in the store (R3) and gets exactly the host's log, in both modes.
func TestWatchRetainTrimmedLog(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	h := newRetainHost(uint64(testSeed(t)))
	opts := &Options{FlushInterval: -1, WatchBufferBytes: 1, WatchRetain: &WatchRetention{}}
	db := openT(t, dir, opts)
	h.write(t, db, 1, 40, false)
	closeT(t, db)
	db = openT(t, dir, opts)
	defer closeT(t, db)
	ws := make([]*Watch, 8)
	for i := range ws {
		o := &WatchOptions{From: 1, Durable: i%2 == 1, Buffer: 1 + i/2}
		if i >= 6 {
			// A filter that selects everything: these watches take
			// each change on its own (Watch.trackChange), the others
			// a batch record's changes in one run (trackChanges).
			o.Buffer = 1
			o.Keyspaces = []WatchKeyspace{{Name: "a"}, {Name: "b"}}
			o.Bitslices = []string{"bits"}
		}
		w, err := db.Watch(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		ws[i] = w
	}
	const last = 800
	got := make([][]string, len(ws))
	errs := make(chan error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				e, err := w.Next(ctx)
				if err != nil {
					errs <- err
					return
				}
				if e.Kind == EventResolved {
					if e.Op >= last {
						return
					}
					continue
				}
				got[i] = append(got[i], evText(e))
			}
		}()
	}
	for op := uint64(41); op <= last; op += 4 {
		h.write(t, db, op, op+3, true) // some ops of 64 changes
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	for i := range ws {
		checkSame(t, fmt.Sprintf("watch %d", i), got[i], h.want(1, last))
	}
}

// TestWatchRetainRuns: the store keeps a recorded write's retained changes
// as runs, one entry each: a batch is one run, split where the selection
// leaves a change out, past retRunMax changes and past retRunBytes of
// values; a single write is one entry. The retained bytes counted when the
// flush wrote them equal what Open counts from the entries, and a watch
// from the store with a small buffer (so that it stops inside runs) gets
// every change once, in order.
func TestWatchRetainRuns(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	opts := &Options{FlushInterval: -1, WatchRetain: &WatchRetention{Keyspaces: []string{"a"}}}
	db := openT(t, dir, opts)
	a, b := mustKV(t, db, "a"), mustKV(t, db, "b")
	var want []string
	put := func(bt *Batch, k *KV, key string, val []byte, op uint64) {
		bt.Put(k, []byte(key), val)
		if k == a {
			want = append(want, evText(WatchEvent{Kind: EventPut, Op: op, Keyspace: "a", Key: []byte(key), Value: val}))
		}
	}
	bt := db.NewBatch()
	for i := range 16 {
		k := a
		if i == 10 {
			k = b // not retained: splits the run
		}
		put(bt, k, fmt.Sprintf("k%02d", i), []byte("v"), 1)
	}
	if err := db.Apply(ctx, bt, 1); err != nil {
		t.Fatal(err)
	}
	bt = db.NewBatch()
	for i := range 2*retRunMax + 452 {
		put(bt, a, fmt.Sprintf("m%05d", i), []byte("w"), 2)
	}
	if err := db.Apply(ctx, bt, 2); err != nil {
		t.Fatal(err)
	}
	if err := a.Put(ctx, []byte("single"), []byte("s"), 3); err != nil {
		t.Fatal(err)
	}
	want = append(want, evText(WatchEvent{Kind: EventPut, Op: 3, Keyspace: "a", Key: []byte("single"), Value: []byte("s")}))
	bt = db.NewBatch()
	big := make([]byte, retRunBytes*3/4)
	for i := range 3 {
		put(bt, a, fmt.Sprintf("big%d", i), big, 4)
	}
	if err := db.Apply(ctx, bt, 4); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	type ent struct {
		op  uint64
		idx uint32
	}
	var got []ent
	var size int64
	it, err := db.store.NewIter(feedKS, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		op, idx, ok := decodeRetKey(it.Key())
		if !ok {
			t.Fatalf("key %x", it.Key())
		}
		got = append(got, ent{op, idx})
		size += int64(len(it.Key()) + len(it.Value()))
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	wantEnts := []ent{{1, 0}, {1, 11}, {2, 0}, {2, retRunMax}, {2, 2 * retRunMax}, {3, 0}, {4, 0}, {4, 2}}
	if !slices.Equal(got, wantEnts) {
		t.Fatalf("entries %v, want %v", got, wantEnts)
	}
	if m := db.Metrics(); m.WatchRetainedBytes != size {
		t.Fatalf("retained bytes counted %d, the store's entries hold %d", m.WatchRetainedBytes, size)
	}
	closeT(t, db)
	db = openT(t, dir, opts)
	defer closeT(t, db)
	if m := db.Metrics(); m.WatchRetainedBytes != size {
		t.Fatalf("after Open: retained bytes %d, the store's entries hold %d", m.WatchRetainedBytes, size)
	}
	for _, buf := range []int{1, 7, 1000} {
		w, err := db.Watch(ctx, &WatchOptions{From: 1, Keyspaces: []WatchKeyspace{{Name: "a"}}, Buffer: buf})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for e := nextEvent(t, w); e.Kind != EventResolved || e.Op < 4; e = nextEvent(t, w) {
			if e.Kind == EventResolved {
				continue
			}
			if got = append(got, evText(e)); len(got) > len(want) {
				break // a repeat: checkSame reports it
			}
		}
		checkSame(t, fmt.Sprintf("buffer %d", buf), got, want)
		w.Close()
	}
}

// TestWatchRetainReplayedDrop: a host replays the op above the watermark
// after a restart, and a freeze between two of its writes may have made
// part of it durable: here its DropKV. The replayed DropKV finds no such
// keyspace, yet the retained feed (and the live one) must hold the op's
// drop, as they hold its other replayed changes: the feed of an op is the
// host's writes of it, whatever the store already had.
func TestWatchRetainReplayedDrop(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	opts := &Options{FlushInterval: -1, WatchRetain: &WatchRetention{}}
	db := openT(t, dir, opts)
	k, err := db.KV("ks")
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Put(ctx, []byte("a"), []byte("1"), 1); err != nil {
		t.Fatal(err)
	}
	// Op 2 is written by single calls: the flush between its drop and its
	// put makes the drop durable but claims op 1 only.
	if err := db.DropKV(ctx, "ks", 2); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if wm := db.Watermark(); wm != 1 {
		t.Fatalf("watermark %d with op 2 open, want 1", wm)
	}
	closeT(t, db)

	db = openT(t, dir, opts)
	defer closeT(t, db)
	if wm := db.Watermark(); wm != 1 {
		t.Fatalf("watermark %d after reopen, want 1", wm)
	}
	wv, err := db.Watch(ctx, &WatchOptions{From: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer wv.Close()
	// The replay of op 2 from its first write, then op 3.
	if err := db.DropKV(ctx, "ks", 2); err != nil {
		t.Fatal(err)
	}
	if k, err = db.KV("ks"); err != nil {
		t.Fatal(err)
	}
	if err := k.Put(ctx, []byte("b"), []byte("2"), 2); err != nil {
		t.Fatal(err)
	}
	if err := k.Put(ctx, []byte("c"), []byte("3"), 3); err != nil {
		t.Fatal(err)
	}
	if err := db.EndOp(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if wm := db.Watermark(); wm != 3 {
		t.Fatalf("watermark %d, want 3", wm)
	}
	want := []string{
		evText(WatchEvent{Kind: EventPut, Op: 1, Keyspace: "ks", Key: []byte("a"), Value: []byte("1")}),
		evText(WatchEvent{Kind: EventDropKeyspace, Op: 2, Keyspace: "ks"}),
		evText(WatchEvent{Kind: EventPut, Op: 2, Keyspace: "ks", Key: []byte("b"), Value: []byte("2")}),
		evText(WatchEvent{Kind: EventPut, Op: 3, Keyspace: "ks", Key: []byte("c"), Value: []byte("3")}),
	}
	checkSame(t, "live feed of the replay", readTo(t, wv, 3), want[1:])
	for _, durable := range []bool{false, true} {
		w, err := db.Watch(ctx, &WatchOptions{From: 1, Durable: durable})
		if err != nil {
			t.Fatal(err)
		}
		checkSame(t, fmt.Sprintf("retained feed from op 1 (durable %v)", durable), readTo(t, w, 3), want)
		w.Close()
	}
}
