package kvbuf

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// applyReviewed applies bt as op and returns the events the feed must
// deliver for it, taken before the call from bt's changes as the
// change-by-change form builds them (an empty SetRange is discarded).
func applyReviewed(t *testing.T, db *DB, bt *Batch, op uint64) []string {
	t.Helper()
	skip := make([]bool, bt.Len())
	for i := range bt.ops {
		o := &bt.ops[i]
		skip[i] = o.kind == opSetRange && o.lo >= o.hi
	}
	var want []string
	for _, e := range batchEvents(op, bt, skip) {
		want = append(want, evText(e))
	}
	if err := db.Apply(context.Background(), bt, op); err != nil {
		t.Fatal(err)
	}
	return want
}

// TestWatchBatchRecordReview: the batch record end to end, in both forms
// (one record a batch, and change by change when the data passes
// maxRecData), live and from retention after a reopen, read through a
// short buffer (reads that start inside a record): bit changes first and
// between puts (the change after a bit change starts where the change
// before the bit change ended); every range delete bound (nil, empty, both
// nil, both empty) keeping its nil-ness; discards (empty SetRanges) at the
// start, middle and end and a batch whose every change is discarded (no
// event); a Batch applied twice, appended to after Apply and applied
// again, then Reset and refilled with other bytes at the same offsets,
// all before the watch reads anything; events held across later refills
// never change.
func TestWatchBatchRecordReview(t *testing.T) {
	var live [2][]string
	for form, limit := range []int{maxRecData, 0} {
		t.Run(fmt.Sprintf("form=%d", form), func(t *testing.T) {
			old := maxRecData
			maxRecData = limit
			defer func() { maxRecData = old }()
			dir := t.TempDir()
			ctx := context.Background()
			opts := &Options{FlushInterval: -1, WatchFromOpen: true, WatchRetain: &WatchRetention{}}
			db := openT(t, dir, opts)
			ka, kb, bs := mustKV(t, db, "a"), mustKV(t, db, "b"), mustBits(t, db, "s")
			w, err := db.Watch(ctx, &WatchOptions{From: 1, Buffer: 3})
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			bt := db.NewBatch()
			bt.Set(bs, 3, true)
			bt.Put(ka, []byte("p1"), []byte("v1"))
			bt.SetRange(bs, 5, 5, true) // discarded
			bt.Put(ka, []byte("p2"), []byte{})
			bt.Set(bs, 4, false)
			bt.SetRange(bs, 6, 9, true)
			bt.Delete(kb, []byte("d"))
			bt.DeleteRange(kb, nil, []byte{})
			bt.DeleteRange(kb, []byte{}, []byte{})
			bt.DeleteRange(kb, nil, nil)
			bt.DeleteRange(ka, []byte{}, nil)
			bt.DeleteRange(kb, nil, []byte("z"))
			bt.DeleteRange(kb, []byte("x"), []byte("z"))
			bt.Put(kb, []byte("p3"), []byte("v3"))
			bt.SetRange(bs, 9, 9, false) // discarded
			want = append(want, applyReviewed(t, db, bt, 1)...)
			b2 := db.NewBatch()
			b2.SetRange(bs, 1, 1, true)
			b2.Put(kb, []byte("q"), []byte("w"))
			b2.SetRange(bs, 2, 2, true)
			b2.Put(kb, []byte("q2"), []byte("w2"))
			b2.SetRange(bs, 4, 4, true)
			want = append(want, applyReviewed(t, db, b2, 2)...)
			b3 := db.NewBatch()
			b3.SetRange(bs, 1, 1, true)
			b3.SetRange(bs, 7, 7, false)
			if got := applyReviewed(t, db, b3, 3); len(got) != 0 {
				t.Fatalf("all discarded: %q", got)
			}
			want = append(want, applyReviewed(t, db, bt, 4)...) // again
			bt.Put(ka, []byte("after"), []byte("apply"))
			bt.Set(bs, 11, true)
			want = append(want, applyReviewed(t, db, bt, 5)...) // appended to
			bt.Reset()
			bt.Put(ka, []byte("P1"), []byte("V1")) // the same offsets, other bytes
			bt.DeleteRange(ka, []byte("Z"), []byte("ZZ"))
			want = append(want, applyReviewed(t, db, bt, 6)...)
			if n := strings.Count(strings.Join(want, "\n"), "\n") + 1; n != 2*13+2+0+13+2+2 {
				t.Fatalf("%d changes expected, the test miscounts: %q", n, want)
			}

			held := changesUntil(t, w, 6)
			var got []string
			for _, e := range held {
				got = append(got, evText(e))
			}
			checkSame(t, "live", got, want[:len(got)])
			if len(got) != len(want) {
				t.Fatalf("live: %d events, want %d", len(got), len(want))
			}
			// Later refills of the same Batch leave the events read.
			for op := uint64(7); op <= 9; op++ {
				bt.Reset()
				bt.Put(ka, []byte("xx"), []byte("yy"))
				bt.Put(kb, []byte("x2"), []byte("y2"))
				want = append(want, applyReviewed(t, db, bt, op)...)
			}
			for i, e := range held {
				if evText(e) != got[i] {
					t.Fatalf("event %d changed after the Batch's refill: %s, was %s", i, evText(e), got[i])
				}
			}
			w.Close()
			live[form] = got
			if err := db.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			closeT(t, db)

			db = openT(t, dir, opts)
			defer closeT(t, db)
			for _, from := range []uint64{1, 2, 4, 5} {
				w, err := db.Watch(ctx, &WatchOptions{From: from, Durable: true, Buffer: 2})
				if err != nil {
					t.Fatal(err)
				}
				var sel []string
				for _, s := range want {
					var op uint64
					fmt.Sscan(s, &op)
					if op >= from {
						sel = append(sel, s)
					}
				}
				checkSame(t, fmt.Sprintf("retained from %d", from), readTo(t, w, 9), sel)
				w.Close()
			}
		})
	}
	checkSame(t, "the two forms", live[1], live[0])
}

// TestWatchBatchRecordManyNames: a batch naming more than recMaxNames
// keyspaces and bitslices is recorded change by change (newRecBatch
// returns nil), one naming exactly recMaxNames as one record, and both
// deliver the batch's changes in order on the same stream as the batches
// around them.
func TestWatchBatchRecordManyNames(t *testing.T) {
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1, WatchFromOpen: true})
	defer closeT(t, db)
	ctx := context.Background()
	ks := make([]*KV, recMaxNames)
	for i := range ks {
		ks[i] = mustKV(t, db, fmt.Sprint("k", i))
	}
	bs := mustBits(t, db, "s")
	w, err := db.Watch(ctx, &WatchOptions{From: 1, Buffer: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var want []string
	for op, names := range []int{recMaxNames - 1, recMaxNames, recMaxNames + 1} {
		// names-1 keyspaces and the bitslice.
		bt := db.NewBatch()
		// Names come back after others (found by search, not added
		// again), and the bitslice is one name more.
		bt.Put(ks[0], []byte("first"), []byte(fmt.Sprint(op)))
		for i := 1; i < names-1; i++ {
			if i == names/2 {
				bt.Set(bs, uint64(op), true)
				bt.Delete(ks[0], []byte("again"))
			}
			bt.Put(ks[i], []byte(fmt.Sprint("key", i)), []byte(fmt.Sprint("v", op)))
		}
		bt.Put(ks[1], []byte("last"), []byte("x"))
		rb := newRecBatch(new(recArena), bt, nil)
		if (rb == nil) != (names > recMaxNames) || rb != nil && len(rb.names) != names {
			t.Fatalf("%d names: record %v", names, rb != nil)
		}
		want = append(want, applyReviewed(t, db, bt, uint64(op+1))...)
	}
	var got []string
	for {
		e := nextEvent(t, w)
		if e.Kind == EventResolved {
			if e.Op >= 3 {
				break
			}
			continue
		}
		got = append(got, evText(e))
	}
	checkSame(t, "many names", got, want)
}

// TestWatchBatchDropRace: batches alternating runs of a keyspace being
// dropped and of one that is not, applied while DropKV runs: Apply may
// discard any of the dropped keyspace's runs (start, middle, end, or all
// of them but the other's). Every event delivered is a change the batch
// made, with its own key and value (the kept changes' bytes moved down
// over the discarded ones), the other keyspace's changes all arrive, in
// order, and the dropped keyspace's that arrive are a prefix of its
// changes in the batch (its runs after a discarded one are discarded).
func TestWatchBatchDropRace(t *testing.T) {
	for _, limit := range []int{maxRecData, 0} {
		t.Run(fmt.Sprint("limit=", limit), func(t *testing.T) {
			old := maxRecData
			maxRecData = limit
			defer func() { maxRecData = old }()
			db := openT(t, t.TempDir(), &Options{FlushInterval: -1})
			defer closeT(t, db)
			ctx := context.Background()
			y := mustKV(t, db, "y")
			w, err := db.Watch(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			const rounds, runs, run = 16, 16, 40
			type applied struct {
				name string
				ok   bool
			}
			var done []applied
			var partial int
			for r := range rounds {
				name := fmt.Sprint("x", r)
				x := mustKV(t, db, name)
				var wg sync.WaitGroup
				wg.Add(1)
				started := make(chan struct{})
				go func() {
					defer wg.Done()
					<-started // after a batch, so that the drop lands in one
					for range r * 50 {
						runtime.Gosched()
					}
					if err := db.DropKV(ctx, name, 0); err != nil {
						t.Error(err)
					}
				}()
				for b := 0; ; b++ {
					bt := db.NewBatch()
					for i := range runs {
						k := x
						if i%2 == 1 {
							k = y
						}
						for j := range run {
							key := fmt.Sprintf("%s/%d/%d/%d", k.name, r, b, i*run+j)
							bt.Put(k, []byte(key), []byte("v"+key))
						}
					}
					err := db.Apply(ctx, bt, 0)
					if errors.Is(err, ErrDropped) {
						break
					} else if err != nil {
						t.Fatal(err)
					}
					done = append(done, applied{name: fmt.Sprintf("%d/%d", r, b), ok: true})
					if b == 0 {
						close(started)
					}
				}
				wg.Wait()
			}
			mustPut(t, y, "end", "end", 1)
			if err := db.EndOp(ctx, 1); err != nil {
				t.Fatal(err)
			}
			// Per batch: the x changes delivered, the y changes delivered.
			type seen struct{ x, y []int }
			by := map[string]*seen{}
			for {
				e := nextEvent(t, w)
				if e.Kind == EventResolved {
					if e.Op >= 1 {
						break
					}
					continue
				}
				if e.Kind != EventPut || string(e.Key) == "end" {
					continue
				}
				if string(e.Value) != "v"+string(e.Key) {
					t.Fatalf("event %q = %q", e.Key, e.Value)
				}
				var ks string
				var r, b, c int
				if _, err := fmt.Sscanf(strings.Replace(string(e.Key), "/", " ", 1), "%s %d/%d/%d", &ks, &r, &b, &c); err != nil {
					t.Fatalf("key %q: %v", e.Key, err)
				}
				if ks != e.Keyspace {
					t.Fatalf("key %q in keyspace %q", e.Key, e.Keyspace)
				}
				id := fmt.Sprintf("%d/%d", r, b)
				s := by[id]
				if s == nil {
					s = &seen{}
					by[id] = s
				}
				if ks == "y" {
					s.y = append(s.y, c)
				} else {
					s.x = append(s.x, c)
				}
			}
			for _, a := range done {
				s := by[a.name]
				if s == nil || len(s.y) != runs/2*run {
					t.Fatalf("batch %s: y changes %v", a.name, s)
				}
				for i, c := range s.y {
					if want := (2*(i/run)+1)*run + i%run; c != want {
						t.Fatalf("batch %s: y change %d is %d, want %d", a.name, i, c, want)
					}
				}
				for i, c := range s.x {
					if want := 2*(i/run)*run + i%run; c != want {
						t.Fatalf("batch %s: x change %d is %d, want %d (not a prefix)", a.name, i, c, want)
					}
				}
				if len(s.x) < runs/2*run {
					partial++
				}
			}
			t.Logf("%d batches applied, %d with x changes discarded", len(done), partial)
		})
	}
}
