package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"time"
)

// Implementation names used in rows (impl in kvtool bench --json), from
// shared/workloads.md.
const (
	ImplKvbuf              = "kvbuf"
	ImplRaw                = "raw"
	ImplMutexMap           = "mutex+map"
	ImplRWMutexMap         = "rwmutex+map"
	ImplSyncMap            = "sync.Map"
	ImplXsyncMap           = "xsync.Map"
	ImplPebbleGet          = "pebble-get"
	ImplPebbleIndexedBatch = "pebble-indexed-batch"
	ImplRWMutexMapPebble   = "rwmutex+map+pebble"
	ImplPerCallerSync      = "per-caller-sync"
	ImplSingleflight       = "x/sync-singleflight"
)

// ImplKvbufOverlay is the buffer overlay alone, without the engine's drain
// gate and keyspace prefix: what the buffer package's own benchmarks
// measure. It is one of the project's rows (it gets RatioVs), not a
// canonical workloads.md name.
const ImplKvbufOverlay = "kvbuf-overlay"

// ErrBadConfig is returned for a Config or argument out of range.
var ErrBadConfig = errors.New("bench: bad configuration")

// ErrMismatch is returned by Workload.Run when two implementations give
// different answers for the same inputs: the comparison would be
// meaningless.
var ErrMismatch = errors.New("bench: implementations disagree")

// Config sizes the workloads. A nil *Config means defaults; a zero field
// means that field's default.
type Config struct {
	// Dir is where the suites create their engines and files (each in a
	// subdirectory made with os.MkdirTemp and removed by Suite.Close).
	// Default: os.TempDir().
	Dir string

	// Scale multiplies every W1 and W2 size in workloads.md (1,000,000 bit
	// sets and lookups, 4,194,304 bits, 1,048,576 preloaded keys, …). Small
	// values make smoke tests fast; sizes never drop below a few dozen.
	// Default: 1.
	Scale float64

	// Seed seeds every random input. Default: 1.
	Seed uint64

	// FlushesPerGoroutine is W4's fixed count: how many {write, Flush}
	// iterations each goroutine does per round. Default: 8 (each physical
	// flush is an fsync of several milliseconds on an ordinary disk).
	FlushesPerGoroutine int

	// Scans is the number of 10,000-key range scans per W2 scan-10k round.
	// Default: 100 × Scale, at least 3.
	Scans int
}

func (c *Config) withDefaults() (Config, error) {
	var o Config
	if c != nil {
		o = *c
	}
	if o.Dir == "" {
		o.Dir = os.TempDir()
	}
	if o.Scale == 0 {
		o.Scale = 1
	}
	if o.Scale < 0 || math.IsNaN(o.Scale) || math.IsInf(o.Scale, 0) || o.Scale > 100 {
		return o, fmt.Errorf("%w: scale %v (want 0 < scale <= 100)", ErrBadConfig, o.Scale)
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.FlushesPerGoroutine == 0 {
		o.FlushesPerGoroutine = 8
	}
	if o.FlushesPerGoroutine < 0 {
		return o, fmt.Errorf("%w: flushes per goroutine %d", ErrBadConfig, o.FlushesPerGoroutine)
	}
	if o.Scans == 0 {
		o.Scans = o.scaled(100, 3)
	}
	if o.Scans < 0 {
		return o, fmt.Errorf("%w: scans %d", ErrBadConfig, o.Scans)
	}
	return o, nil
}

// scaled returns n × Scale, at least lo.
func (c Config) scaled(n int, lo int) int {
	return max(int(float64(n)*c.Scale), lo)
}

// Impl is one row of a workload: an implementation and how to run it.
// Exactly one of Op and Round is set.
type Impl struct {
	// Name is the canonical implementation name (ImplKvbuf, ImplRaw, …).
	Name string

	// Floor marks a lower bound that reads without the pending changes
	// (raw bitslice, pebble-get): its answers differ from the others, so
	// the cross-check skips it.
	Floor bool

	// Op performs operation i (0 <= i < Workload.Ops) and returns its
	// check count: 1 for a bit found set or a key found, the number of keys
	// read by a scan.
	Op func(i int) (int, error)

	// Round runs one whole round and reports it (W4).
	Round func(ctx context.Context) (RoundResult, error)
}

// RoundResult describes one round of an Impl.Round.
type RoundResult struct {
	// Ops is the number of operations the round did.
	Ops int
	// Elapsed is the round's wall time.
	Elapsed time.Duration
	// Flushes counts Flush calls; Syncs counts physical syncs they caused.
	Flushes, Syncs int64
	// Violations counts Flush calls that returned nil before the caller's
	// own earlier write was durable (design contract 2).
	Violations int64
	// Latencies holds the duration of every Flush call.
	Latencies []time.Duration
}

// Workload is one named workload of a Suite, with its implementations.
type Workload struct {
	// Name is the canonical workload name, e.g. "W1/lookup-with-pending-changes".
	Name string
	// Ops is the number of inputs an Op round goes through.
	Ops int
	// Impls are the rows, kvbuf first.
	Impls []Impl

	// prepare runs once before the first round (W1's pending changes).
	prepare  func(ctx context.Context) error
	prepared bool
}

// Prepare brings the shared state to what this workload measures (for
// W1/lookup-with-pending-changes: the second million Sets, left pending).
// It runs at most once; Run calls it. Workloads of a suite must be prepared
// in order.
func (w *Workload) Prepare(ctx context.Context) error {
	if w.prepared || w.prepare == nil {
		w.prepared = true
		return nil
	}
	if err := w.prepare(ctx); err != nil {
		return fmt.Errorf("bench: prepare %s: %w", w.Name, err)
	}
	w.prepared = true
	return nil
}

// Row is the result of one implementation in one workload.
type Row struct {
	Workload string
	Impl     string
	Floor    bool
	// Rounds is the number of rounds measured; OpsPerRound the operations
	// in each.
	Rounds, OpsPerRound int
	// NsPerOp holds each round's nanoseconds per operation, in round order.
	NsPerOp []float64
	// Median, Min and Max summarise NsPerOp.
	Median, Min, Max float64
	// AllocsPerOp is the median over rounds of allocations per operation.
	AllocsPerOp float64
	// RatioVs (kvbuf rows only) maps each baseline to baseline median ÷
	// kvbuf median: above 1 means kvbuf is faster.
	RatioVs map[string]float64

	// W4 only (Flushes > 0): physical syncs per Flush call, coverage
	// violations, Flush latency percentiles over every round.
	Flushes, Syncs, Violations int64
	P50FlushNs, P99FlushNs     float64
}

// SyncsPerFlush is Syncs ÷ Flushes, or 0 when there were no flushes.
func (r Row) SyncsPerFlush() float64 {
	if r.Flushes == 0 {
		return 0
	}
	return float64(r.Syncs) / float64(r.Flushes)
}

// Run prepares w, then runs rounds rounds; in round r the implementations
// run in rotating order starting at index r mod len(Impls). step, if not
// nil, is called after each implementation's round (for progress bars).
// ctx is checked between rounds. It returns one Row per implementation, in
// Impls order.
func (w *Workload) Run(ctx context.Context, rounds int, step func(impl string, round int)) ([]Row, error) {
	if rounds <= 0 {
		return nil, fmt.Errorf("%w: %d rounds", ErrBadConfig, rounds)
	}
	if len(w.Impls) == 0 {
		return nil, fmt.Errorf("%w: workload %s has no implementations", ErrBadConfig, w.Name)
	}
	if err := w.Prepare(ctx); err != nil {
		return nil, err
	}
	n := len(w.Impls)
	rows := make([]Row, n)
	allocs := make([][]float64, n)
	lat := make([][]time.Duration, n)
	for k, im := range w.Impls {
		rows[k] = Row{Workload: w.Name, Impl: im.Name, Floor: im.Floor, Rounds: rounds}
	}
	for r := range rounds {
		var checkImpl string
		var check int64 = -1
		for j := range n {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			k := (r + j) % n
			im := w.Impls[k]
			res, sum, a, err := w.measure(ctx, im)
			if err != nil {
				return nil, fmt.Errorf("bench: %s/%s round %d: %w", w.Name, im.Name, r, err)
			}
			if im.Op != nil && !im.Floor {
				if check >= 0 && sum != check {
					return nil, fmt.Errorf("%w: %s round %d: %s counted %d, %s counted %d",
						ErrMismatch, w.Name, r, checkImpl, check, im.Name, sum)
				}
				check, checkImpl = sum, im.Name
			}
			row := &rows[k]
			ops := max(res.Ops, 1)
			row.OpsPerRound = res.Ops
			row.NsPerOp = append(row.NsPerOp, float64(res.Elapsed.Nanoseconds())/float64(ops))
			allocs[k] = append(allocs[k], a/float64(ops))
			row.Flushes += res.Flushes
			row.Syncs += res.Syncs
			row.Violations += res.Violations
			lat[k] = append(lat[k], res.Latencies...)
			if step != nil {
				step(im.Name, r)
			}
		}
	}
	for k := range rows {
		row := &rows[k]
		row.Median = Median(row.NsPerOp)
		row.Min = slices.Min(row.NsPerOp)
		row.Max = slices.Max(row.NsPerOp)
		row.AllocsPerOp = Median(allocs[k])
		if len(lat[k]) > 0 {
			row.P50FlushNs = float64(percentile(lat[k], 0.50).Nanoseconds())
			row.P99FlushNs = float64(percentile(lat[k], 0.99).Nanoseconds())
		}
	}
	AddRatios(rows)
	return rows, nil
}

// measure runs one round of im after a GC (so one implementation's garbage
// is not collected on another's time) and returns it with its check sum
// and the number of allocations made during it.
func (w *Workload) measure(ctx context.Context, im Impl) (RoundResult, int64, float64, error) {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	var res RoundResult
	var sum int64
	switch {
	case im.Round != nil:
		var err error
		res, err = im.Round(ctx)
		if err != nil {
			return res, 0, 0, err
		}
	case im.Op != nil:
		op := im.Op
		start := time.Now()
		for i := range w.Ops {
			c, err := op(i)
			if err != nil {
				return res, 0, 0, fmt.Errorf("op %d: %w", i, err)
			}
			sum += int64(c)
		}
		res = RoundResult{Ops: w.Ops, Elapsed: time.Since(start)}
	default:
		return res, 0, 0, fmt.Errorf("%w: implementation %s has neither Op nor Round", ErrBadConfig, im.Name)
	}
	runtime.ReadMemStats(&m1)
	return res, sum, float64(m1.Mallocs - m0.Mallocs), nil
}

// IsOwn reports whether impl is one of the project's own rows (kvbuf and
// kvbuf-overlay) rather than a baseline.
func IsOwn(impl string) bool { return impl == ImplKvbuf || impl == ImplKvbufOverlay }

// AddRatios sets RatioVs on every kvbuf row: for each other row of the same
// workload, that row's median ÷ the kvbuf median.
func AddRatios(rows []Row) {
	for k := range rows {
		if !IsOwn(rows[k].Impl) || rows[k].Median <= 0 {
			continue
		}
		rows[k].RatioVs = map[string]float64{}
		for _, o := range rows {
			if o.Workload == rows[k].Workload && !IsOwn(o.Impl) {
				rows[k].RatioVs[o.Impl] = o.Median / rows[k].Median
			}
		}
	}
}

// Median returns the median of xs (the mean of the middle two for an even
// count), or 0 for none. xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// percentile returns the q-quantile of ds by nearest rank.
func percentile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}
