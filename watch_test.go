package kvbuf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// feedState is a fold of change events: what a subscriber rebuilds.
type feedState struct {
	kv   map[string]map[string]string
	bits map[string]map[uint64]bool // true bits only
}

func newFeedState() *feedState {
	return &feedState{kv: map[string]map[string]string{}, bits: map[string]map[uint64]bool{}}
}

func (s *feedState) apply(e WatchEvent) {
	switch e.Kind {
	case EventPut:
		m := s.kv[e.Keyspace]
		if m == nil {
			m = map[string]string{}
			s.kv[e.Keyspace] = m
		}
		m[string(e.Key)] = string(e.Value)
	case EventDelete:
		delete(s.kv[e.Keyspace], string(e.Key))
	case EventDeleteRange:
		for k := range s.kv[e.Keyspace] {
			if (e.Key == nil || k >= string(e.Key)) && (e.End == nil || k < string(e.End)) {
				delete(s.kv[e.Keyspace], k)
			}
		}
	case EventDropKeyspace:
		delete(s.kv, e.Keyspace)
	case EventSetBits:
		m := s.bits[e.Bitslice]
		if m == nil {
			m = map[uint64]bool{}
			s.bits[e.Bitslice] = m
		}
		for i := e.Lo; i < e.Hi; i++ {
			if e.Bit {
				m[i] = true
			} else {
				delete(m, i)
			}
		}
	}
}

// view is the part of s a watch with opts selects, as text to compare.
func (s *feedState) view(o *WatchOptions) string {
	var b strings.Builder
	all := o == nil || len(o.Keyspaces) == 0 && len(o.Bitslices) == 0
	for _, ks := range slices.Sorted(maps.Keys(s.kv)) {
		for _, k := range slices.Sorted(maps.Keys(s.kv[ks])) {
			if all || watchSelects(o, ks, k) {
				fmt.Fprintf(&b, "%s/%s=%s\n", ks, k, s.kv[ks][k])
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.bits)) {
		if !all && !slices.Contains(o.Bitslices, name) {
			continue
		}
		for _, i := range slices.Sorted(maps.Keys(s.bits[name])) {
			fmt.Fprintf(&b, "%s[%d]\n", name, i)
		}
	}
	return b.String()
}

func watchSelects(o *WatchOptions, ks, key string) bool {
	for _, w := range o.Keyspaces {
		if w.Name == ks && strings.HasPrefix(key, string(w.Prefix)) {
			return true
		}
	}
	return false
}

// hostLog is a host's log: every op's changes, recorded when the op is
// numbered (before it is written), as WatchEvents.
type hostLog struct {
	mu   sync.Mutex
	next uint64
	ops  map[uint64][]WatchEvent
}

func (h *hostLog) changes(op uint64) []WatchEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ops[op]
}

// replayer folds the host's log in op order up to a resolved mark: the
// state a subscriber must have at that mark.
type replayer struct {
	h    *hostLog
	st   *feedState
	upTo uint64
}

func (r *replayer) to(n uint64) *feedState {
	for ; r.upTo < n; r.upTo++ {
		for _, e := range r.h.changes(r.upTo + 1) {
			r.st.apply(e)
		}
	}
	return r.st
}

// nextEvent reads one event with a deadline, failing the test on error.
func nextEvent(t testing.TB, w *Watch) WatchEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := w.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return e
}

// changesUntil returns w's changes up to its first resolved mark at or
// above n (the marks before it skipped).
func changesUntil(t testing.TB, w *Watch, n uint64) []WatchEvent {
	t.Helper()
	var out []WatchEvent
	for {
		e := nextEvent(t, w)
		if e.Kind == EventResolved {
			if e.Op >= n {
				return out
			}
			continue
		}
		out = append(out, e)
	}
}

// readUntil folds w's events into st until a resolved mark >= n, returning
// the events read and the mark.
func readUntil(t testing.TB, w *Watch, st *feedState, n uint64) ([]WatchEvent, WatchEvent) {
	t.Helper()
	var evs []WatchEvent
	for {
		e := nextEvent(t, w)
		if e.Kind == EventResolved {
			if e.Op >= n {
				return evs, e
			}
			continue
		}
		evs = append(evs, e)
		if st != nil {
			st.apply(e)
		}
	}
}

func TestWatchBasic(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("durable=%v", durable), func(t *testing.T) {
			db := openT(t, t.TempDir(), &Options{FlushInterval: 10 * time.Millisecond})
			defer closeT(t, db)
			k := mustKV(t, db, "a")
			b := mustBits(t, db, "b")
			ctx := context.Background()
			w, err := db.Watch(ctx, &WatchOptions{Durable: durable})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if w.From() != 1 {
				t.Fatalf("From = %d, want 1", w.From())
			}
			mustPut(t, k, "x", "1", 1)
			mustSet(t, b, 7, true, 2)
			if err := k.DeleteRange(ctx, []byte("a"), []byte("z"), 3); err != nil {
				t.Fatal(err)
			}
			if err := db.EndOp(ctx, 3); err != nil {
				t.Fatal(err)
			}
			st := newFeedState()
			evs, mark := readUntil(t, w, st, 3)
			want := []string{"1 put a x", "2 set-bits b 7", "3 delete-range a a"}
			var got []string
			for _, e := range evs {
				switch e.Kind {
				case EventPut:
					got = append(got, fmt.Sprintf("%d %s %s %s", e.Op, e.Kind, e.Keyspace, e.Key))
				case EventSetBits:
					got = append(got, fmt.Sprintf("%d %s %s %d", e.Op, e.Kind, e.Bitslice, e.Lo))
				case EventDeleteRange:
					got = append(got, fmt.Sprintf("%d %s %s %s", e.Op, e.Kind, e.Keyspace, e.Key))
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("events %q, want %q", got, want)
			}
			if durable {
				if mark.Watermark < 3 || db.Watermark() < 3 {
					t.Fatalf("durable mark %+v, watermark %d: not covered", mark, db.Watermark())
				}
			} else if mark.Watermark != 0 {
				t.Fatalf("visible mark carries watermark %d", mark.Watermark)
			}
			if got := st.view(nil); got != "b[7]\n" {
				t.Fatalf("fold = %q", got)
			}
		})
	}
}

// TestWatchModel: concurrent hosts' writers (ops begun under a log lock,
// written and ended in any order; batches, range deletes, DropKV, bit
// sets) and several subscribers (all or a prefix and a bitslice, visible
// or durable, from the start or after a snapshot, fast or slow, read
// with Next, NextMany or NextEvents): each
// subscriber's stream, folded, equals the host's log folded in op order at
// every resolved mark.
func TestWatchModel(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(16))
	seed := testSeed(t)
	const goroutines = 6
	// Not fewer steps under -short: the check below needs every subscriber
	// to see two resolved marks, which 100 steps (0.06 s of writes without
	// -race) did not always give. Even 300 did not in an invariants build on
	// a quiet machine (a subscriber that starts after a snapshot saw only
	// the final mark), so the writers go on past steps, up to 20 times as
	// many, until every subscriber has seen a mark; the final flush gives
	// the second.
	const steps = 300
	db := openT(t, t.TempDir(), &Options{FlushInterval: 5 * time.Millisecond, WatchFromOpen: true})
	defer closeT(t, db)
	ctx := context.Background()
	shared := mustKV(t, db, "model")
	bits := mustBits(t, db, "bits")
	for g := range goroutines {
		mustKV(t, db, fmt.Sprintf("own-%d", g))
	}
	h := &hostLog{ops: map[uint64][]WatchEvent{}}

	type sub struct {
		name string
		opts *WatchOptions
		snap bool // start after a snapshot taken mid-run
		slow bool
		many int // read with NextMany into a dst of this room (0: Next; -1: NextEvents)
	}
	subs := []sub{
		{name: "all-visible", opts: &WatchOptions{From: 1}},
		{name: "all-visible-lent", opts: &WatchOptions{From: 1}, many: -1},
		{name: "all-durable", opts: &WatchOptions{From: 1, Durable: true}, many: 256},
		{name: "prefix-visible-slow", opts: &WatchOptions{From: 1, Keyspaces: []WatchKeyspace{{Name: "model", Prefix: []byte("g1/")}}, Bitslices: []string{"bits"}, Buffer: 3}, slow: true},
		{name: "own2-durable", opts: &WatchOptions{From: 1, Durable: true, Keyspaces: []WatchKeyspace{{Name: "own-2"}}}},
		{name: "snapshot-visible", opts: &WatchOptions{}, snap: true, many: 7},
		{name: "snapshot-durable-prefix", opts: &WatchOptions{Durable: true, Keyspaces: []WatchKeyspace{{Name: "model", Prefix: []byte("g0/")}}}, snap: true},
	}

	var writers sync.WaitGroup
	var done sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 64)
	marks := make([]atomic.Int64, len(subs))
	everyMarked := func() bool {
		for i := range marks {
			if marks[i].Load() == 0 {
				return false
			}
		}
		return true
	}
	finalOp := make(chan uint64, len(subs))
	startedWriting := make(chan struct{})
	var startOnce sync.Once

	// The subscribers that start at op 1 open their watches before any
	// write: one opened later could find its keyspace dropped (own-2 is
	// dropped at random) and fail with ErrNotFound.
	var opened sync.WaitGroup
	for si, s := range subs {
		done.Add(1)
		if !s.snap {
			opened.Add(1)
		}
		go func() {
			defer done.Done()
			fail := func(err error) { errs <- fmt.Errorf("%s: %w", s.name, err) }
			st := newFeedState()
			rp := &replayer{h: h, st: newFeedState()}
			opts := *s.opts
			var checkFrom uint64
			if s.snap {
				<-startedWriting
				time.Sleep(3 * time.Millisecond)
				sn, err := db.NewSnapshot()
				if err != nil {
					fail(err)
					return
				}
				checkFrom = db.Metrics().HighestOp
				st = snapshotState(sn, []string{"model", "own-0", "own-1", "own-2", "own-3", "own-4", "own-5"}, []string{"bits"})
				rp.to(sn.Op())
				opts.From = sn.Op() + 1
				sn.Close()
			}
			w, err := db.Watch(ctx, &opts)
			if !s.snap {
				opened.Done()
			}
			if err != nil {
				fail(err)
				return
			}
			defer w.Close()
			rng := rand.New(rand.NewPCG(seed, uint64(si)))
			var final, lastMark uint64
			for {
				if final == 0 {
					select {
					case final = <-finalOp:
					default:
					}
				}
				if final != 0 && lastMark >= final {
					return
				}
				nctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
				var evs []WatchEvent
				var err error
				switch {
				case s.many < 0:
					var v WatchEvents
					v, err = w.NextEvents(nctx)
					for i := range v.Len() {
						// The fields lent are the event's.
						e := v.Event(i)
						if v.Kind(i) != e.Kind || v.Op(i) != e.Op || !bytes.Equal(v.Key(i), e.Key) || !bytes.Equal(v.Value(i), e.Value) {
							cancel()
							fail(fmt.Errorf("lent event %d: Kind %v Op %d Key %q Value %q, Event %+v", i, v.Kind(i), v.Op(i), v.Key(i), v.Value(i), e))
							return
						}
						evs = append(evs, e)
					}
				case s.many > 0:
					evs, err = w.NextMany(nctx, make([]WatchEvent, 0, s.many))
				default:
					var e WatchEvent
					e, err = w.Next(nctx)
					evs = []WatchEvent{e}
				}
				cancel()
				if errors.Is(err, context.DeadlineExceeded) {
					continue
				}
				if err != nil {
					fail(err)
					return
				}
				for _, e := range evs {
					if s.slow && rng.IntN(50) == 0 {
						time.Sleep(time.Millisecond)
					}
					if e.Kind != EventResolved {
						if e.Op < opts.From {
							fail(fmt.Errorf("change of op %d before the start %d", e.Op, opts.From))
							return
						}
						st.apply(e)
						continue
					}
					if opts.Durable && e.Watermark < e.Op {
						fail(fmt.Errorf("durable mark %d under watermark %d", e.Op, e.Watermark))
						return
					}
					marks[si].Add(1)
					lastMark = e.Op
					if e.Op >= checkFrom {
						if got, want := st.view(&opts), rp.to(e.Op).view(&opts); got != want {
							fail(fmt.Errorf("at resolved op %d: stream folds to\n%s\nhost's log to\n%s", e.Op, got, want))
							return
						}
					}
				}
			}
		}()
	}

	opened.Wait()
	for g := range goroutines {
		writers.Add(1)
		go func() {
			defer writers.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(100+g)))
			own := fmt.Sprintf("own-%d", g)
			for step := 0; step < steps || (step < 20*steps && !everyMarked()); step++ {
				select {
				case <-stop:
					return
				default:
				}
				// Choose the op's changes, then number it under the log's
				// lock and begin it there.
				var chs []WatchEvent
				batch := rng.IntN(4) == 0
				n := 1 + rng.IntN(3)
				for range n {
					key := fmt.Sprintf("g%d/%02d", g, rng.IntN(20))
					switch r := rng.IntN(10); {
					case r < 5:
						chs = append(chs, WatchEvent{Kind: EventPut, Keyspace: "model", Key: []byte(key), Value: []byte(fmt.Sprint(step))})
					case r < 6:
						chs = append(chs, WatchEvent{Kind: EventDelete, Keyspace: "model", Key: []byte(key)})
					case r < 7:
						lo := rng.IntN(20)
						chs = append(chs, WatchEvent{Kind: EventDeleteRange, Keyspace: "model",
							Key: fmt.Appendf(nil, "g%d/%02d", g, lo), End: fmt.Appendf(nil, "g%d/%02d", g, lo+rng.IntN(6))})
					case r < 8:
						chs = append(chs, WatchEvent{Kind: EventPut, Keyspace: own, Key: []byte(key), Value: []byte("v")})
					default:
						i := uint64(g + goroutines*rng.IntN(40))
						chs = append(chs, WatchEvent{Kind: EventSetBits, Bitslice: "bits", Lo: i, Hi: i + 1, Bit: rng.IntN(2) == 0})
					}
				}
				drop := !batch && rng.IntN(40) == 0
				if drop {
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
				if err != nil {
					errs <- err
					return
				}
				startOnce.Do(func() { close(startedWriting) })
				if err := writeChanges(ctx, db, shared, bits, chs, op, batch); err != nil {
					errs <- fmt.Errorf("op %d: %w", op, err)
					return
				}
				if !batch {
					if err := db.EndOp(ctx, op); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	writers.Wait()
	close(stop)
	h.mu.Lock()
	last := h.next
	h.mu.Unlock()
	mustFlush(t, db)
	for range subs {
		finalOp <- last
	}
	waitDone := make(chan struct{})
	go func() { done.Wait(); close(waitDone) }()
	select {
	case <-waitDone:
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(2 * time.Minute):
		t.Fatal("subscribers did not reach the last op")
	}
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	counts := make([]int64, len(subs))
	for i, s := range subs {
		counts[i] = marks[i].Load()
		if counts[i] < 2 {
			t.Errorf("%s: %d resolved marks checked", s.name, counts[i])
		}
	}
	t.Logf("%d ops; marks checked per subscriber %v", last, counts)
}

// writeChanges writes an op's changes to the engine: one by one, or as a
// Batch.
func writeChanges(ctx context.Context, db *DB, shared, bits interface{}, chs []WatchEvent, op uint64, batch bool) error {
	kv := func(name string) (*KV, error) { return db.KV(name) }
	if batch {
		b := db.NewBatch()
		for _, c := range chs {
			k, err := kv(c.Keyspace)
			if c.Kind != EventSetBits && err != nil {
				return err
			}
			switch c.Kind {
			case EventPut:
				b.Put(k, c.Key, c.Value)
			case EventDelete:
				b.Delete(k, c.Key)
			case EventDeleteRange:
				b.DeleteRange(k, c.Key, c.End)
			case EventSetBits:
				bs, err := db.Bits(c.Bitslice)
				if err != nil {
					return err
				}
				b.SetRange(bs, c.Lo, c.Hi, c.Bit)
			}
		}
		return db.Apply(ctx, b, op)
	}
	for _, c := range chs {
		var err error
		switch c.Kind {
		case EventDropKeyspace:
			err = db.DropKV(ctx, c.Keyspace, op)
		case EventSetBits:
			var bs *Bits
			if bs, err = db.Bits(c.Bitslice); err == nil {
				err = bs.Set(ctx, c.Lo, c.Bit, op)
			}
		default:
			var k *KV
			if k, err = kv(c.Keyspace); err != nil {
				return err
			}
			switch c.Kind {
			case EventPut:
				err = k.Put(ctx, c.Key, c.Value, op)
			case EventDelete:
				err = k.Delete(ctx, c.Key, op)
			case EventDeleteRange:
				err = k.DeleteRange(ctx, c.Key, c.End, op)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// snapshotState reads keyspaces and bitslices of a snapshot as a fold.
func snapshotState(sn *Snapshot, kvs, bits []string) *feedState {
	st := newFeedState()
	for _, name := range kvs {
		r, err := sn.KV(name)
		if err != nil {
			panic(err)
		}
		it, err := r.NewIter(nil)
		if err != nil {
			panic(err)
		}
		for ok := it.First(); ok; ok = it.Next() {
			st.apply(WatchEvent{Kind: EventPut, Keyspace: name, Key: append([]byte(nil), it.Key()...), Value: append([]byte(nil), it.Value()...)})
		}
		_ = it.Close()
	}
	for _, name := range bits {
		r, err := sn.Bits(name)
		if err != nil {
			panic(err)
		}
		for i := range r.Ones(0) {
			st.apply(WatchEvent{Kind: EventSetBits, Bitslice: name, Lo: i, Hi: i + 1, Bit: true})
		}
	}
	return st
}

// TestWatchSnapshotThenWatch: a snapshot followed by a watch from its
// Op()+1, taken again and again while concurrent writers run (GOMAXPROCS
// well above the cores), never skips or repeats a change: every change of
// every op above Op() is delivered exactly once, none at or below it, and
// the snapshot holds every op at or below it.
func TestWatchSnapshotThenWatch(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(16))
	db := openT(t, t.TempDir(), &Options{FlushInterval: 5 * time.Millisecond, WatchFromOpen: true})
	defer closeT(t, db)
	ctx := context.Background()
	k := mustKV(t, db, "s")
	h := &hostLog{ops: map[uint64][]WatchEvent{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Microsecond): // paced: the feed's buffer holds a round's ops
				}
				h.mu.Lock()
				h.next++
				op := h.next
				n := 1 + i%3
				var chs []WatchEvent
				for j := range n {
					chs = append(chs, WatchEvent{Kind: EventPut, Op: op, Keyspace: "s", Key: fmt.Appendf(nil, "op%08d/%d", op, j), Value: []byte("v")})
				}
				h.ops[op] = chs
				err := db.BeginOp(ctx, op)
				h.mu.Unlock()
				if err == nil {
					if g%2 == 0 {
						err = writeChanges(ctx, db, nil, nil, chs, op, true)
					} else {
						err = writeChanges(ctx, db, nil, nil, chs, op, false)
						if err == nil {
							err = db.EndOp(ctx, op)
						}
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	rounds := 20
	if testing.Short() {
		rounds = 5
	}
	for round := range rounds {
		time.Sleep(2 * time.Millisecond)
		sn, err := db.NewSnapshot()
		if err != nil {
			t.Fatal(err)
		}
		op := sn.Op()
		r, _ := sn.KV("s")
		for o := max(op, 100) - 100 + 1; o <= op; o++ {
			for _, c := range h.changes(o) {
				if _, err := r.Get(c.Key); err != nil {
					t.Fatalf("round %d: snapshot at op %d misses %s of op %d: %v", round, op, c.Key, o, err)
				}
			}
		}
		sn.Close()
		w, err := db.Watch(ctx, &WatchOptions{From: op + 1, Durable: round%2 == 1})
		if err != nil {
			select {
			case werr := <-errs:
				t.Fatalf("%v (a writer failed: %v)", err, werr)
			default:
			}
			t.Fatal(err)
		}
		target := op + 40
		seen := map[string]int{}
		evs, _ := readUntil(t, w, nil, target)
		w.Close()
		for _, e := range evs {
			if e.Op <= op {
				t.Fatalf("round %d: change of op %d repeated after a snapshot at op %d", round, e.Op, op)
			}
			seen[string(e.Key)]++
		}
		for o := op + 1; o <= target; o++ {
			for _, c := range h.changes(o) {
				if n := seen[string(c.Key)]; n != 1 {
					t.Fatalf("round %d: %s of op %d delivered %d times (snapshot at op %d)", round, c.Key, o, n, op)
				}
			}
		}
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
	}
	_ = k
}

func TestWatchBadInput(t *testing.T) {
	db := openT(t, t.TempDir(), nil)
	ctx := context.Background()
	mustKV(t, db, "a")
	mustBits(t, db, "b")
	mustPut(t, mustKV(t, db, "a"), "k", "v", 5)
	cases := []struct {
		name string
		opts *WatchOptions
		want error
	}{
		{"unknown keyspace", &WatchOptions{Keyspaces: []WatchKeyspace{{Name: "nope"}}}, ErrNotFound},
		{"unknown bitslice", &WatchOptions{Bitslices: []string{"nope"}}, ErrNotFound},
		{"bad keyspace name", &WatchOptions{Keyspaces: []WatchKeyspace{{Name: "a/b"}}}, ErrBadName},
		{"bad bitslice name", &WatchOptions{Bitslices: []string{""}}, ErrBadName},
		{"negative buffer", &WatchOptions{Buffer: -1}, ErrBadOptions},
		{"start past the highest op", &WatchOptions{From: 7}, ErrBadOp},
		{"start above MaxOp", &WatchOptions{From: MaxOp + 1}, ErrBadOp},
		// The feed began recording at the first Watch: op 5 was begun
		// before, so no watch may start at or below it.
		{"start below the changes held", &WatchOptions{From: 3}, ErrCompacted},
	}
	for _, c := range cases {
		w, err := db.Watch(ctx, c.opts)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
		// Every case before the last is refused before the feed starts
		// recording: a refused Watch must not leave every later write
		// paying for the recording.
		if c.want != ErrCompacted && db.feed.on.Load() {
			t.Errorf("%s: the refused Watch turned the feed's recording on", c.name)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "kvbuf: ") {
			t.Errorf("%s: error text %q", c.name, err)
		}
		if w != nil {
			w.Close()
		}
	}
	if !errors.Is(ErrCompacted, ErrResync) || !errors.Is(ErrLagged, ErrResync) {
		t.Fatal("ErrCompacted and ErrLagged must match ErrResync")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := db.Watch(cctx, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
	// A watch whose ctx ends stops; Next with an ended ctx returns it.
	wctx, wcancel := context.WithCancel(ctx)
	w, err := db.Watch(wctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	short, scancel := context.WithTimeout(ctx, 5*time.Millisecond)
	if _, err := w.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next with a short ctx: %v", err)
	}
	scancel()
	wcancel()
	if _, err := w.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after the watch's ctx ended: %v", err)
	}
	// Close of the watch ends a blocked Next.
	w2, err := db.Watch(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(5 * time.Millisecond); w2.Close() }()
	if _, err := w2.Next(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
	// The engine's Close ends every watch once it read what was ready.
	w3, err := db.Watch(ctx, &WatchOptions{Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	a := mustKV(t, db, "a")
	mustPut(t, a, "k2", "v", 6)
	if err := db.EndOp(ctx, 6); err != nil {
		t.Fatal(err)
	}
	closeT(t, db)
	var got []WatchEvent
	for {
		e, err := w3.Next(ctx)
		if errors.Is(err, ErrClosed) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
	}
	if len(got) != 2 || got[0].Kind != EventPut || got[1].Kind != EventResolved || got[1].Op != 6 {
		t.Fatalf("events before Close: %+v", got)
	}
	if _, err := db.Watch(ctx, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Watch after Close: %v", err)
	}
}

// TestWatchLagThenResync: a watch that does not read while the feed's
// buffer overflows ends with ErrLagged; a snapshot and a watch from its
// Op()+1 then go on without a gap.
func TestWatchLagThenResync(t *testing.T) {
	db := openT(t, t.TempDir(), &Options{FlushInterval: time.Millisecond, WatchBufferBytes: 64 << 10, WatchFromOpen: true})
	defer closeT(t, db)
	ctx := context.Background()
	k := mustKV(t, db, "a")
	w, err := db.Watch(ctx, &WatchOptions{From: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	val := strings.Repeat("x", 1000)
	op := uint64(0)
	for range 300 {
		op++
		mustPut(t, k, fmt.Sprint(op%50), val, op)
	}
	mustFlush(t, db)
	time.Sleep(20 * time.Millisecond)
	var lagErr error
	for {
		if _, lagErr = w.Next(ctx); lagErr != nil {
			break
		}
	}
	if !errors.Is(lagErr, ErrLagged) || !errors.Is(lagErr, ErrResync) {
		t.Fatalf("a watch behind the buffer: %v, want ErrLagged", lagErr)
	}
	if _, err := db.Watch(ctx, &WatchOptions{From: 1}); !errors.Is(err, ErrCompacted) {
		t.Fatalf("a watch from a trimmed op: %v, want ErrCompacted", err)
	}
	sn, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	st := snapshotState(sn, []string{"a"}, nil)
	w2, err := db.Watch(ctx, &WatchOptions{From: sn.Op() + 1})
	sn.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	for range 10 {
		op++
		mustPut(t, k, fmt.Sprint(op%50), fmt.Sprint(op), op)
	}
	if err := db.EndOp(ctx, op); err != nil {
		t.Fatal(err)
	}
	readUntil(t, w2, st, op)
	for i := op - 9; i <= op; i++ {
		if got := st.kv["a"][fmt.Sprint(i%50)]; got != fmt.Sprint(i) {
			t.Fatalf("after resync key %d = %.10q, want %d", i%50, got, i)
		}
	}
}

// TestWatchOpZero: writes of op 0 (a host that does not number ops) are
// delivered with op 0, at the next resolved mark, in both modes.
func TestWatchOpZero(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("durable=%v", durable), func(t *testing.T) {
			db := openT(t, t.TempDir(), &Options{FlushInterval: 5 * time.Millisecond})
			defer closeT(t, db)
			k := mustKV(t, db, "a")
			w, err := db.Watch(context.Background(), &WatchOptions{Durable: durable})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			for i := range 5 {
				mustPut(t, k, fmt.Sprint(i), "v", 0)
			}
			if durable {
				mustFlush(t, db)
			}
			st := newFeedState()
			n := 0
			for n < 5 {
				e := nextEvent(t, w)
				if e.Kind == EventResolved {
					continue
				}
				if e.Op != 0 || string(e.Key) != fmt.Sprint(n) {
					t.Fatalf("event %d: %+v", n, e)
				}
				st.apply(e)
				n++
			}
			if durable && db.Metrics().Flushes == 0 {
				t.Fatal("no flush")
			}
		})
	}
}

// TestWatchBatchReuseKeepsEvents: a host that Resets and refills its
// Batch after Apply, before the watch has read the batch's record, does
// not change the record (it owns its bytes: a record that referenced the
// Batch's buffer, a design tried and reverted, needed Reset to take a new
// one): every event keeps its op's keys and values, whether the watch
// reads before or after the refills, and a Batch added to after an Apply
// without a Reset records its later changes too.
func TestWatchBatchReuseKeepsEvents(t *testing.T) {
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1, WatchFromOpen: true})
	defer closeT(t, db)
	ctx := context.Background()
	k := mustKV(t, db, "k")
	w, err := db.Watch(ctx, &WatchOptions{From: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	const ops, puts = 20, 8
	bt := db.NewBatch()
	var held []WatchEvent // read early, checked at the end
	for op := 1; op <= ops; op++ {
		if op%5 != 0 {
			bt.Reset()
		}
		for j := range puts {
			bt.Put(k, []byte(fmt.Sprintf("k%02d-%d", op, j)), []byte(fmt.Sprintf("v%02d-%d", op, j)))
		}
		if err := db.Apply(ctx, bt, uint64(op)); err != nil {
			t.Fatal(err)
		}
		if op == 3 {
			for {
				e := nextEvent(t, w)
				if e.Kind == EventResolved && e.Op >= 3 {
					break
				}
				if e.Kind == EventPut {
					held = append(held, e)
				}
			}
		}
	}
	check := func(e WatchEvent) {
		t.Helper()
		var op, j, vop, vj int
		if _, err := fmt.Sscanf(string(e.Key), "k%02d-%d", &op, &j); err != nil {
			t.Fatalf("key %q: %v", e.Key, err)
		}
		if _, err := fmt.Sscanf(string(e.Value), "v%02d-%d", &vop, &vj); err != nil || vop != op || vj != j {
			t.Fatalf("op %d: %q = %q", e.Op, e.Key, e.Value)
		}
		if uint64(op) > e.Op {
			t.Fatalf("op %d: a change of op %d: %q", e.Op, op, e.Key)
		}
	}
	n := len(held)
	for {
		e := nextEvent(t, w)
		if e.Kind == EventResolved {
			if e.Op >= ops {
				break
			}
			continue
		}
		check(e)
		n++
	}
	for _, e := range held {
		check(e)
	}
	// Ops 5, 10, 15 and 20 added to the batch of the op before without a
	// Reset, and applied it all again.
	if want := ops*puts + 4*puts; n != want {
		t.Fatalf("%d puts delivered, want %d", n, want)
	}
}

// recBatchEngine opens an engine with interval flushes off and its
// keyspaces a and b and bitslice s, for the record tests, closed at the
// test's end.
func recBatchEngine(t *testing.T) (*DB, *KV, *KV, *Bits) {
	t.Helper()
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1})
	t.Cleanup(func() { closeT(t, db) })
	bs, err := db.Bits("s")
	if err != nil {
		t.Fatal(err)
	}
	return db, mustKV(t, db, "a"), mustKV(t, db, "b"), bs
}

// TestWatchRecBatchLayout: a batch's packed record (newRecBatch: the
// bytes of the changes kept, each change's after the previous one's, its
// ends and heads) gives, change by change, what the change-by-change form
// (batchEvents) gives: every kind, empty and nil bounds, three names, with
// no change left out and with every pattern of discarded changes in a
// sliding window (the kept changes' bytes moved down over them).
func TestWatchRecBatchLayout(t *testing.T) {
	db, a, b, bs := recBatchEngine(t)
	bt := db.NewBatch()
	bt.Put(a, []byte("k1"), []byte("value-1"))
	bt.Put(a, []byte("k2"), []byte{})
	bt.Set(bs, 7, true)
	bt.Delete(b, []byte("gone"))
	bt.DeleteRange(a, nil, []byte("c"))
	bt.DeleteRange(b, []byte("m"), nil)
	bt.DeleteRange(b, nil, nil)
	bt.DeleteRange(a, []byte{}, []byte("zz"))
	bt.SetRange(bs, 10, 20, false)
	bt.Put(b, []byte("x"), []byte("y"))
	bt.Delete(a, []byte("last"))
	n := bt.Len()
	var arena recArena // the records carved one after another from its chunks
	check := func(skip []bool) {
		t.Helper()
		want := batchEvents(5, bt, skip)
		rb := newRecBatch(&arena, bt, skip)
		if rb == nil || rb.n != len(want) {
			t.Fatalf("skip %v: record of %v changes, want %d", skip, rb, len(want))
		}
		for j := range want {
			if got := rb.event(5, j); !reflect.DeepEqual(got, want[j]) {
				t.Fatalf("skip %v: change %d: %+v, want %+v", skip, j, got, want[j])
			}
		}
	}
	check(nil)
	for w := 1; w <= 3; w++ {
		for i := 0; i+w <= n; i++ {
			skip := make([]bool, n)
			for k := i; k < i+w; k++ {
				skip[k] = true
			}
			check(skip)
		}
	}
}

// TestWatchRecBatchUniform: a batch of puts to one keyspace with one key
// length and one value length is recorded without ends and heads
// (recBatch.uni), and gives what the change-by-change form (batchEvents)
// gives, change by change (event) and in runs from every change
// (eventsInto, into slots that held other kinds of event); a batch that
// differs from one in a single change (a key or a value a byte longer or
// shorter, another keyspace, a delete, a bit set, the same key lengths
// split differently between key and value) is recorded with its index and
// gives its own changes.
func TestWatchRecBatchUniform(t *testing.T) {
	db, a, b, bs := recBatchEngine(t)
	var arena recArena
	fill := func(bt *Batch, n, kl, vl int) {
		bt.Reset()
		for i := range n {
			key := bytes.Repeat([]byte{byte('a' + i%26)}, kl)
			val := bytes.Repeat([]byte{byte('A' + i%26)}, vl)
			bt.Put(a, key, val)
		}
	}
	check := func(name string, bt *Batch, uni bool) {
		t.Helper()
		want := batchEvents(7, bt, nil)
		rb := newRecBatch(&arena, bt, nil)
		if rb == nil {
			t.Fatalf("%s: no record, want one of %d changes", name, len(want))
		}
		if rb.n != len(want) || rb.uni != uni {
			t.Fatalf("%s: record %+v of %d changes, want %d, uniform %v", name, rb, rb.n, len(want), uni)
		}
		if uni && len(rb.buf) != len(bt.data) {
			t.Fatalf("%s: a uniform record of %d bytes, want the batch's %d", name, len(rb.buf), len(bt.data))
		}
		for j := range want {
			if got := rb.event(7, j); !reflect.DeepEqual(got, want[j]) {
				t.Fatalf("%s: change %d: %+v, want %+v", name, j, got, want[j])
			}
		}
		stale := WatchEvent{Kind: EventDeleteRange, Op: 99, Keyspace: "x", Key: []byte("k"), End: []byte("z"), Bitslice: "s", Lo: 1, Hi: 2, Bit: true, Watermark: 3}
		for j := range want {
			dst := make([]WatchEvent, 1, 1+len(want))
			dst[0] = stale
			for k := 1; k < cap(dst); k++ {
				dst[:cap(dst)][k] = stale
			}
			got := rb.eventsInto(dst, 7, j, len(want))
			if len(got) != 1+len(want)-j || !reflect.DeepEqual(got[0], stale) {
				t.Fatalf("%s: run from %d: %d events, want %d after the one there", name, j, len(got), 1+len(want)-j)
			}
			for k, e := range got[1:] {
				if !reflect.DeepEqual(e, want[j+k]) {
					t.Fatalf("%s: run from %d: change %d: %+v, want %+v", name, j, j+k, e, want[j+k])
				}
			}
		}
	}
	bt := db.NewBatch()
	for _, c := range []struct{ n, kl, vl int }{{1, 1, 0}, {1, 8, 16}, {3, 2, 0}, {64, 8, 16}, {5, 300, 7}} {
		fill(bt, c.n, c.kl, c.vl)
		check(fmt.Sprintf("%d puts of %d+%d bytes", c.n, c.kl, c.vl), bt, true)
	}
	for i := range 4 {
		for _, odd := range []string{"key+1", "key-1", "value+1", "value-1", "split", "keyspace", "delete", "bit"} {
			// Change i replaced: the batch built again with it different.
			bt.Reset()
			for j := range 4 {
				key, val := bytes.Repeat([]byte{'k'}, 3), bytes.Repeat([]byte{'v'}, 5)
				if j != i {
					bt.Put(a, key, val)
					continue
				}
				switch odd {
				case "key+1":
					bt.Put(a, append(key, 'k'), val)
				case "key-1":
					bt.Put(a, key[:2], val)
				case "value+1":
					bt.Put(a, key, append(val, 'v'))
				case "value-1":
					bt.Put(a, key, val[:4])
				case "split":
					bt.Put(a, append(key, 'k'), val[:4])
				case "keyspace":
					bt.Put(b, key, val)
				case "delete":
					bt.Delete(a, append(key, val...))
				case "bit":
					bt.Set(bs, 9, true)
				}
			}
			check(fmt.Sprintf("change %d %s", i, odd), bt, false)
		}
	}
}

// TestWatchBatchRecordForms: a batch is recorded as one pointer-free
// record (recBatch) unless its data passes maxRecData, when each change is
// recorded on its own; both forms, read through several short reads (a
// read starting inside a record), give the same events: every kind, two
// keyspaces and a bitslice in one batch, a change skipped by a drop in
// neither.
func TestWatchBatchRecordForms(t *testing.T) {
	var streams [2][]WatchEvent
	for i, limit := range []int{maxRecData, 0} {
		func() {
			old := maxRecData
			maxRecData = limit
			defer func() { maxRecData = old }()
			db := openT(t, t.TempDir(), &Options{FlushInterval: -1, WatchFromOpen: true})
			defer closeT(t, db)
			ctx := context.Background()
			a, b := mustKV(t, db, "a"), mustKV(t, db, "b")
			bs, err := db.Bits("s")
			if err != nil {
				t.Fatal(err)
			}
			w, err := db.Watch(ctx, &WatchOptions{From: 1, Buffer: 3})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			for op := uint64(1); op <= 3; op++ {
				bt := db.NewBatch()
				bt.Put(a, []byte(fmt.Sprint("k", op)), []byte(fmt.Sprint("v", op)))
				bt.Set(bs, op, true)
				bt.Delete(b, []byte("gone"))
				bt.DeleteRange(a, nil, []byte("c"))
				bt.DeleteRange(b, []byte("m"), nil)
				bt.SetRange(bs, 10, 10+op, op%2 == 0)
				bt.Put(b, []byte("x"), []byte(fmt.Sprint("y", op)))
				if err := db.Apply(ctx, bt, op); err != nil {
					t.Fatal(err)
				}
			}
			streams[i] = append(streams[i], changesUntil(t, w, 3)...)
		}()
	}
	if len(streams[0]) != 21 || !reflect.DeepEqual(streams[0], streams[1]) {
		t.Fatalf("one record per batch:\n%+v\none record per change:\n%+v", streams[0], streams[1])
	}
	if e := streams[0][19]; e.Kind != EventSetBits || e.Op != 3 || e.Lo != 10 || e.Hi != 13 || e.Bit {
		t.Fatalf("change 19: %+v", e)
	}
}

// TestWatchVisibleCutOrder: a visible-mode cut is made without stopping the
// writers (rule C1: n = CompletedOp, then a drain of the writes in flight,
// then the record count). A batch ends its op when it is admitted, before
// it changes the overlay and records, and an explicit op ends at EndOp
// while a write of it may still be in flight: a cut that did not wait for
// those writes would deliver their changes after a mark at or above their
// op. Writers here keep large batches and single writes of explicit ops in
// flight at all times; the visible watch checks that every change comes
// before the first mark at or above its op, and exactly once.
func TestWatchVisibleCutOrder(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(16))
	db := openT(t, t.TempDir(), &Options{FlushInterval: 20 * time.Millisecond, WatchFromOpen: true})
	defer closeT(t, db)
	ctx := context.Background()
	k := mustKV(t, db, "c")
	w, err := db.Watch(ctx, &WatchOptions{From: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	h := &hostLog{ops: map[uint64][]WatchEvent{}}
	const writers = 4
	opsPer := 150
	if testing.Short() {
		opsPer = 50
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for g := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := range opsPer {
				n := 1 + rng.IntN(400)
				if i%4 == 3 {
					n = 1 + rng.IntN(4) // single writes of an explicit op
				}
				h.mu.Lock()
				h.next++
				op := h.next
				chs := make([]WatchEvent, n)
				for j := range chs {
					chs[j] = WatchEvent{Kind: EventPut, Op: op, Keyspace: "c", Key: fmt.Appendf(nil, "op%08d/%04d", op, j), Value: []byte("v")}
				}
				h.ops[op] = chs
				err := db.BeginOp(ctx, op)
				h.mu.Unlock()
				if err == nil {
					err = writeChanges(ctx, db, nil, nil, chs, op, i%4 != 3)
					if err == nil && i%4 == 3 {
						err = db.EndOp(ctx, op)
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	last := uint64(writers * opsPer)
	seen := map[string]int{}
	var mark uint64
	for mark < last {
		e := nextEvent(t, w)
		if e.Kind == EventResolved {
			mark = e.Op
			continue
		}
		if e.Op <= mark {
			t.Fatalf("change %s of op %d delivered after the resolved mark %d", e.Key, e.Op, mark)
		}
		seen[string(e.Key)]++
	}
	for op := uint64(1); op <= last; op++ {
		for _, c := range h.changes(op) {
			if n := seen[string(c.Key)]; n != 1 {
				t.Fatalf("%s of op %d delivered %d times", c.Key, op, n)
			}
		}
	}
	_ = k
}

// TestWatchDurableAfterRelease: a durable-mode watch delivers none of
// the changes resolved for a visible watch before the flush that makes
// them durable, then every change once, in order, each mark stamped with a
// watermark that covers it; writes of op 0, which no watermark covers,
// wait for their generation's release too (doc/design.md, "Change feed",
// rule 4; mutation 212); an overflow that drops the log before the flush
// ends it with ErrLagged.
func TestWatchDurableAfterRelease(t *testing.T) {
	const ops, batch = 20, 10
	for _, tc := range []struct {
		name     string
		overflow bool
		opZero   bool
	}{{"ops", false, false}, {"overflow", true, false}, {"op-zero", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			db := openT(t, t.TempDir(), &Options{FlushInterval: -1, WatchFromOpen: true})
			defer closeT(t, db)
			ctx := context.Background()
			k := mustKV(t, db, "a")
			// A visible watch makes the resolver cut the record every
			// watchTick, so steps are resolved long before they are durable.
			vis, err := db.Watch(ctx, &WatchOptions{From: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer vis.Close()
			w, err := db.Watch(ctx, &WatchOptions{From: 1, Durable: true})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			bt := db.NewBatch()
			for op := 1; op <= ops; op++ {
				bt.Reset()
				for j := range batch {
					bt.Put(k, []byte(fmt.Sprintf("k%03d", op*batch+j)), []byte(fmt.Sprint(op)))
				}
				o := uint64(op)
				if tc.opZero {
					o = 0
				}
				if err := db.Apply(ctx, bt, o); err != nil {
					t.Fatal(err)
				}
			}
			// Until the visible watch has every change, the durable one
			// gets nothing.
			for seen := 0; seen < ops*batch; {
				e, err := vis.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if e.Kind != EventResolved {
					seen++
				}
				c, cancel := context.WithTimeout(ctx, time.Millisecond)
				de, err := w.Next(c)
				cancel()
				if err == nil {
					t.Fatalf("durable watch delivered %+v before any flush (watermark %d)", de, db.Watermark())
				}
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatal(err)
				}
			}
			if tc.overflow {
				// What an overflow does to the log (feed.overflow): every
				// watch lags.
				db.feed.mu.Lock()
				db.feed.dropLog()
				db.feed.mu.Unlock()
			}
			mustFlush(t, db)
			next := 1 * batch
			for {
				e, err := w.Next(ctx)
				if tc.overflow {
					if !errors.Is(err, ErrLagged) {
						t.Fatalf("after an overflow: %+v, %v; want ErrLagged", e, err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if e.Kind == EventResolved {
					if e.Watermark < e.Op || db.Watermark() < e.Op {
						t.Fatalf("durable mark %+v, watermark %d: not covered", e, db.Watermark())
					}
					if e.Op >= ops {
						break
					}
					continue
				}
				wop := uint64(next / batch)
				if tc.opZero {
					wop = 0
				}
				if wk := fmt.Sprintf("k%03d", next); string(e.Key) != wk || e.Op != wop {
					t.Fatalf("change %+v, want key %s of op %d", e, wk, wop)
				}
				if next++; tc.opZero && next == (ops+1)*batch {
					break // marks at op 0 are below From: not delivered
				}
			}
			if next != (ops+1)*batch {
				t.Fatalf("delivered changes up to %d, want %d", next, (ops+1)*batch)
			}
		})
	}
}

// TestWatchEventBytesOwn: an event's Key and Value are capped at their
// ends (a put's key and value share one copy, a batch's changes share its
// data), so that a subscriber appending to one never changes another's
// bytes: single puts, and batches whose runs Next builds (recBatch.event).
func TestWatchEventBytesOwn(t *testing.T) {
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1, WatchFromOpen: true})
	defer closeT(t, db)
	ctx := context.Background()
	k := mustKV(t, db, "a")
	w, err := db.Watch(ctx, &WatchOptions{From: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	want := map[string]string{}
	for op := uint64(1); op <= 4; op++ {
		key, val := fmt.Sprint("k", op), fmt.Sprint("v", op)
		want[key] = val
		if op%2 == 0 {
			bt := db.NewBatch()
			bt.Put(k, []byte(key), []byte(val))
			if err := db.Apply(ctx, bt, op); err != nil {
				t.Fatal(err)
			}
		} else if err := k.Put(ctx, []byte(key), []byte(val), op); err != nil {
			t.Fatal(err)
		}
	}
	var got []WatchEvent
	for len(got) < 4 {
		if e := nextEvent(t, w); e.Kind == EventPut {
			got = append(got, e)
		}
	}
	for _, e := range got {
		_ = append(e.Key, 'X') // one byte: within an uncapped slice's capacity
		_ = append(e.Value, 'Y')
	}
	for _, e := range got {
		if want[string(e.Key)] != string(e.Value) {
			t.Fatalf("op %d: event %q=%q after appends to the events, want one of %v", e.Op, e.Key, e.Value, want)
		}
	}
}

// TestWatchRunOrder: a watch of everything returns a batch record's
// changes from runs that Next builds (watchRun) between the buffer's
// events (single writes, marks): every change comes exactly once, in op
// order, before the first mark at or above its op, whatever the Buffer
// (runs split at its bound and at a read's start inside a record). A
// writer mixes batches of several sizes and single puts while the
// visible-mode cuts (every watchTick) resolve records and keep those
// recorded after the cut.
func TestWatchRunOrder(t *testing.T) {
	const ops = 400
	db := openT(t, t.TempDir(), &Options{FlushInterval: 20 * time.Millisecond, WatchFromOpen: true})
	defer closeT(t, db)
	ctx := context.Background()
	k := mustKV(t, db, "k")
	var want []string // "op/key", in op order
	key := func(op uint64, i int) string { return fmt.Sprintf("%04d-%02d", op, i) }
	for op := uint64(1); op <= ops; op++ {
		n := 1
		if op%4 != 0 {
			n = int(op%7) + 2
		}
		for i := range n {
			want = append(want, fmt.Sprint(op, "/", key(op, i)))
		}
	}
	buffers := []int{1, 3, 64, 0}
	errs := make(chan error, len(buffers))
	for _, buf := range buffers {
		w, err := db.Watch(ctx, &WatchOptions{From: 1, Buffer: buf})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		go func() {
			var got []string
			var mark uint64
			for mark < ops {
				e, err := w.Next(ctx)
				if err != nil {
					errs <- err
					return
				}
				switch {
				case e.Kind == EventResolved:
					mark = e.Op
					if len(got) < len(want) && opOf(want[len(got)]) <= mark {
						errs <- fmt.Errorf("buffer %d: mark %d before change %d (%s)", buf, mark, len(got), want[len(got)])
						return
					}
				case e.Kind != EventPut || string(e.Key) != string(e.Value):
					errs <- fmt.Errorf("buffer %d: event %+v", buf, e)
					return
				default:
					got = append(got, fmt.Sprint(e.Op, "/", string(e.Key)))
					if i := len(got) - 1; i >= len(want) || got[i] != want[i] {
						errs <- fmt.Errorf("buffer %d: change %d is %s, want %s", buf, i, got[i], want[min(i, len(want)-1)])
						return
					}
				}
			}
			if len(got) != len(want) {
				errs <- fmt.Errorf("buffer %d: %d changes, want %d", buf, len(got), len(want))
				return
			}
			errs <- nil
		}()
	}
	bt := db.NewBatch()
	for op := uint64(1); op <= ops; op++ {
		n := 1
		if op%4 != 0 {
			n = int(op%7) + 2
		}
		if n == 1 {
			if err := k.Put(ctx, []byte(key(op, 0)), []byte(key(op, 0)), op); err != nil {
				t.Fatal(err)
			}
			if err := db.EndOp(ctx, op); err != nil {
				t.Fatal(err)
			}
			continue
		}
		bt.Reset()
		for i := range n {
			bt.Put(k, []byte(key(op, i)), []byte(key(op, i)))
		}
		if err := db.Apply(ctx, bt, op); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for range buffers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// opOf returns the op of TestWatchRunOrder's "op/key".
func opOf(s string) uint64 {
	var op uint64
	fmt.Sscan(strings.SplitN(s, "/", 2)[0], &op)
	return op
}

// TestWatchDeliveredCountFromStore checks Metrics.WatchDelivered for a
// watch that reads retained changes from the store after a reopen, then
// goes on in memory: each event returned is counted once (the switch to
// memory counted the store's last events a second time).
func TestWatchDeliveredCountFromStore(t *testing.T) {
	const ops = 30
	dir := t.TempDir()
	opts := &Options{FlushInterval: -1, WatchRetain: &WatchRetention{}}
	db := openT(t, dir, opts)
	ctx := context.Background()
	k := mustKV(t, db, "k")
	bt := db.NewBatch()
	for op := uint64(1); op <= ops; op++ {
		bt.Reset()
		for i := range 3 {
			bt.Put(k, []byte{byte(op), byte(i)}, []byte{1})
		}
		if err := db.Apply(ctx, bt, op); err != nil {
			t.Fatal(err)
		}
		if op%10 == 0 {
			if err := db.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	closeT(t, db)
	db = openT(t, dir, opts)
	defer closeT(t, db)
	k = mustKV(t, db, "k")
	w, err := db.Watch(ctx, &WatchOptions{From: 1, Buffer: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	next := uint64(ops + 1)
	puts := readCheckingDelivered(t, db, w, db.Metrics().WatchDelivered, next, func(op uint64) {
		if op == ops {
			// Past the store: one op more, read from memory.
			if err := k.Put(ctx, []byte("m"), []byte{2}, next); err != nil {
				t.Fatal(err)
			}
			if err := db.EndOp(ctx, next); err != nil {
				t.Fatal(err)
			}
		}
	})
	if puts != 3*ops+1 {
		t.Fatalf("%d puts read, want %d", puts, 3*ops+1)
	}
}

// TestWatchDeliveredCount checks Metrics.WatchDelivered against the events
// a watch of everything returned: batches of 5 read as runs (split by
// Buffers of 3 and 64) and single puts, checked at every resolved mark (one
// every 10 ops),
// where every run read before it has returned its last event (mutation
// 381: a run's events not counted).
func TestWatchDeliveredCount(t *testing.T) {
	const ops = 40
	for _, buf := range []int{3, 64} {
		t.Run(fmt.Sprint("buffer-", buf), func(t *testing.T) {
			db := openT(t, t.TempDir(), &Options{FlushInterval: -1, WatchFromOpen: true})
			defer closeT(t, db)
			ctx := context.Background()
			k := mustKV(t, db, "k")
			bt := db.NewBatch()
			for op := uint64(1); op <= ops; op++ {
				if op%3 == 0 {
					if err := k.Put(ctx, []byte{byte(op)}, []byte{1}, op); err != nil {
						t.Fatal(err)
					}
					if err := db.EndOp(ctx, op); err != nil {
						t.Fatal(err)
					}
					continue
				}
				bt.Reset()
				for i := range 5 {
					bt.Put(k, []byte{byte(op), byte(i)}, []byte{2})
				}
				if err := db.Apply(ctx, bt, op); err != nil {
					t.Fatal(err)
				}
				if op%10 == 0 { // a mark every 10 ops
					if err := db.Flush(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			w, err := db.Watch(ctx, &WatchOptions{From: 1, Buffer: buf})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			readCheckingDelivered(t, db, w, 0, ops, nil)
		})
	}
}

// readCheckingDelivered reads w with Next up to a resolved mark at or past
// last, checking at every mark that Metrics.WatchDelivered is base plus
// the events returned (marks included); atMark, if not nil, runs after
// each mark's check but the last. It returns how many changes it read.
func readCheckingDelivered(t *testing.T, db *DB, w *Watch, base, last uint64, atMark func(op uint64)) uint64 {
	t.Helper()
	var n, changes uint64
	for {
		e, err := w.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n++
		if e.Kind != EventResolved {
			changes++
			continue
		}
		if got := db.Metrics().WatchDelivered; got != base+n {
			t.Fatalf("at mark %d: WatchDelivered %d, want %d (%d before, %d events returned)", e.Op, got, base+n, base, n)
		}
		if e.Op >= last {
			return changes
		}
		if atMark != nil {
			atMark(e.Op)
		}
	}
}
