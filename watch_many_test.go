package kvbuf

import (
	"context"
	"fmt"
	"testing"
)

// fillMixedBatch adds to bt op's mixed changes, op%7+1 of them, cycling
// through puts to k, deletes in k2, range deletes with an open lower bound
// in k, single bit sets and bit ranges in s (key(i) is change i's key):
// the batches of TestWatchNextMany and TestWatchNextEvents that are not
// uniform.
func fillMixedBatch(bt *Batch, k, k2 *KV, s *Bits, op uint64, key func(int) []byte) {
	for i := range int(op%7) + 1 {
		switch (int(op) + i) % 6 {
		case 0, 1:
			bt.Put(k, key(i), []byte{byte(op), byte(i)})
		case 2:
			bt.Delete(k2, key(i))
		case 3:
			bt.DeleteRange(k, nil, key(i))
		case 4:
			bt.Set(s, op*8+uint64(i), i%2 == 0)
		case 5:
			bt.SetRange(s, op, op+uint64(i)+1, true)
		}
	}
}

// TestWatchNextMany checks that NextMany returns what Next returns, in the
// same order, whatever its dst's capacity and the watch's Buffer: every
// kind of change (batches mixing puts, deletes, range deletes with open
// bounds, bit changes, two keyspaces; single puts; writes of op 0), marks
// between them, a watch of everything (runs) and one of a prefix (the
// buffer), in both modes; that slots of dst holding earlier events of
// other kinds are wholly rebuilt; that it never returns more than dst's
// room (one at least); and that WatchDelivered counts what it returned at
// every mark.
func TestWatchNextMany(t *testing.T) {
	const ops = 120
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1, WatchFromOpen: true})
	defer closeT(t, db)
	ctx := context.Background()
	k, k2 := mustKV(t, db, "k"), mustKV(t, db, "k2")
	s := mustBits(t, db, "s")
	bt := db.NewBatch()
	for op := uint64(1); op <= ops; op++ {
		key := func(i int) []byte { return fmt.Appendf(nil, "p%d/%03d-%02d", op%2, op, i) }
		switch op % 5 {
		case 0: // a single put, its op ended
			if err := k.Put(ctx, key(0), key(0), op); err != nil {
				t.Fatal(err)
			}
			if err := db.EndOp(ctx, op); err != nil {
				t.Fatal(err)
			}
		case 3: // a write of op 0 besides the op's batch
			if err := k2.Put(ctx, key(9), []byte("zero"), 0); err != nil {
				t.Fatal(err)
			}
			fallthrough
		default:
			bt.Reset()
			fillMixedBatch(bt, k, k2, s, op, key)
			if err := db.Apply(ctx, bt, op); err != nil {
				t.Fatal(err)
			}
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
	prefix := []WatchKeyspace{{Name: "k", Prefix: []byte("p1/")}, {Name: "k2"}}
	// read returns every event of a watch from op 1 up to the mark of the
	// last op, read with Next (room 0) or NextMany into a dst of that room.
	read := func(t *testing.T, o WatchOptions, room int) []string {
		w := watchFrom1(t, db, o)
		defer w.Close()
		var got []string
		base := db.Metrics().WatchDelivered
		garbage := WatchEvent{Kind: EventDeleteRange, Op: 999, Keyspace: "x", Key: []byte("g"), Value: []byte("g"), End: []byte("g"), Bitslice: "y", Lo: 1, Hi: 2, Bit: true, Watermark: 7}
		evs := make([]WatchEvent, 0, room)
		for {
			var batch []WatchEvent
			if room == 0 {
				e, err := w.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				batch = []WatchEvent{e}
			} else {
				full := evs[:cap(evs)]
				for i := range full {
					full[i] = garbage
				}
				var err error
				if batch, err = w.NextMany(ctx, evs[:0]); err != nil {
					t.Fatal(err)
				}
				if len(batch) == 0 || len(batch) > max(room, 1) {
					t.Fatalf("room %d: NextMany returned %d events", room, len(batch))
				}
			}
			for i, e := range batch {
				got = append(got, fmt.Sprintf("%+v", e))
				if e.Kind != EventResolved {
					continue
				}
				if i == len(batch)-1 {
					if d := db.Metrics().WatchDelivered - base; d != uint64(len(got)) {
						t.Fatalf("room %d: at mark %d: WatchDelivered %d, want %d", room, e.Op, d, len(got))
					}
				}
				if e.Op >= ops {
					if i != len(batch)-1 {
						t.Fatalf("room %d: events after the last mark", room)
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
					o.Keyspaces = prefix
				}
				want := read(t, o, 0)
				for _, c := range []struct{ buffer, room int }{{1, 1}, {3, 5}, {64, 0}, {0, 7}, {0, 256}, {5, 4096}} {
					o.Buffer = c.buffer
					var got []string
					if c.room == 0 { // a dst with no room: one event a call
						got = readNoRoom(t, db, o, ops)
					} else {
						got = read(t, o, c.room)
					}
					if len(got) != len(want) {
						t.Fatalf("buffer %d room %d: %d events, want %d", c.buffer, c.room, len(got), len(want))
					}
					for i := range want {
						if got[i] != want[i] {
							t.Fatalf("buffer %d room %d: event %d is %s, want %s", c.buffer, c.room, i, got[i], want[i])
						}
					}
				}
			})
		}
	}
}

// readNoRoom reads a watch from op 1 with NextMany into a dst with no room
// (nil, or full): one event a call, up to the mark of op last.
func readNoRoom(t *testing.T, db *DB, o WatchOptions, last uint64) []string {
	ctx := context.Background()
	w := watchFrom1(t, db, o)
	defer w.Close()
	var got []string
	kept := WatchEvent{Kind: EventPut, Op: 77, Key: []byte("kept")}
	for i := 0; ; i++ {
		// Alternately nil and a full slice (whose append may grow
		// room that NextMany must not use).
		var dst []WatchEvent
		if i%2 == 1 {
			dst = []WatchEvent{kept, kept}
		}
		evs, err := w.NextMany(ctx, dst)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != len(dst)+1 {
			t.Fatalf("NextMany into %d events with no room returned %d", len(dst), len(evs)-len(dst))
		}
		for _, e := range evs[:len(dst)] {
			if fmt.Sprint(e) != fmt.Sprint(kept) {
				t.Fatalf("NextMany changed dst's events: %+v", e)
			}
		}
		e := evs[len(dst)]
		got = append(got, fmt.Sprintf("%+v", e))
		if e.Kind == EventResolved && e.Op >= last {
			return got
		}
	}
}

// watchFrom1 opens a watch of o from op 1; the caller closes it.
func watchFrom1(t *testing.T, db *DB, o WatchOptions) *Watch {
	t.Helper()
	o.From = 1
	w, err := db.Watch(context.Background(), &o)
	if err != nil {
		t.Fatal(err)
	}
	return w
}
