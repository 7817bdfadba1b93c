package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
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
)

// w11Row is one W11 row: engines sharing one memory budget, each written
// by its own goroutine.
type w11Row struct {
	name     string
	budget   *kvbuf.MemoryBudget
	dbs      []*kvbuf.DB
	kvs      []*kvbuf.KV
	puts     int // per round, all engines together
	round    atomic.Uint64
	readBack int
}

// setupW11 builds W11 with the given budget policy (0: the default):
// w11Engines engines
// opened with one MemoryBudget of w11BytesPerEng per engine.
func setupW11(policy kvbuf.BudgetPolicy, impl, workload string) func(context.Context, *Suite, Config) error {
	return func(ctx context.Context, s *Suite, c Config) error {
		n := min(w11Engines, c.scaled(w11Engines, 16))
		b, err := kvbuf.NewMemoryBudget(int64(n)*w11BytesPerEng, &kvbuf.BudgetOptions{Policy: policy})
		if err != nil {
			return err
		}
		s.onClose(b.Close) // registered first: runs after the engines' Close
		r := &w11Row{name: impl, budget: b, puts: n * w11PutsPerEng, readBack: c.ReadBack}
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
		s.add(&Workload{Name: workload, Unit: "put", Writes: true, Impls: []Impl{{Name: impl, Round: RoundFunc(r.run)}}})
		return nil
	}
}

// w11Key is the key of engine e's i-th put of round r.
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

// run is one round: a goroutine per engine puts until the engines together
// made the round's puts, then every engine is flushed (timed: the round
// ends with everything durable). A monitor samples the budget's total:
// its peak, and from when it first passes the high mark, each engine's
// puts are counted for the fairness figures.
func (r *w11Row) run(ctx context.Context, _ int) (RoundResult, error) {
	rd := r.round.Add(1)
	counts := make([]int, len(r.kvs))  // every put
	pressed := make([]int, len(r.kvs)) // puts while the budget was past its high mark
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
		errs := make([]error, len(r.kvs))
		for e, kv := range r.kvs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var key []byte
				val := make([]byte, w11ValueLen)
				for i := 0; left.Add(-1) >= 0; i++ {
					key = w11Key(key[:0], rd, i)
					if err := kv.Put(ctx, key, w11Value(val, rd, e, i), 0); err != nil {
						errs[e] = err
						return
					}
					counts[e]++
					if full.Load() {
						pressed[e]++
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
	// Fairness is the budget's once it is full: before, no write waits and
	// the goroutines the scheduler runs first write the most.
	lo, hi, sum := pressed[0], pressed[0], 0
	for _, c := range pressed {
		lo, hi, sum = min(lo, c), max(hi, c), sum+c
	}
	if sum == 0 {
		return out, fmt.Errorf("bench: %s: the round never filled the budget (peak %d of %d bytes)", r.name, peak.Load(), r.budget.Size())
	}
	mean := float64(sum) / float64(len(pressed))
	out.EngineMinShare, out.EngineMaxShare = float64(lo)/mean, float64(hi)/mean
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
		e := rng.IntN(len(counts))
		if counts[e] == 0 {
			continue
		}
		i := rng.IntN(counts[e])
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
