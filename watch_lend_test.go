package kvbuf

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math"
	"testing"
)

// TestWatchNextEvents checks that NextEvents lends what Next returns, in
// the same order, whatever the watch's Buffer and however the calls mix
// with Next's and NextMany's on the same watch: every kind of change
// (uniform batches of puts, one with empty values, batches mixing puts,
// deletes, range deletes and bit changes, single puts, writes of op 0),
// marks between them, a watch of everything (runs of records) and one of
// a prefix (the buffer), in both modes. Each event's Kind, Op, Key and
// Value equal its Event's fields; the slices are capped (an append cannot
// write into the feed's memory) and keep their bytes after later calls;
// WatchDelivered counts what was lent at every mark; every index out of
// [0, Len()) panics, for each form, and the zero value holds nothing.
func TestWatchNextEvents(t *testing.T) {
	const ops = 120
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1, WatchFromOpen: true})
	defer closeT(t, db)
	ctx := context.Background()
	k, k2 := mustKV(t, db, "k"), mustKV(t, db, "k2")
	s := mustBits(t, db, "s")
	bt := db.NewBatch()
	for op := uint64(1); op <= ops; op++ {
		key := func(i int) []byte { return fmt.Appendf(nil, "p%d/%03d-%02d", op%2, op, i) }
		bt.Reset()
		switch op % 6 {
		case 0: // a single put, its op ended
			if err := k.Put(ctx, key(0), key(0), op); err != nil {
				t.Fatal(err)
			}
			if err := db.EndOp(ctx, op); err != nil {
				t.Fatal(err)
			}
			continue
		case 1, 2: // a uniform batch (recBatch.uni); op 2's values empty
			for i := range int(op%7) + 2 {
				bt.Put(k, key(i), bytes.Repeat([]byte{byte(op)}, int(op%2)*3))
			}
		case 3: // a write of op 0 besides the op's batch
			if err := k2.Put(ctx, key(9), []byte("zero"), 0); err != nil {
				t.Fatal(err)
			}
			fallthrough
		default:
			fillMixedBatch(bt, k, k2, s, op, key)
		}
		if err := db.Apply(ctx, bt, op); err != nil {
			t.Fatal(err)
		}
		if op%17 == 0 { // marks between the ops
			if err := db.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// read returns every event of a watch from op 1 up to the mark of the
	// last op: with Next alone (mix 0), or with NextEvents, every mix-th
	// call a Next and every other mix-th a NextMany of 2 instead.
	read := func(t *testing.T, o WatchOptions, mix int) []string {
		w := watchFrom1(t, db, o)
		defer w.Close()
		var got []string
		var keys, vals [][]byte // the lent slices, checked at the end
		var want []string       // their bytes when lent
		base := db.Metrics().WatchDelivered
		forms := map[string]bool{}
		for call := 1; ; call++ {
			var batch []WatchEvent
			switch {
			case mix == 0 || call%mix == 0:
				e, err := w.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				batch = []WatchEvent{e}
			case call%mix == mix/2:
				var err error
				if batch, err = w.NextMany(ctx, make([]WatchEvent, 0, 2)); err != nil {
					t.Fatal(err)
				}
			default:
				v, err := w.NextEvents(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if v.Len() < 1 || v.Len() > cmp.Or(o.Buffer, DefaultWatchBuffer) {
					t.Fatalf("NextEvents lent %d events", v.Len())
				}
				forms[lentForm(&v)] = true
				checkLentBounds(t, &v)
				for i := range v.Len() {
					e := v.Event(i)
					if v.Kind(i) != e.Kind || v.Op(i) != e.Op || !bytes.Equal(v.Key(i), e.Key) || !bytes.Equal(v.Value(i), e.Value) ||
						(v.Key(i) == nil) != (e.Key == nil) || (v.Value(i) == nil) != (e.Value == nil) {
						t.Fatalf("event %d of %d: Kind %v Op %d Key %q Value %q, Event %+v", i, v.Len(), v.Kind(i), v.Op(i), v.Key(i), v.Value(i), e)
					}
					for _, p := range [][]byte{v.Key(i), v.Value(i), e.Key, e.Value} {
						// (A range delete clipped to a prefix has the
						// prefix as a bound: the watch's own memory.)
						if e.Kind != EventDeleteRange && len(p) != cap(p) {
							t.Fatalf("event %+v: a slice of %d bytes with room for %d", e, len(p), cap(p))
						}
					}
					keys, vals = append(keys, v.Key(i)), append(vals, v.Value(i))
					want = append(want, fmt.Sprintf("%q %q", e.Key, e.Value))
					batch = append(batch, e)
				}
			}
			for i, e := range batch {
				got = append(got, fmt.Sprintf("%+v", e))
				if e.Kind != EventResolved {
					continue
				}
				if i == len(batch)-1 {
					if d := db.Metrics().WatchDelivered - base; d != uint64(len(got)) {
						t.Fatalf("mix %d: at mark %d: WatchDelivered %d, want %d", mix, e.Op, d, len(got))
					}
				}
				if e.Op >= ops {
					if i != len(batch)-1 {
						t.Fatalf("mix %d: events after the last mark", mix)
					}
					for x := range keys {
						if g := fmt.Sprintf("%q %q", keys[x], vals[x]); g != want[x] {
							t.Fatalf("lent event %d's key and value became %s, were %s", x, g, want[x])
						}
					}
					if mix != 0 && o.Keyspaces == nil && (!forms["uni"] || !forms["run"] || !forms["buf"]) {
						t.Fatalf("mix %d: lent forms %v, want every one", mix, forms)
					}
					return got
				}
			}
		}
	}
	for _, durable := range []bool{false, true} {
		for _, sel := range []string{"all", "prefix"} {
			t.Run(fmt.Sprintf("durable=%v/%s", durable, sel), func(t *testing.T) {
				o := WatchOptions{Durable: durable}
				if sel == "prefix" {
					o.Keyspaces = []WatchKeyspace{{Name: "k", Prefix: []byte("p1/")}, {Name: "k2"}}
				}
				want := read(t, o, 0)
				for _, c := range []struct{ buffer, mix int }{{0, 1 << 30}, {1, 1 << 30}, {3, 1 << 30}, {64, 5}, {0, 4}, {5, 7}} {
					o.Buffer = c.buffer
					got := read(t, o, c.mix)
					if len(got) != len(want) {
						t.Fatalf("buffer %d mix %d: %d events, want %d", c.buffer, c.mix, len(got), len(want))
					}
					for i := range want {
						if got[i] != want[i] {
							t.Fatalf("buffer %d mix %d: event %d is %s, want %s", c.buffer, c.mix, i, got[i], want[i])
						}
					}
				}
			})
		}
	}
	var zero WatchEvents
	if zero.Len() != 0 {
		t.Fatalf("the zero WatchEvents holds %d events", zero.Len())
	}
	checkLentBounds(t, &zero)
}

// lentForm says which of its forms v is: a uniform record's run ("uni"),
// another record's run ("run"), or events the watch built ("buf").
func lentForm(v *WatchEvents) string {
	switch {
	case v.rb == nil:
		return "buf"
	case v.uni != nil:
		return "uni"
	}
	return "run"
}

// checkLentBounds checks that every method of v taking an index panics
// for -1, Len() and Len()+1, and for indexes whose product with a uniform
// run's width overflows back into range (1<<61 and -(1<<61)+2 times 8).
func checkLentBounds(t *testing.T, v *WatchEvents) {
	t.Helper()
	for _, i := range []int{-1, v.Len(), v.Len() + 1, 1 << 61, 1<<61 + 1, -(1 << 61) + 2, math.MinInt, math.MaxInt} {
		for name, f := range map[string]func(int){
			"Event": func(i int) { v.Event(i) },
			"Kind":  func(i int) { v.Kind(i) },
			"Op":    func(i int) { v.Op(i) },
			"Key":   func(i int) { v.Key(i) },
			"Value": func(i int) { v.Value(i) },
		} {
			func() {
				defer func() {
					if recover() == nil {
						t.Fatalf("%s(%d) of a %s of %d events did not panic", name, i, lentForm(v), v.Len())
					}
				}()
				f(i)
			}()
		}
	}
}

// TestWatchNextEventsEnds checks that NextEvents ends as Next does and
// lends nothing then: ctx's error when ctx ended with nothing ready (the
// watch goes on), ErrClosed after Close, every later call the same.
func TestWatchNextEventsEnds(t *testing.T) {
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1})
	defer closeT(t, db)
	ctx := context.Background()
	k := mustKV(t, db, "k")
	w, err := db.Watch(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if v, err := w.NextEvents(done); err != context.Canceled || v.Len() != 0 {
		t.Fatalf("NextEvents with ctx ended: %d events, %v", v.Len(), err)
	}
	if err := k.Put(ctx, []byte("a"), []byte("1"), 1); err != nil {
		t.Fatal(err)
	}
	if err := db.EndOp(ctx, 1); err != nil {
		t.Fatal(err)
	}
	v, err := w.NextEvents(ctx) // the watch went on
	if err != nil || v.Len() == 0 || v.Kind(0) != EventPut || string(v.Key(0)) != "a" || string(v.Value(0)) != "1" || v.Op(0) != 1 {
		t.Fatalf("NextEvents after ctx's end: %d events, %v", v.Len(), err)
	}
	w.Close()
	for range 2 {
		if v, err := w.NextEvents(ctx); err != ErrClosed || v.Len() != 0 {
			t.Fatalf("NextEvents after Close: %d events, %v", v.Len(), err)
		}
	}
}
