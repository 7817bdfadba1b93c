package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvbuf/kvbuf"
)

// W11 sizes at Scale 1 (doc/workloads.md).
const (
	w11Engines     = 1000      // engines under one budget (× Scale, at most 1000, at least 16)
	w11BytesPerEng = 256 << 10 // the budget per engine: 256 MiB for 1,000
	w11PutsPerEng  = 3000      // puts per engine per round: the round writes several budgets' worth
	w11ValueLen    = 100
	// w11WritersPerProc is the writers per GOMAXPROCS: a fixed pool, each
	// put to an engine chosen at random, not a goroutine per engine.
	w11WritersPerProc = 8
)

// w11Row is one W11 row: engines sharing one memory budget, written by a
// fixed pool of writers that pick the engine of each put at random.
type w11Row struct {
	name     string
	budget   *kvbuf.MemoryBudget
	dbs      []*kvbuf.DB
	kvs      []*kvbuf.KV
	puts     int // per round, all engines together
	writers  int
	round    atomic.Uint64
	readBack int
}

// setupW11 builds W11 with the given budget policy (0: the default):
// w11Engines engines opened with one MemoryBudget of w11BytesPerEng per
// engine, and w11WritersPerProc writers per GOMAXPROCS.
func setupW11(policy kvbuf.BudgetPolicy, impl, workload string) func(context.Context, *Suite, Config) error {
	return func(ctx context.Context, s *Suite, c Config) error {
		n := min(w11Engines, c.scaled(w11Engines, 16))
		b, err := kvbuf.NewMemoryBudget(int64(n)*w11BytesPerEng, &kvbuf.BudgetOptions{Policy: policy})
		if err != nil {
			return err
		}
		s.onClose(b.Close) // registered first: runs after the engines' Close
		r := &w11Row{name: impl, budget: b, puts: n * w11PutsPerEng, writers: w11WritersPerProc * runtime.GOMAXPROCS(0), readBack: c.ReadBack}
		for i := range n {
			if err := ctx.Err(); err != nil {
				return err
			}
			db, kv, err := openKV(s, fmt.Sprintf("e%04d", i), "w11", &kvbuf.Options{MemoryBudget: b, FlushInterval: -1})
			if err != nil {
				return err
			}
			r.dbs, r.kvs = append(r.dbs, db), append(r.kvs, kv)
		}
		s.add(&Workload{Name: workload, Unit: "put", Writes: true, UserBytesPerOp: 12 + w11ValueLen, // a put's key (w11Key) and value
			settle: settleStores(r.dbs, nil), Impls: []Impl{{Name: impl, Round: RoundFunc(r.run)}}})
		return nil
	}
}

// w11Key is the key of an engine's i-th put of round r.
func w11Key(dst []byte, r uint64, i int) []byte {
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(dst, r), uint32(i))
}

// w11Value is the value of engine e's i-th put of round r.
func w11Value(dst []byte, r uint64, e, i int) []byte {
	dst = dst[:w11ValueLen]
	binary.BigEndian.PutUint64(dst, r)
	binary.BigEndian.PutUint32(dst[8:], uint32(e))
	binary.BigEndian.PutUint32(dst[12:], uint32(i))
	return dst
}

// w11Pressed is one writer's tally, per engine, of its puts made while
// the budget was past its high mark and of their latencies.
type w11Pressed struct {
	puts []int
	ns   []int64
}

// run is one round: the writers put, each to an engine drawn uniformly at
// random for every put, until they made the round's puts together; then
// every engine is flushed (timed: the round ends with everything durable).
// An engine's i-th put of the round (i counted per engine, across the
// writers) writes key w11Key(round, i). A monitor samples the budget's
// total: its peak, and from when it first passes the high mark, each
// writer counts its puts per engine and times them, for the fairness
// figures.
func (r *w11Row) run(ctx context.Context, _ int) (RoundResult, error) {
	rd := r.round.Add(1)
	next := make([]atomic.Int64, len(r.kvs)) // each engine's puts so far: the next put's index
	tallies := make([]w11Pressed, r.writers)
	var out RoundResult
	var peak atomic.Int64
	var full atomic.Bool
	m0 := r.budget.Metrics()
	high := m0.HighMark
	err := Timed(&out, func() error {
		stop := make(chan struct{})
		var mon sync.WaitGroup
		mon.Add(1)
		go func() {
			defer mon.Done()
			t := time.NewTicker(200 * time.Microsecond)
			defer t.Stop()
			for {
				v := r.budget.Metrics().Bytes
				if v > peak.Load() {
					peak.Store(v)
				}
				if v > high {
					full.Store(true)
				}
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
		}()
		var left atomic.Int64
		left.Store(int64(r.puts))
		var wg sync.WaitGroup
		errs := make([]error, r.writers)
		for w := range r.writers {
			tl := &tallies[w]
			tl.puts, tl.ns = make([]int, len(r.kvs)), make([]int64, len(r.kvs))
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(rd, uint64(w)))
				var key []byte
				val := make([]byte, w11ValueLen)
				for left.Add(-1) >= 0 {
					e := rng.IntN(len(r.kvs))
					i := int(next[e].Add(1) - 1)
					key = w11Key(key[:0], rd, i)
					pressed := full.Load()
					var t0 time.Time
					if pressed {
						t0 = time.Now()
					}
					if err := r.kvs[e].Put(ctx, key, w11Value(val, rd, e, i), 0); err != nil {
						errs[w] = fmt.Errorf("engine %d: %w", e, err)
						return
					}
					if pressed {
						tl.puts[e]++
						tl.ns[e] += int64(time.Since(t0))
					}
				}
			}()
		}
		wg.Wait()
		close(stop)
		mon.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		for _, db := range r.dbs {
			if err := db.Flush(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	out.Ops = r.puts
	if err != nil {
		return out, err
	}
	if err := r.fairness(&out, tallies); err != nil {
		return out, fmt.Errorf("%w (peak %d of %d bytes)", err, peak.Load(), r.budget.Size())
	}
	// The budget's own highest total is exact (it is kept at every
	// write); the monitor's samples may miss a spike between two ticks.
	m := r.budget.Metrics()
	out.BudgetPeak = float64(max(peak.Load(), m.MaxBytes)) / float64(m.Size)
	if n := m.ForcedFlushes - m0.ForcedFlushes; n > 0 {
		out.BudgetGen = float64(m.ForcedBytes-m0.ForcedBytes) / float64(n) / float64(m.Size)
	}
	// Read back a sample of every engine's puts of the round.
	rng := rand.New(rand.NewPCG(rd, 11))
	var key, val []byte
	val = make([]byte, w11ValueLen)
	want := r.readBack
	if want < 0 {
		want = r.puts
	}
	for range min(want, r.puts) {
		e := rng.IntN(len(next))
		made := int(next[e].Load())
		if made == 0 {
			continue
		}
		i := rng.IntN(made)
		key = w11Key(key[:0], rd, i)
		n, err := readBackKV(r.name, []int{0}, func(int) []byte { return key },
			func(int) []byte { return w11Value(val, rd, e, i) }, kvbufGetter(r.kvs[e]))
		if err != nil {
			return out, err
		}
		out.ReadBack += n
	}
	out.Checks = int64(r.puts)
	return out, nil
}

// fairness sets out's per-engine figures from the writers' tallies of the
// puts made once the budget was past its high mark (before, no write
// waits). With engines drawn at random an engine's puts are a binomial
// draw, so the puts over their mean (EngineMinShare, EngineMaxShare) say
// only that the draw was uniform; an engine starves if its puts take
// longer than the others' (they wait in the budget or behind its flush),
// so its throughput under the writers' load is the inverse of its mean put
// latency: EngineMinLat and EngineMaxLat are the least and the most mean
// put latency of an engine over the mean latency of every put (the
// issue's "within 2x of the mean" is 0.5-2).
func (r *w11Row) fairness(out *RoundResult, tallies []w11Pressed) error {
	puts := make([]int, len(r.kvs))
	ns := make([]int64, len(r.kvs))
	var sumPuts, sumNs int64
	for _, tl := range tallies {
		for e := range puts {
			puts[e] += tl.puts[e]
			ns[e] += tl.ns[e]
			sumPuts += int64(tl.puts[e])
			sumNs += tl.ns[e]
		}
	}
	if sumPuts == 0 {
		return fmt.Errorf("bench: %s: the round never filled the budget", r.name)
	}
	meanPuts := float64(sumPuts) / float64(len(puts))
	meanLat := float64(sumNs) / float64(sumPuts)
	lo, hi := puts[0], puts[0]
	loLat, hiLat := -1.0, -1.0
	for e, p := range puts {
		lo, hi = min(lo, p), max(hi, p)
		if p == 0 {
			continue // no latency to compare: the puts figure shows it
		}
		l := float64(ns[e]) / float64(p) / meanLat
		if loLat < 0 || l < loLat {
			loLat = l
		}
		hiLat = max(hiLat, l)
	}
	out.EngineMinShare, out.EngineMaxShare = float64(lo)/meanPuts, float64(hi)/meanPuts
	out.EngineMinLat, out.EngineMaxLat = loLat, hiLat
	return nil
}
