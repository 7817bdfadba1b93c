package kvbuf

import (
	"context"
	"slices"
	"testing"
)

func init() { w8Lend = w8ReadLent }

// w8ReadLent is W8's subscriber reading with Watch.NextEvents (w8Lend):
// every put's key and value summed, every mark handed to mark.
func w8ReadLent(ctx context.Context, w *Watch, sum *uint64, mark func(op uint64) bool) error {
	for {
		v, err := w.NextEvents(ctx)
		if err != nil {
			return err
		}
		for i := range v.Len() {
			if v.Kind(i) == EventResolved {
				if mark(v.Op(i)) {
					return nil
				}
				continue
			}
			*sum += w8Work(v.Key(i), v.Value(i))
		}
	}
}

// BenchmarkWatchReadSum is BenchmarkWatchRead's subscriber doing W8's
// work on each change (w8Sum of its key and value), reading with
// Watch.NextMany (256 events a call: "many") or Watch.NextEvents
// ("events"), or reading events built beforehand ("staged"): what the
// lent events save a subscriber that reads the key and value, in time
// and CPU per event, and what building them ahead would at best.
//
//	go test -run '^$' -bench BenchmarkWatchReadSum -benchtime 400x .
func BenchmarkWatchReadSum(b *testing.B) {
	var sum uint64
	b.Run("many", func(b *testing.B) {
		db, ctx := watchReadDB(b)
		evs := make([]WatchEvent, 0, 256)
		watchRead(b, db, func(w *Watch) int {
			n := 0
			for {
				var err error
				if evs, err = w.NextMany(ctx, evs[:0]); err != nil {
					b.Fatal(err)
				}
				for i := range evs {
					n++
					if e := &evs[i]; watchReadLast(e) {
						return n
					} else if e.Kind != EventResolved {
						sum += w8Sum(e.Key) + w8Sum(e.Value)
					}
				}
			}
		})
	})
	b.Run("events", func(b *testing.B) {
		db, ctx := watchReadDB(b)
		watchRead(b, db, func(w *Watch) int {
			n := 0
			for {
				v, err := w.NextEvents(ctx)
				if err != nil {
					b.Fatal(err)
				}
				for i := range v.Len() {
					n++
					if k := v.Kind(i); k == EventResolved {
						if v.Op(i) >= watchReadOps {
							return n
						}
					} else {
						sum += w8Sum(v.Key(i)) + w8Sum(v.Value(i))
					}
				}
			}
		})
	})
	b.Run("staged", func(b *testing.B) {
		// No reader of the feed: design (a) of the watch26 round at
		// best, the events built beforehand (a durable watch building
		// them while the generation flushes) and lent as they are, the
		// subscriber reading each one's kind, key and value out of the
		// generation-sized buffer.
		db, ctx := watchReadDB(b)
		var all []WatchEvent
		w, err := db.Watch(ctx, &WatchOptions{From: 1, Durable: true})
		if err != nil {
			b.Fatal(err)
		}
		for {
			var err error
			n := len(all)
			if all, err = w.NextMany(ctx, slices.Grow(all, 256)); err != nil {
				b.Fatal(err)
			}
			if watchReadLast(&all[len(all)-1]) && len(all) > n {
				break
			}
		}
		w.Close()
		watchRead(b, db, func(*Watch) int {
			for i := range all {
				if e := &all[i]; watchReadLast(e) {
					return i + 1
				} else if e.Kind != EventResolved {
					sum += w8Sum(e.Key) + w8Sum(e.Value)
				}
			}
			return len(all)
		})
	})
	if sum == 1 {
		b.Log(sum) // keeps the sums
	}
}
