package flush

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"

	"github.com/kvbuf/kvbuf/internal/workload"
)

// syncTarget is a memTarget whose Apply appends to a real file and
// fdatasyncs it, so a physical flush costs what a sync costs here.
func syncTarget(b *testing.B) *memTarget {
	tg := newMemTarget("sync")
	fh, err := os.Create(filepath.Join(b.TempDir(), "w4.log"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fh.Close() })
	tg.file = fh
	return tg
}

func w4key(g, i int) string {
	return strconv.Itoa(g) + "-" + strconv.Itoa(i)
}

// physicalFlush is the uncoalesced freeze/apply/release of one target.
func physicalFlush(tg *memTarget) error {
	tg.Freeze()
	if err := tg.Apply(context.Background(), 0); err != nil {
		return err
	}
	tg.Release()
	return nil
}

// BenchmarkW4 is W4 (flush coalescing). One op is one round: G goroutines
// each doing w4PerG {write one key, Flush}.
func BenchmarkW4(b *testing.B) {
	const w4PerG = 32
	for _, G := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("flush-g%d", G), func(b *testing.B) {
			impls := []struct {
				name    string
				checked bool
				setup   func(b *testing.B, tg *memTarget) (write func(g, i int) error, flush func(context.Context) error)
			}{
				{"kvbuf", true, func(b *testing.B, tg *memTarget) (func(int, int) error, func(context.Context) error) {
					f := New([]Target{tg}, &Options{Interval: -1, MaxPendingBytes: -1})
					b.Cleanup(func() { f.Close() })
					return func(g, i int) error {
						w, err := f.BeginWrite(context.Background())
						if err != nil {
							return err
						}
						tg.Put(w4key(g, i), 0)
						w.End()
						return nil
					}, f.Flush
				}},
				{"per-caller-sync", true, func(b *testing.B, tg *memTarget) (func(int, int) error, func(context.Context) error) {
					var mu sync.Mutex
					return func(g, i int) error {
							tg.Put(w4key(g, i), 0)
							return nil
						}, func(context.Context) error {
							mu.Lock()
							defer mu.Unlock()
							return physicalFlush(tg)
						}
				}},
				{"x/sync-singleflight", true, func(b *testing.B, tg *memTarget) (func(int, int) error, func(context.Context) error) {
					var sf singleflight.Group
					return func(g, i int) error {
							tg.Put(w4key(g, i), 0)
							return nil
						}, func(context.Context) error {
							_, err, _ := sf.Do("flush", func() (any, error) { return nil, physicalFlush(tg) })
							return err
						}
				}},
			}
			for _, impl := range impls {
				b.Run(impl.name, func(b *testing.B) {
					tg := syncTarget(b)
					write, flush := impl.setup(b, tg)
					loop := workload.FlushLoop{
						Goroutines: G, PerGoroutine: w4PerG,
						Write: write, Flush: flush,
						Durable: func(g, i int) bool { return tg.isDurable(w4key(g, i)) },
					}
					var total workload.Result
					b.ReportAllocs()
					for b.Loop() {
						r, err := loop.Run(context.Background())
						if err != nil {
							b.Fatal(err)
						}
						total.Add(r)
					}
					total.Report(b.ReportMetric, impl.checked)
					if total.Flushes > 0 {
						b.ReportMetric(float64(tg.syncs.Load())/float64(total.Flushes), "syncs/flush")
					}
				})
			}
		})
	}
}

// BenchmarkW5 is W5 (drain / wait group) plus op-gate, the cost every read
// pays. Run op-gate with -cpu 1,2: it uses RunParallel, so the goroutine
// count is GOMAXPROCS.
func BenchmarkW5(b *testing.B) {
	b.Run("complete-waiter", func(b *testing.B) {
		b.Run("kvbuf", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var g Gate
				tok, _ := g.Enter()
				go g.Leave(tok)
				g.Close()
			}
		})
		b.Run("sync.WaitGroup+chan", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var wg sync.WaitGroup
				done := make(chan struct{})
				wg.Add(1)
				go wg.Done()
				wg.Wait()
				close(done)
				<-done
			}
		})
		b.Run("rwmutex-gate", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var mu sync.RWMutex
				mu.RLock()
				go mu.RUnlock()
				mu.Lock()
			}
		})
		b.Run("errgroup", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var eg errgroup.Group
				eg.Go(func() error { return nil })
				eg.Wait()
			}
		})
	})

	workers := func(name string, nested bool) {
		b.Run(name, func(b *testing.B) {
			b.Run("kvbuf", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					var g Gate
					for range 4 {
						tok, _ := g.Enter()
						go func() {
							if nested {
								t2, _ := g.Enter()
								go g.Leave(t2)
							}
							g.Leave(tok)
						}()
					}
					g.Close()
				}
			})
			b.Run("sync.WaitGroup+chan", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					var wg sync.WaitGroup
					done := make(chan struct{})
					for range 4 {
						wg.Add(1)
						go func() {
							if nested {
								wg.Add(1)
								go wg.Done()
							}
							wg.Done()
						}()
					}
					wg.Wait()
					close(done)
					<-done
				}
			})
			b.Run("rwmutex-gate", func(b *testing.B) {
				if nested {
					// A nested RLock blocks once Lock is waiting, and the
					// outer RUnlock never comes: RWMutex cannot be a
					// nesting gate.
					b.Skip("sync.RWMutex deadlocks on nested read locks")
				}
				b.ReportAllocs()
				for b.Loop() {
					var mu sync.RWMutex
					for range 4 {
						mu.RLock()
						go mu.RUnlock()
					}
					mu.Lock()
				}
			})
			b.Run("errgroup", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					var eg errgroup.Group
					for range 4 {
						eg.Go(func() error {
							if nested {
								eg.Go(func() error { return nil })
							}
							return nil
						})
					}
					eg.Wait()
				}
			})
		})
	}
	workers("complete-4-workers", false)
	workers("nested-4-workers", true)

	b.Run("wait-after-work", func(b *testing.B) {
		b.Run("kvbuf", func(b *testing.B) {
			b.ReportAllocs()
			var toks [4]Token
			for b.Loop() {
				var g Gate
				for i := range toks {
					toks[i], _ = g.Enter()
				}
				for _, t := range toks {
					g.Leave(t)
				}
				g.Close()
			}
		})
		b.Run("sync.WaitGroup+chan", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var wg sync.WaitGroup
				done := make(chan struct{})
				wg.Add(4)
				for range 4 {
					wg.Done()
				}
				wg.Wait()
				close(done)
				<-done
			}
		})
		b.Run("rwmutex-gate", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var mu sync.RWMutex
				for range 4 {
					mu.RLock()
				}
				for range 4 {
					mu.RUnlock()
				}
				mu.Lock()
			}
		})
		b.Run("errgroup", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var eg errgroup.Group
				var done sync.WaitGroup
				done.Add(4)
				for range 4 {
					eg.Go(func() error { done.Done(); return nil })
				}
				done.Wait()
				eg.Wait()
			}
		})
	})

	b.Run("drain-4-observers", func(b *testing.B) {
		b.Run("kvbuf", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var g Gate
				var obs sync.WaitGroup
				tok, _ := g.Enter()
				for range 4 {
					obs.Go(func() { <-g.Done() })
				}
				go g.Leave(tok)
				g.Shut()
				obs.Wait()
			}
		})
		b.Run("sync.WaitGroup+chan", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var wg sync.WaitGroup
				var obs sync.WaitGroup
				done := make(chan struct{})
				wg.Add(1)
				for range 4 {
					obs.Go(func() { <-done })
				}
				go wg.Done()
				wg.Wait()
				close(done)
				obs.Wait()
			}
		})
		b.Run("rwmutex-gate", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var mu sync.RWMutex
				var obs sync.WaitGroup
				done := make(chan struct{})
				mu.RLock()
				for range 4 {
					obs.Go(func() { <-done })
				}
				go mu.RUnlock()
				mu.Lock()
				close(done)
				obs.Wait()
			}
		})
		b.Run("errgroup", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var eg errgroup.Group
				var obs sync.WaitGroup
				done := make(chan struct{})
				eg.Go(func() error { return nil })
				for range 4 {
					obs.Go(func() { <-done })
				}
				eg.Wait()
				close(done)
				obs.Wait()
			}
		})
	})

	b.Run("op-gate", func(b *testing.B) {
		b.Run("raw", func(b *testing.B) { // the floor: one shared atomic add/sub pair
			var n atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					n.Add(1)
					n.Add(-1)
				}
			})
		})
		b.Run("kvbuf", func(b *testing.B) {
			var g Gate
			g.Stripe() // as the Flusher's gate
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					tok, err := g.Enter()
					if err != nil {
						b.Error(err)
						return
					}
					g.Leave(tok)
				}
			})
		})
		b.Run("sync.WaitGroup+chan", func(b *testing.B) {
			var wg sync.WaitGroup
			var closed atomic.Bool
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if closed.Load() {
						return
					}
					wg.Add(1)
					wg.Done()
				}
			})
		})
		b.Run("rwmutex-gate", func(b *testing.B) {
			var mu sync.RWMutex
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					mu.RLock()
					mu.RUnlock()
				}
			})
		})
	})
}
