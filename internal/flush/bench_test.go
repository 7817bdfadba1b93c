package flush

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/kvbuf/kvbuf/internal/workload"
)

// benchSync, from $FLUSH_BENCH_SYNC (a duration such as 200us), replaces the
// fileTarget's write and fdatasync by a nanosleep of that length: a device
// with a fixed sync time, for comparisons on a machine whose disk (or whose
// neighbours' disk use) makes fdatasync times drift. The syncer still
// blocks in a system call, as it does in fdatasync.
var benchSync = func() time.Duration {
	d, _ := time.ParseDuration(os.Getenv("FLUSH_BENCH_SYNC"))
	return d
}()

// fileTarget is a Target over a real file, shaped like the engine's pebble
// WAL: Write enqueues the generation's records in a log buffer and returns
// at once; one syncer goroutine writes everything enqueued so far to the
// file and fdatasyncs it (so writes enqueued during a sync share the next
// one); wait waits for the sync that covered the write. Each write of the
// benchmark is a slot (g*per+i); a slot is durable once the generation that
// froze it is released.
type fileTarget struct {
	fh *os.File

	mu      sync.Mutex
	cond    sync.Cond // syncer and waiters
	pending []uint32  // slots written since the last freeze
	buf     []byte    // enqueued, not yet written to the file
	spare   []byte
	enq     uint64 // records enqueued
	synced  uint64 // records durable
	err     error
	closed  bool
	done    chan struct{}

	gens     []atomic.Uint64 // slot -> generation that froze it
	released atomic.Uint64
	syncs    atomic.Int64
	bytes    atomic.Int64
}

func newFileTarget(b *testing.B, slots int) *fileTarget {
	fh, err := os.Create(filepath.Join(b.TempDir(), "w4.log"))
	if err != nil {
		b.Fatal(err)
	}
	ft := &fileTarget{fh: fh, gens: make([]atomic.Uint64, slots), done: make(chan struct{})}
	ft.cond.L = &ft.mu
	go ft.syncer()
	b.Cleanup(func() {
		ft.mu.Lock()
		ft.closed = true
		ft.cond.Broadcast()
		ft.mu.Unlock()
		<-ft.done
		fh.Close()
	})
	return ft
}

func (ft *fileTarget) syncer() {
	defer close(ft.done)
	ft.mu.Lock()
	defer ft.mu.Unlock()
	for {
		for len(ft.buf) == 0 && !ft.closed {
			ft.cond.Wait()
		}
		if len(ft.buf) == 0 {
			return
		}
		data, upto := ft.buf, ft.enq
		ft.buf, ft.spare = ft.spare[:0], nil
		ft.mu.Unlock()
		var err error
		if benchSync > 0 {
			ts := syscall.NsecToTimespec(int64(benchSync))
			for {
				var rem syscall.Timespec
				if err = syscall.Nanosleep(&ts, &rem); err != syscall.EINTR {
					break
				}
				ts = rem // interrupted (Go's preemption signal): sleep the rest
			}
		} else if _, err = ft.fh.Write(data); err == nil {
			err = syscall.Fdatasync(int(ft.fh.Fd()))
		}
		ft.syncs.Add(1)
		ft.mu.Lock()
		ft.spare = data
		if err != nil && ft.err == nil {
			ft.err = err
		}
		ft.synced = upto
		ft.cond.Broadcast()
	}
}

// reset forgets the durability of every slot (a new round reuses them).
func (ft *fileTarget) reset() {
	for i := range ft.gens {
		ft.gens[i].Store(0)
	}
}

func (ft *fileTarget) put(slot uint32) {
	ft.mu.Lock()
	ft.pending = append(ft.pending, slot)
	ft.mu.Unlock()
	ft.bytes.Add(64)
}

func (ft *fileTarget) durable(slot uint32) bool {
	g := ft.gens[slot].Load()
	return g != 0 && g <= ft.released.Load()
}

func (ft *fileTarget) Freeze(g uint64) Generation {
	ft.mu.Lock()
	slots := ft.pending
	ft.pending = nil
	ft.mu.Unlock()
	for _, s := range slots {
		ft.gens[s].Store(g)
	}
	return &fileGen{ft: ft, seq: g, slots: slots}
}

func (ft *fileTarget) PendingBytes() int64 { return ft.bytes.Load() }

type fileGen struct {
	ft    *fileTarget
	seq   uint64
	slots []uint32
}

func (fg *fileGen) Write(_ context.Context, wm uint64) (func() error, error) {
	ft := fg.ft
	ft.mu.Lock()
	for _, s := range fg.slots { // a 64-byte record per write, then the watermark
		var rec [64]byte
		binary.LittleEndian.PutUint32(rec[:], s)
		ft.buf = append(ft.buf, rec[:]...)
	}
	ft.buf = binary.LittleEndian.AppendUint64(ft.buf, wm)
	ft.enq++
	mine := ft.enq
	ft.cond.Broadcast()
	ft.mu.Unlock()
	return func() error {
		ft.mu.Lock()
		defer ft.mu.Unlock()
		for ft.synced < mine && ft.err == nil {
			ft.cond.Wait()
		}
		return ft.err
	}, nil
}

func (fg *fileGen) Release() {
	fg.ft.released.Store(fg.seq)
	fg.ft.bytes.Add(-64 * int64(len(fg.slots)))
}

// physicalFlush is one uncoalesced freeze, write, sync and release, for the
// baselines (which serialise it themselves).
func (ft *fileTarget) physicalFlush(seq *uint64) error {
	*seq++
	g := ft.Freeze(*seq)
	wait, err := g.Write(context.Background(), 0)
	if err == nil {
		err = wait()
	}
	if err == nil {
		g.Release()
	}
	return err
}

// w4Impl is one W4 implementation over a fileTarget.
type w4Impl struct {
	name  string
	setup func(b *testing.B, ft *fileTarget) (flush func(context.Context) error, write func(slot uint32) error)
}

// w4Flusher is the flusher with the given sibling wait.
func w4Flusher(gw time.Duration) func(b *testing.B, ft *fileTarget) (func(context.Context) error, func(uint32) error) {
	return w4FlusherMode(gw, false)
}

func w4FlusherMode(gw time.Duration, eagerMode bool) func(b *testing.B, ft *fileTarget) (func(context.Context) error, func(uint32) error) {
	return func(b *testing.B, ft *fileTarget) (func(context.Context) error, func(uint32) error) {
		f := mustNew(ft, &Options{Interval: -1, MaxPendingBytes: -1, GroupWait: gw})
		if eagerMode {
			eager(f)
		}
		b.Cleanup(func() { f.Close() })
		return f.Flush, func(slot uint32) error {
			w, err := f.BeginWrite(context.Background(), 0, false)
			if err != nil {
				return err
			}
			ft.put(slot)
			w.End()
			return nil
		}
	}
}

var w4Impls = []w4Impl{
	{"kvbuf", w4Flusher(0)},
	{"kvbuf-eager", func(b *testing.B, ft *fileTarget) (func(context.Context) error, func(uint32) error) {
		// The pipeline without the hold: callers' generations are written
		// while another caller's generation syncs.
		return w4FlusherMode(0, true)(b, ft)
	}},
	{"per-caller-sync", w4Discipline(workload.PerCallerSync)},
	{"singleflight", w4Discipline(workload.Singleflight)},
	{"careful-group-commit", w4Discipline(workload.GroupCommit)},
}

// w4Discipline is a baseline: the fileTarget's physical flush (freeze,
// write, sync, release) behind one of the W4 flush disciplines of
// internal/workload, the same ones the engine-level W4 (bench) races.
func w4Discipline(d func(func(context.Context) error) func(context.Context) error) func(*testing.B, *fileTarget) (func(context.Context) error, func(uint32) error) {
	return func(b *testing.B, ft *fileTarget) (func(context.Context) error, func(uint32) error) {
		var seq uint64 // the disciplines run one physical flush at a time
		return d(func(context.Context) error { return ft.physicalFlush(&seq) }),
			func(slot uint32) error { ft.put(slot); return nil }
	}
}

const w4PerG = 32

// runW4 runs W4 rounds of G goroutines, each doing w4PerG {write one key,
// Flush}, and reports writes/s, Flush latency percentiles, coverage
// violations (a Flush that returned nil before its caller's write was in a
// released generation) and physical syncs per Flush.
func runW4(b *testing.B, G int, im w4Impl) {
	ft := newFileTarget(b, G*w4PerG)
	flush, write := im.setup(b, ft)
	loop := workload.FlushLoop{
		Goroutines: G, PerGoroutine: w4PerG,
		Write:   func(_ context.Context, g, i int) (uint64, error) { return 0, write(uint32(g*w4PerG + i)) },
		Flush:   flush,
		Durable: func(g, i int, _ uint64) (bool, error) { return ft.durable(uint32(g*w4PerG + i)), nil },
	}
	var total workload.Result
	s0 := ft.syncs.Load()
	b.ReportAllocs()
	for b.Loop() {
		ft.reset()
		r, err := loop.Run(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		total.Add(r)
	}
	total.Report(b.ReportMetric, true)
	b.ReportMetric(float64(total.Percentile(0.999).Nanoseconds()), "p999-flush-ns")
	if total.Flushes > 0 {
		b.ReportMetric(float64(ft.syncs.Load()-s0)/float64(total.Flushes), "syncs/flush")
	}
}

// BenchmarkW4 is W4 (flush coalescing) at the flusher level: the Flusher (and
// kvbuf-eager, the Flusher without the hold) against the W4 baselines of
// internal/workload (a per-caller sync under a mutex, x/sync/singleflight,
// which lets a caller join a flush frozen before its write: violations, and
// the careful group commit that waits such a flush out), all over the same
// fileTarget, through the same loop as the engine-level W4 in bench.
func BenchmarkW4(b *testing.B) {
	for _, G := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("flush-g%d", G), func(b *testing.B) {
			for _, im := range w4Impls {
				b.Run(im.name, func(b *testing.B) { runW4(b, G, im) })
			}
		})
	}
}

// BenchmarkW4Interleaved is BenchmarkW4 with the implementations' rounds
// interleaved (one round of each per iteration), so that a noisy machine
// (a disk whose sync time drifts, another process taking a core) affects
// them alike. Each metric is reported per implementation ("kvbuf-w/s",
// "singleflight-p99-µs", ...).
func BenchmarkW4Interleaved(b *testing.B) {
	short := map[string]string{"kvbuf": "kvbuf", "kvbuf-eager": "eager", "per-caller-sync": "percaller", "singleflight": "singleflight", "careful-group-commit": "groupcommit"}
	for _, G := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("flush-g%d", G), func(b *testing.B) {
			type run struct {
				name  string
				ft    *fileTarget
				loop  workload.FlushLoop
				total workload.Result
				s0    int64
			}
			var runs []*run
			for _, im := range w4Impls {
				if G == 64 && im.name == "per-caller-sync" {
					continue // 64 serial syncs per round: too slow to interleave
				}
				ft := newFileTarget(b, G*w4PerG)
				flush, write := im.setup(b, ft)
				runs = append(runs, &run{name: short[im.name], ft: ft, s0: ft.syncs.Load(), loop: workload.FlushLoop{
					Goroutines: G, PerGoroutine: w4PerG,
					Write:   func(_ context.Context, g, i int) (uint64, error) { return 0, write(uint32(g*w4PerG + i)) },
					Flush:   flush,
					Durable: func(g, i int, _ uint64) (bool, error) { return ft.durable(uint32(g*w4PerG + i)), nil },
				}})
			}
			b.ReportAllocs()
			for b.Loop() {
				for _, r := range runs {
					r.ft.reset()
					res, err := r.loop.Run(context.Background())
					if err != nil {
						b.Fatal(err)
					}
					r.total.Add(res)
				}
			}
			for _, r := range runs {
				b.ReportMetric(r.total.WritesPerSec(), r.name+"-w/s")
				b.ReportMetric(float64(r.total.Percentile(0.5).Microseconds()), r.name+"-p50-µs")
				b.ReportMetric(float64(r.total.Percentile(0.99).Microseconds()), r.name+"-p99-µs")
				b.ReportMetric(float64(r.total.Violations), r.name+"-violations")
				b.ReportMetric(float64(r.ft.syncs.Load()-r.s0)/float64(max(r.total.Flushes, 1)), r.name+"-syncs/flush")
			}
		})
	}
}

// BenchmarkGroupWait measures the sibling wait (Options.GroupWait) that
// chose DefaultGroupWait: W4 through the Flusher for each wait.
func BenchmarkGroupWait(b *testing.B) {
	for _, G := range []int{1, 4, 16, 64} {
		for _, gw := range []time.Duration{-1, 10 * time.Microsecond, 25 * time.Microsecond,
			50 * time.Microsecond, 100 * time.Microsecond, 200 * time.Microsecond} {
			name := "off"
			if gw > 0 {
				name = gw.String()
			}
			b.Run(fmt.Sprintf("g%d/gw=%s", G, name), func(b *testing.B) {
				runW4(b, G, w4Impl{"kvbuf", w4Flusher(gw)})
			})
		}
	}
}

// BenchmarkW5 is W5 (drain / wait group) plus op-gate, admission costs (the
// bare gate, which Flush calls and tickets enter, and the Flusher's
// BeginWrite/End, what every write pays: its barrier and op tracking, no
// gate since invariant 13), and flush-idle, a Flush with nothing pending.
// Run op-gate with -cpu 1,2: it uses RunParallel, so the goroutine count is
// GOMAXPROCS.
func BenchmarkW5(b *testing.B) {
	b.Run("complete-waiter", func(b *testing.B) {
		b.Run("kvbuf", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var g drainGate
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

	benchW5Workers(b, "complete-4-workers", false)
	benchW5Workers(b, "nested-4-workers", true)

	b.Run("wait-after-work", func(b *testing.B) {
		b.Run("kvbuf", func(b *testing.B) {
			b.ReportAllocs()
			var toks [4]gateToken
			for b.Loop() {
				var g drainGate
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
				var g drainGate
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
			var g drainGate
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
		b.Run("flusher-write", func(b *testing.B) {
			f := mustNew(nopTarget{}, &Options{Interval: -1, MaxPendingBytes: -1})
			defer f.Close()
			var op atomic.Uint64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					w, err := f.BeginWrite(context.Background(), op.Add(1), true)
					if err != nil {
						b.Error(err)
						return
					}
					w.End()
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

	b.Run("flush-idle", func(b *testing.B) {
		f := mustNew(nopTarget{}, &Options{Interval: -1, MaxPendingBytes: -1})
		defer f.Close()
		b.ReportAllocs()
		for b.Loop() {
			if err := f.Flush(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchW5Workers is W5's rows where 4 workers (each starting a nested one
// if nested) enter a gate and the caller waits for them. It is a named
// function and not inlined: as a closure inlined into BenchmarkW5 its row
// closures were cloned there and compiled without inlining the calls in
// their bodies (Go 1.26), so the kvbuf rows called drainGate.Enter and
// Leave out of line (8 calls an iteration, 16 nested) and the WaitGroup
// rows Done (4, 8 nested) (sweep14).
//
//go:noinline
func benchW5Workers(b *testing.B, name string, nested bool) {
	b.Run(name, func(b *testing.B) {
		b.Run("kvbuf", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var g drainGate
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

// nopTarget is a Target whose generations cost nothing.
type nopTarget struct{}

func (nopTarget) Freeze(uint64) Generation { return nopGen{} }
func (nopTarget) PendingBytes() int64      { return 0 }

type nopGen struct{}

func (nopGen) Write(context.Context, uint64) (func() error, error) { return nil, nil }
func (nopGen) Release()                                            {}
