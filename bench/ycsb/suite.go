package ycsb

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/magiconair/properties"
	"github.com/pingcap/go-ycsb/pkg/prop"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/internal/workload"
)

// Config describes a comparison run (kvtool ycsb): every engine loaded
// once, then each workload at each thread count for Rounds rounds.
type Config struct {
	// Engines to compare (names of Engines). Default: all of them.
	Engines []string
	// Workloads: names of StandardWorkloads or properties files, run in
	// this order. Default: StandardOrder.
	Workloads []string
	// Threads: the client thread counts each workload runs at. Default 1.
	Threads []int
	// Records loaded (recordcount). Required.
	Records int64
	// Ops is the number of measured operations per run (operationcount).
	// Required.
	Ops int64
	// Warmup is the number of operations each run does, unmeasured, right
	// after the engine opens (default Ops/10; negative: none), in at most
	// MaxTime/5.
	Warmup int64
	// Rounds of each workload and thread count; each round runs every
	// engine once, starting with engine r mod n. Default 3.
	Rounds int
	// MaxTime, if positive, caps each measured run (the rate is then
	// computed over the operations done).
	MaxTime time.Duration
	// LoadBatch records go in one BatchInsert during the load. Default 256.
	LoadBatch int
	// Dir is the parent of the temporary directory holding the databases
	// (removed afterwards). Default: os.TempDir().
	Dir string
	// Seed makes the runs' operation sequences reproducible.
	Seed int64
	// Props are extra properties applied over every workload's: engine
	// options (kvbuf.*, pebble.*, badger.*, bbolt.*) and workload
	// overrides.
	Props *properties.Properties
	// Progress, if not nil, is called from one goroutine with the fraction
	// done (by operations) and what is running.
	Progress func(frac float64, label string)
	// OnRows, if not nil, is called with each group of rows as soon as it
	// is complete (the load's, then each workload's at each thread count),
	// so that a long run's output streams; never at the same time as
	// Progress.
	OnRows func([]Row)
	// Durability lists the durability modes to compare the engines in
	// (DurabilityWindow, DurabilityAcked), each with its own load. Default:
	// DurabilityModes.
	Durability []string
}

// The durability modes of a comparison: what every engine has promised
// when a write returns, the same for all of them within a mode. Each
// engine is also given kvbuf's memory: the pebble and badger memtables
// are kvbuf's MaxPendingBytes, their block caches its CacheSize plus its
// ReadTierBytes.
const (
	// DurabilityWindow: the same loss window. Every engine may lose the
	// writes of its last interval I on a power loss, and no more (I is
	// kvbuf's FlushInterval, or kvbuf.host_log_interval: lossWindow):
	// kvbuf flushes every FlushInterval and is driven as a host with a log
	// (every write op numbered and appended to an append-only file beside
	// the engine, one write system call each, the file synced every I:
	// kvbuf.host_log), which alone keeps the window when kvbuf's
	// interval flushes are off (kvbuf.flush_interval=-1s); pebble writes
	// with NoSync and syncs its WAL with a LogData every I
	// (pebble.sync_interval); badger calls DB.Sync every I
	// (badger.sync_interval). bbolt, which syncs every commit, is left out.
	DurabilityWindow = "window"
	// DurabilityAcked: acknowledged after durable. A write returns once it
	// is durable, and concurrent writers share the syncs: kvbuf writes and
	// then calls DB.Flush (kvbuf.flush_writes), pebble commits with
	// pebble.Sync (pebble.sync_writes), badger with SyncWrites
	// (badger.sync_writes), bbolt commits (DB.Batch with several threads).
	DurabilityAcked = "acked"
)

// DurabilityModes lists the durability modes, in the order Bench runs
// them.
var DurabilityModes = []string{DurabilityWindow, DurabilityAcked}

// modeEngines returns the engines of engines that run in durability mode
// mode.
func modeEngines(mode string, engines []string) []string {
	var out []string
	for _, e := range engines {
		if mode == DurabilityWindow && e == "bbolt" {
			continue // every commit is synced: it has no loss window
		}
		out = append(out, e)
	}
	return out
}

// modeProperties returns the engine properties durability mode mode sets,
// sized from kvbuf's options in p (its MaxPendingBytes, CacheSize and
// ReadTierBytes, defaults included, and the window mode's loss window,
// lossWindow). Bench sets each unless the run's own
// properties (Config.Props) set it.
func modeProperties(mode string, p *properties.Properties) (map[string]string, error) {
	o, _, err := kvbufOptions(p)
	if err != nil {
		return nil, err
	}
	r := o.EnsureDefaults()
	out := map[string]string{
		"pebble.cache_size":       strconv.FormatInt(r.CacheSize+readTierBytes(r), 10),
		"badger.block_cache_size": strconv.FormatInt(r.CacheSize+readTierBytes(r), 10),
		"badger.num_memtables":    "2", // pebble's MemTableStopWritesThreshold
	}
	if r.MaxPendingBytes > 0 {
		out["pebble.memtable_size"] = strconv.FormatInt(min(max(r.MaxPendingBytes, 1<<20), 4<<30-1), 10)
		// badger refuses a memtable whose batch limit (15% of it) is below
		// its value threshold (1 MiB): at least badgerMinMemtable.
		out["badger.memtable_size"] = strconv.FormatInt(max(r.MaxPendingBytes, badgerMinMemtable), 10)
	}
	switch mode {
	case DurabilityWindow:
		w, err := lossWindow(p, o)
		if err != nil {
			return nil, err
		}
		out["kvbuf.host_log"] = "true"
		out["pebble.sync_interval"] = w.String()
		out["badger.sync_interval"] = w.String()
	case DurabilityAcked:
		out["kvbuf.flush_writes"] = "true"
		out["pebble.sync_writes"] = "true"
		out["badger.sync_writes"] = "true"
	default:
		return nil, fmt.Errorf("%w: durability %q (want one of %s)", ErrBadProperty, mode, strings.Join(DurabilityModes, ", "))
	}
	return out, nil
}

// readTierBytes is the memory kvbuf keeps for reads of flushed data beyond
// its store's block cache (Options.ReadTierBytes, after defaults; 0 when
// the tier is disabled): the other engines' caches get it too.
func readTierBytes(r *kvbuf.Options) int64 { return max(r.ReadTierBytes, 0) }

// withMode returns a copy of p with mode's properties set where the run's
// own properties (explicit) do not set them.
func withMode(p, explicit *properties.Properties, mode map[string]string) *properties.Properties {
	q := p.FilterFunc(func(string, string) bool { return true })
	for k, v := range mode {
		if explicit != nil {
			if _, ok := explicit.Get(k); ok {
				continue
			}
		}
		q.MustSet(k, v)
	}
	return q
}

// OpStats summarises one operation type's latencies.
type OpStats struct {
	// Count is the number of operations timed.
	Count int64
	// P50, P99 and P999 are percentiles (HDR histogram, 3 significant
	// digits); Max the slowest.
	P50, P99, P999, Max time.Duration
}

// Row is one engine's result for one workload at one thread count.
type Row struct {
	// Workload is the workload's name ("a".."f", a file's base name, or
	// "load" for the load).
	Workload string
	// Threads is the client thread count; Engine the engine's name.
	Threads int
	Engine  string
	// Rounds measured and operations per round (the last round's count
	// when MaxTime cut runs short).
	Rounds      int
	OpsPerRound int64
	// OpsPerSec is the median over rounds; Min and Max the extremes.
	OpsPerSec, MinOpsPerSec, MaxOpsPerSec float64
	// Ops maps each operation name (OpRead, ...) to its latencies over all
	// rounds.
	Ops map[string]OpStats
	// KvbufSpeedup is the median over rounds of kvbuf's ops/s ÷ this
	// engine's in the same round (above 1: kvbuf is faster), and
	// SpeedupMin, SpeedupMax its extremes; 0 on kvbuf rows and when kvbuf
	// was not run.
	KvbufSpeedup, SpeedupMin, SpeedupMax float64
	// RoundOpsPerSec holds each round's ops/s, in round order.
	RoundOpsPerSec []float64
	// CPUPerOp is the median over rounds of the process's user+system CPU
	// time per operation over the measured run and the Close (getrusage:
	// every goroutine, background flushes and compactions included); 0
	// where getrusage does not exist.
	CPUPerOp time.Duration
	// DiskPerUserByte is, over all rounds, the bytes the process wrote to
	// disk per byte of user data written: the rounds' Result.DiskBytes
	// summed over their Result.UserBytes summed (not a median of per-round
	// figures, which flips between two values when a compaction lands
	// every other round); DiskMin and DiskMax are the per-round extremes.
	// A round counts from its measured operations, the load
	// from its first insert, through the settle step (memtables to
	// sstables, flushes and compactions waited out) and the engine's
	// Close. All 0 where nothing was written (workload C), the engine
	// cannot be waited out (badger) or a round's settle step found it still
	// busy after settleWait, the system keeps no count or the count did
	// not move (tmpfs), or the figure is negative (pages of other, removed
	// files taken back from the count).
	DiskPerUserByte, DiskMin, DiskMax float64
	// Store is the work of the engine's store (Result.Store) summed over
	// the rounds that measured it, and StoreRounds their number: 0 where
	// the engine reports none (badger, bbolt); a round whose settle step
	// found the engine still busy is left out. Where the disk bytes went: memtable flushes,
	// ingestions, and compactions (each a rewrite of the tables below that
	// a flushed or ingested table overlaps).
	Store       StoreWork
	StoreRounds int
	// Durability is the durability mode the row ran in (DurabilityWindow,
	// DurabilityAcked).
	Durability string
	// Records is the number of records the engine held after the runs.
	Records int64
}

// engineState is one engine's database during a comparison.
type engineState struct {
	name    string
	dir     string
	records int64
}

// Bench runs the comparison described by cfg and returns one row per
// engine for the load and for each workload and thread count, in each
// durability mode, in run order. Every run (and the load) is timed until
// what it wrote is durable: a run's clock includes the engine's Close,
// which makes its last writes durable. It removes its databases before
// returning.
func Bench(ctx context.Context, cfg Config) (rows []Row, err error) {
	cfg, loadProps, wls, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	parent := cfg.Dir
	if parent == "" {
		parent = os.TempDir()
	}
	tmp, err := os.MkdirTemp(parent, "kvtool-ycsb-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if rerr := os.RemoveAll(tmp); err == nil && rerr != nil {
			err = rerr
		}
	}()

	p := newProgressor(cfg)
	defer p.stop()
	for _, mode := range cfg.Durability {
		engines := modeEngines(mode, cfg.Engines)
		if len(engines) == 0 {
			continue
		}
		props, err := modeProperties(mode, loadProps)
		if err != nil {
			return nil, err
		}
		mwls := make([]*properties.Properties, len(wls))
		for i, w := range wls {
			mwls[i] = withMode(w, cfg.Props, props)
		}
		dir := filepath.Join(tmp, mode)
		mrows, err := benchMode(ctx, cfg, mode, engines, dir, withMode(loadProps, cfg.Props, props), mwls, p)
		rows = append(rows, mrows...)
		if err != nil {
			return nil, err
		}
		if err := os.RemoveAll(dir); err != nil {
			return nil, err
		}
	}
	return rows, nil
}

// benchMode loads engines in dir and runs every workload in durability
// mode mode.
func benchMode(ctx context.Context, cfg Config, mode string, engines []string, dir string, loadProps *properties.Properties, wls []*properties.Properties, p *progressor) ([]Row, error) {
	var rows []Row
	loadW, err := NewWorkload(loadProps)
	if err != nil {
		return nil, err
	}
	states := make([]*engineState, len(engines))
	maxThreads := slices.Max(cfg.Threads)
	for i, name := range engines {
		es := &engineState{name: name, dir: filepath.Join(dir, name)}
		states[i] = es
		p.label(fmt.Sprintf("%s: load %s (%d records, %d threads)", mode, name, cfg.Records, maxThreads))
		var res *Result
		var err error
		pprof.Do(ctx, runLabels(mode, name, "load", maxThreads), func(ctx context.Context) {
			res, err = loadOne(ctx, cfg, es, loadProps, loadW, maxThreads, &p.done)
		})
		if err != nil {
			return nil, fmt.Errorf("%s: load %s: %w", mode, name, err)
		}
		es.records = res.Records
		rows = append(rows, summarize("load", maxThreads, name, mode, []*Result{res}))
	}
	speedups(rows)
	p.emit(cfg.OnRows, rows)

	for wi, wl := range cfg.Workloads {
		for _, threads := range cfg.Threads {
			results := make([][]*Result, len(states))
			for r := range cfg.Rounds {
				seed := runSeed(cfg.Seed, wl, threads, r)
				for i := range states {
					es := states[(r+i)%len(states)]
					p.label(fmt.Sprintf("%s: %s at %d threads, round %d/%d: %s", mode, wl, threads, r+1, cfg.Rounds, es.name))
					var res *Result
					var err error
					pprof.Do(ctx, runLabels(mode, es.name, workloadName(wl), threads), func(ctx context.Context) {
						res, err = runOne(ctx, cfg, es, wls[wi], threads, seed, &p.done)
					})
					if err != nil {
						return nil, fmt.Errorf("%s: workload %s, %d threads, %s: %w", mode, wl, threads, es.name, err)
					}
					idx := slices.Index(engines, es.name)
					results[idx] = append(results[idx], res)
				}
			}
			first := len(rows)
			for i, es := range states {
				rows = append(rows, summarize(workloadName(wl), threads, es.name, mode, results[i]))
				rows[len(rows)-1].Records = es.records
			}
			speedups(rows[first:])
			p.emit(cfg.OnRows, rows[first:])
		}
	}
	return rows, nil
}

// runLabels are the CPU profile labels of one load or run (kvtool ycsb
// --cpuprofile): every goroutine it starts, the engine's background work
// included, carries them, so that go tool pprof -tagfocus can split a
// profile by engine, workload and thread count.
func runLabels(mode, db, workload string, threads int) pprof.LabelSet {
	return pprof.Labels("durability", mode, "db", db, "workload", workload, "threads", strconv.Itoa(threads))
}

// loadOne opens es, loads it with w, makes the load durable (timed) and
// settles it, and closes it.
func loadOne(ctx context.Context, cfg Config, es *engineState, props *properties.Properties, w *Workload, threads int, done *atomic.Int64) (*Result, error) {
	db, err := Open(es.name, es.dir, props)
	if err != nil {
		return nil, err
	}
	d0, dok := workload.ProcessDiskWrites()
	s0, sok := storeWork(db)
	c0, cok := processCPU()
	res, err := Load(ctx, db, w, cfg.LoadBatch, RunOptions{Threads: threads, Seed: cfg.Seed, Done: done})
	if err == nil {
		// The load is timed until it is durable.
		start := time.Now()
		err = db.e.durable(ctx)
		res.Elapsed += time.Since(start)
		if c1, ok := processCPU(); ok && cok {
			res.CPU = c1 - c0
		}
	}
	idle := false
	if err == nil {
		idle, err = settle(ctx, db)
	}
	if s1, ok := storeWork(db); ok && sok && idle && err == nil {
		res.Store, res.StoreMeasured = s1.sub(s0), true
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	// The load's disk writes: through the settle step (memtables to
	// sstables, then the flushes and compactions they cause) and the
	// Close.
	if d1, ok := workload.ProcessDiskWrites(); ok && dok && idle && err == nil {
		res.DiskBytes, res.DiskMeasured = d1-d0, true
	}
	return res, err
}

// runOne opens es, runs the warm-up and the measured operations of w, and
// closes it. The measured run's clock and CPU time go on until what the
// run wrote is durable (the engine's durable step) and through Close;
// between the two, off the clock, the settle step writes the memtables to
// sstables and waits for the flushes and compactions that follow, so that
// the run's disk figure counts them and the next run (whose Open would
// otherwise flush the replayed log and resume the compactions) does not.
// The warm-up is settled the same way before the measured run's counts
// start.
func runOne(ctx context.Context, cfg Config, es *engineState, props *properties.Properties, threads int, seed int64, done *atomic.Int64) (*Result, error) {
	db, err := Open(es.name, es.dir, props)
	if err != nil {
		return nil, err
	}
	var c0 time.Duration
	var d0 int64
	var s0, s1 StoreWork
	var cok, dok, sok, idle bool
	res, err := func() (*Result, error) {
		if cfg.Warmup > 0 {
			wp := props.FilterFunc(func(string, string) bool { return true })
			wp.MustSet(prop.OperationCount, strconv.FormatInt(cfg.Warmup, 10))
			ww, err := NewWorkload(wp)
			if err != nil {
				return nil, err
			}
			wr, err := Run(ctx, db, ww, es.records, RunOptions{Threads: threads, Seed: seed ^ 0x5eed, MaxTime: cfg.MaxTime / 5, Done: done})
			if err != nil {
				return nil, fmt.Errorf("warm-up: %w", err)
			}
			es.records = wr.Records
			if _, err := settle(ctx, db); err != nil {
				return nil, fmt.Errorf("warm-up: %w", err)
			}
		}
		w, err := NewWorkload(props)
		if err != nil {
			return nil, err
		}
		d0, dok = workload.ProcessDiskWrites()
		s0, sok = storeWork(db)
		c0, cok = processCPU()
		res, err := Run(ctx, db, w, es.records, RunOptions{Threads: threads, Seed: seed, MaxTime: cfg.MaxTime, Done: done})
		if err != nil {
			return nil, err
		}
		es.records = res.Records
		// Timed: what the run wrote made durable.
		start := time.Now()
		err = db.e.durable(ctx)
		res.Elapsed += time.Since(start)
		var c1 time.Duration
		if cok {
			c1, cok = processCPU()
		}
		if err == nil {
			// Off the clock and off the CPU count: the settle step.
			idle, err = settle(ctx, db)
		}
		if sok && idle && err == nil {
			// The store's work, before Close ends it.
			s1, sok = storeWork(db)
		} else {
			sok = false
		}
		if c2, ok := processCPU(); cok && ok {
			c0 += c2 - c1
		}
		return res, err
	}()
	start := time.Now()
	if cerr := db.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if res != nil {
		res.Elapsed += time.Since(start)
		if c1, ok := processCPU(); ok && cok {
			res.CPU = c1 - c0
		}
		if d1, ok := workload.ProcessDiskWrites(); ok && dok && idle {
			res.DiskBytes, res.DiskMeasured = d1-d0, true
		}
		if sok {
			res.Store, res.StoreMeasured = s1.sub(s0), true
		}
	}
	return res, err
}

// settle writes a durable engine's memtables to sstables (kvbuf, pebble)
// and waits until it has no flush or compaction running or pending (idler;
// bounded by ctx), so that the next phase (the first run after the load,
// the measured run after its warm-up, the next run after a run) does not
// pay for this one's background work. idle is false if the engine cannot
// tell when its background work is done (badger), or if it was still busy
// after settleWait (workload.ErrStillBusy, which settle does not return):
// its disk figure is then left out.
func settle(ctx context.Context, db *DB) (idle bool, err error) {
	if s, ok := db.e.(interface{ flushAll(context.Context) error }); ok {
		if err := s.flushAll(ctx); err != nil {
			return false, err
		}
	}
	w, ok := db.e.(idler)
	if !ok {
		return false, nil
	}
	err = w.waitIdle(ctx)
	if errors.Is(err, workload.ErrStillBusy) {
		return false, nil
	}
	return err == nil, err
}

func workloadName(wl string) string {
	if _, ok := StandardWorkloads[strings.ToLower(wl)]; ok {
		return strings.ToLower(wl)
	}
	return strings.TrimSuffix(filepath.Base(wl), filepath.Ext(wl))
}

// runSeed is the seed of round r of a workload at a thread count: the same
// for every engine of the round.
func runSeed(seed int64, wl string, threads, r int) int64 {
	h := int64(14695981039346656037 & math.MaxInt64)
	for _, b := range []byte(fmt.Sprintf("%s/%d/%d", wl, threads, r)) {
		h = (h ^ int64(b)) * 1099511628211
	}
	return seed ^ h
}

// resolve checks cfg, fills its defaults and builds each workload's
// properties (the workload's, then cfg.Props, then recordcount and
// operationcount from cfg). All workloads must share the table and its
// fields, since they run on one loaded database.
func (cfg Config) resolve() (Config, *properties.Properties, []*properties.Properties, error) {
	if len(cfg.Engines) == 0 {
		cfg.Engines = slices.Clone(Engines)
	}
	for i, e := range cfg.Engines {
		if !slices.Contains(Engines, e) {
			return cfg, nil, nil, fmt.Errorf("%w: unknown engine %q (want some of %s)", ErrBadProperty, e, strings.Join(Engines, ","))
		}
		if slices.Contains(cfg.Engines[:i], e) {
			return cfg, nil, nil, fmt.Errorf("%w: engine %q listed twice", ErrBadProperty, e)
		}
	}
	if len(cfg.Workloads) == 0 {
		cfg.Workloads = slices.Clone(StandardOrder)
	}
	if len(cfg.Threads) == 0 {
		cfg.Threads = []int{1}
	}
	for _, t := range cfg.Threads {
		if t < 1 || t > 1024 {
			return cfg, nil, nil, fmt.Errorf("%w: %d threads: want 1 to 1024", ErrBadProperty, t)
		}
	}
	if cfg.Rounds == 0 {
		cfg.Rounds = 3
	}
	if cfg.LoadBatch == 0 {
		cfg.LoadBatch = 256
	}
	if cfg.Warmup == 0 {
		cfg.Warmup = cfg.Ops / 10
	}
	if len(cfg.Durability) == 0 {
		cfg.Durability = slices.Clone(DurabilityModes)
	}
	for i, d := range cfg.Durability {
		if !slices.Contains(DurabilityModes, d) {
			return cfg, nil, nil, fmt.Errorf("%w: durability %q (want some of %s)", ErrBadProperty, d, strings.Join(DurabilityModes, ","))
		}
		if slices.Contains(cfg.Durability[:i], d) {
			return cfg, nil, nil, fmt.Errorf("%w: durability %q listed twice", ErrBadProperty, d)
		}
	}
	if !slices.ContainsFunc(cfg.Durability, func(d string) bool { return len(modeEngines(d, cfg.Engines)) > 0 }) {
		return cfg, nil, nil, fmt.Errorf("%w: no engine of %s runs in durability %s (bbolt runs in %s only)",
			ErrBadProperty, strings.Join(cfg.Engines, ","), strings.Join(cfg.Durability, ","), DurabilityAcked)
	}
	switch {
	case cfg.Records < 1:
		return cfg, nil, nil, fmt.Errorf("%w: %d records: want at least 1", ErrBadProperty, cfg.Records)
	case cfg.Ops < 1:
		return cfg, nil, nil, fmt.Errorf("%w: %d operations: want at least 1", ErrBadProperty, cfg.Ops)
	case cfg.Rounds < 1:
		return cfg, nil, nil, fmt.Errorf("%w: %d rounds: want at least 1", ErrBadProperty, cfg.Rounds)
	case cfg.LoadBatch < 1:
		return cfg, nil, nil, fmt.Errorf("%w: load batch %d: want at least 1", ErrBadProperty, cfg.LoadBatch)
	}
	var wls []*properties.Properties
	var table, fields string
	for i, wl := range cfg.Workloads {
		p, err := WorkloadProperties(wl)
		if err != nil {
			return cfg, nil, nil, err
		}
		if cfg.Props != nil {
			p.Merge(cfg.Props)
		}
		p.MustSet(prop.RecordCount, strconv.FormatInt(cfg.Records, 10))
		p.MustSet(prop.OperationCount, strconv.FormatInt(cfg.Ops, 10))
		w, err := NewWorkload(p)
		if err != nil {
			return cfg, nil, nil, fmt.Errorf("workload %s: %w", wl, err)
		}
		for _, e := range cfg.Engines {
			if err := checkProperties(e, p); err != nil {
				return cfg, nil, nil, err
			}
		}
		shape := fmt.Sprintf("%d fields of %d bytes (%s)", w.FieldCount, w.FieldLength, w.fieldLengthDist)
		if i == 0 {
			table, fields = w.Table, shape
		} else if w.Table != table || shape != fields {
			return cfg, nil, nil, fmt.Errorf("%w: workload %s uses table %q with %s, workload %s table %q with %s: they must share the loaded table",
				ErrBadProperty, wl, w.Table, shape, cfg.Workloads[0], table, fields)
		}
		wls = append(wls, p)
	}
	return cfg, wls[0], wls, nil
}

// summarize makes the row of one engine's rounds.
func summarize(workload string, threads int, engine, mode string, rs []*Result) Row {
	row := Row{Workload: workload, Threads: threads, Engine: engine, Durability: mode, Rounds: len(rs), Ops: map[string]OpStats{}}
	var rates, cpu, disk []float64
	var diskBytes, userBytes float64
	counted, lost := false, false
	all := &Result{}
	for _, r := range rs {
		rates = append(rates, r.OpsPerSec())
		if r.CPU > 0 && r.Ops > 0 {
			cpu = append(cpu, float64(r.CPU)/float64(r.Ops))
		}
		if r.DiskMeasured && r.UserBytes > 0 {
			disk = append(disk, float64(r.DiskBytes)/float64(r.UserBytes))
			diskBytes += float64(r.DiskBytes)
			userBytes += float64(r.UserBytes)
			counted = counted || r.DiskBytes != 0
		} else if r.UserBytes > 0 {
			lost = true // a round that wrote left no figure: none for the row
		}
		if r.StoreMeasured {
			row.Store = row.Store.add(r.Store)
			row.StoreRounds++
		}
		all.merge(r)
		row.OpsPerRound = r.Ops
		row.Records = r.Records
	}
	row.RoundOpsPerSec = slices.Clone(rates)
	slices.Sort(rates)
	row.OpsPerSec = median(rates)
	row.MinOpsPerSec, row.MaxOpsPerSec = rates[0], rates[len(rates)-1]
	if len(cpu) > 0 {
		slices.Sort(cpu)
		row.CPUPerOp = time.Duration(median(cpu))
	}
	// A count that never moved is no count (tmpfs).
	if counted && !lost && diskBytes > 0 {
		row.DiskPerUserByte = diskBytes / userBytes
		row.DiskMin, row.DiskMax = slices.Min(disk), slices.Max(disk)
	}
	for op, h := range all.Latency {
		row.Ops[op] = opStats(h)
	}
	return row
}

func opStats(h *hdrhistogram.Histogram) OpStats {
	return OpStats{
		Count: h.TotalCount(),
		P50:   time.Duration(h.ValueAtQuantile(50)),
		P99:   time.Duration(h.ValueAtQuantile(99)),
		P999:  time.Duration(h.ValueAtQuantile(99.9)),
		Max:   time.Duration(h.Max()),
	}
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// speedups sets KvbufSpeedup, SpeedupMin and SpeedupMax on the rows of one
// workload and thread count: kvbuf's ops/s ÷ the engine's, round by round
// (every round ran every engine, back to back).
func speedups(rows []Row) {
	var k []float64
	for _, r := range rows {
		if r.Engine == "kvbuf" {
			k = r.RoundOpsPerSec
		}
	}
	for i := range rows {
		r := &rows[i]
		if r.Engine == "kvbuf" || len(k) == 0 {
			continue
		}
		var per []float64
		for j := range min(len(k), len(r.RoundOpsPerSec)) {
			if r.RoundOpsPerSec[j] > 0 {
				per = append(per, k[j]/r.RoundOpsPerSec[j])
			}
		}
		if len(per) == 0 {
			continue
		}
		slices.Sort(per)
		r.KvbufSpeedup, r.SpeedupMin, r.SpeedupMax = median(per), per[0], per[len(per)-1]
	}
}

// progressor reports progress from one goroutine: every 100 ms, and at
// each new label.
type progressor struct {
	fn    func(float64, string)
	total float64
	done  atomic.Int64
	mu    sync.Mutex
	cur   string
	quit  chan struct{}
	wg    sync.WaitGroup
}

func newProgressor(cfg Config) *progressor {
	p := &progressor{fn: cfg.Progress, quit: make(chan struct{})}
	if p.fn == nil {
		return p
	}
	n := 0.0
	for _, d := range cfg.Durability {
		n += float64(len(modeEngines(d, cfg.Engines)))
	}
	p.total = n*float64(cfg.Records) + n*float64(len(cfg.Workloads)*len(cfg.Threads)*cfg.Rounds)*float64(cfg.Ops+max(cfg.Warmup, 0))
	p.wg.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.quit:
				return
			case <-t.C:
				p.report()
			}
		}
	})
	return p
}

func (p *progressor) report() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fn(min(float64(p.done.Load())/max(p.total, 1), 1), p.cur)
}

func (p *progressor) label(s string) {
	if p.fn == nil {
		return
	}
	p.mu.Lock()
	p.cur = s
	p.mu.Unlock()
	p.report()
}

// emit calls fn(rows) (if fn is not nil) under the lock Progress is
// called under, so that a caller may share state between the two.
func (p *progressor) emit(fn func([]Row), rows []Row) {
	if fn == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fn(rows)
}

func (p *progressor) stop() {
	close(p.quit)
	p.wg.Wait()
}
