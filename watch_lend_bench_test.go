package kvbuf

import (
	"context"
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
			*sum += w8Sum(v.Key(i)) + w8Sum(v.Value(i))
		}
	}
}

// BenchmarkWatchReadSum is BenchmarkWatchRead's subscriber doing W8's
// work on each change (w8Sum of its key and value), reading with
// Watch.NextMany (256 events a call: "many") or Watch.NextEvents
// ("events"): what the lent events save a subscriber that reads the key
// and value, in time and CPU per event.
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
	if sum == 1 {
		b.Log(sum) // keeps the sums
	}
}
