package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvbuf/kvbuf/internal/workload"
)

// Implementation names used in rows (impl in kvtool bench --json;
// doc/workloads.md says what each is). Rows whose name is "kvbuf" or starts
// with "kvbuf-" are the project's own (IsOwn): they get RatioVs against
// every other row of their workload.
const (
	ImplKvbuf            = "kvbuf"
	ImplKvbufGetMany     = "kvbuf-getmany"         // GetMany in batches of 64
	ImplKvbufDefault     = "kvbuf-default-options" // an engine opened with nil Options
	ImplKvbufSinglePuts  = "kvbuf-single-puts"     // W8: 64 KV.Put calls instead of one Apply
	ImplKvbufFlushOnly   = "kvbuf-flush-only"      // W6: the Flush alone, the writes before it untimed
	ImplRaw              = "raw"
	ImplMutexMap         = "mutex+map"
	ImplRWMutexMap       = "rwmutex+map"
	ImplSyncMap          = "sync.Map"
	ImplXsyncMap         = "xsync.Map"
	ImplRWMutexWords     = "rwmutex+words" // W1: dense mask/value words behind a sync.RWMutex
	ImplAtomicWords      = "atomic-words"  // W1: dense mask/value words updated atomically
	ImplRWMutexBTree     = "rwmutex+btree" // a tidwall/btree generic B-tree behind a sync.RWMutex
	ImplPebbleGet        = "pebble-get"
	ImplPebbleBatch      = "pebble-indexed-batch"
	ImplMapPebble        = "rwmutex+map+pebble"
	ImplMapPebbleNoCopy  = "rwmutex+map+pebble-no-copy"
	ImplMapPebbleBatched = "rwmutex+map+pebble-64-per-lock" // one RLock per 64 keys, as GetMany
	ImplBTreePebble      = "rwmutex+btree+pebble"
	ImplMutexMapPebble   = "mutex+map+pebble"
	ImplPerCallerSync    = "per-caller-sync"
	ImplSingleflight     = "singleflight"         // x/sync/singleflight: incorrect by design
	ImplGroupCommit      = "careful-group-commit" // waits out a flush frozen before the caller's write
	ImplPebbleBatchSync  = "pebble-batch-sync"    // one synced batch per round, memtable = the engine's pending budget
	ImplPebbleSortedSync = "pebble-batch-sync-sorted-input"
	ImplFileSetLoop      = "file-set-loop+msync"        // W6: one bitslice.File.Set per change
	ImplApplyWords       = "apply-words+msync"          // W6: File.ApplyWords of words coalesced untimed
	ImplCoalesceApply    = "coalesce+apply-words+msync" // W6: coalescing into words timed too
	ImplPwriteWords      = "pwrite-words+sync"          // W6: workload.PwriteWords of words coalesced untimed
	ImplCoalescePwrite   = "coalesce+pwrite-words+sync" // W6: coalescing into words timed too, then PwriteWords
	ImplPebbleNoSync     = "pebble-batch-nosync"
	ImplGetLoop          = "get-loop"          // W1 count/ones: a loop of Bits.Get
	ImplDeleteLoop       = "delete-loop"       // W8 delete-1m: a loop of KV.Delete, then Flush
	ImplWithoutSnapshots = "without-snapshots" // the same reads on a twin engine with no snapshot

	// The pebble baselines of the write workloads (doc/workloads.md,
	// "Fairness"; pebble_baselines.go). Without a suffix a baseline's
	// memtable is the pending budget of the engine it races;
	// "…-store-memtable" rows use the engine store's own memtable. The
	// block cache is the engine's in both.
	ImplPebbleBatchSyncStoreMT  = "pebble-batch-sync-store-memtable"     // one synced batch per round
	ImplPebbleLogSync           = "pebble-nosync+logsync"                // NoSync writes, a synced LogData every FlushInterval and at the end
	ImplPebbleLogSyncStoreMT    = "pebble-nosync+logsync-store-memtable" // the same, the store's memtable
	ImplPebbleNoWALFlush        = "pebble-nowal+flush"                   // DisableWAL, DB.Flush every FlushInterval and at the end
	ImplPebbleNoWALFlushStoreMT = "pebble-nowal+flush-store-memtable"    // the same, the store's memtable
	ImplPebbleDeleteRangeSync   = "pebble-deleterange+sync"              // W8 delete-1m: one DB.DeleteRange committed with sync
	ImplMapArena                = "mutex+map+arena"                      // W8: a map sized once, cleared each round, keys and values in an arena
	ImplBTreeArena              = "rwmutex+btree+arena"                  // W8: a B-tree cleared each round, keys and values in an arena
	ImplMapPebbleBatchSync      = "mutex+map+pebble-batch-sync"          // W8: an arena map coalescing the puts, then one synced pebble batch
	ImplKvbufOneBatch           = "kvbuf-one-batch"                      // W6: every put in one Batch (one DB.Apply), then Flush
)

// DefaultRounds is the number of measured rounds kvtool bench runs per
// workload by default (after one warm-up round): enough for a median with
// a meaningful min–max.
const DefaultRounds = 7

// NoisyRatio flags a row whose slowest round took more than this many
// times its fastest (Row.Noisy): its median should not be trusted to a
// few percent.
const NoisyRatio = 1.5

// ErrBadConfig is returned for a Config or argument out of range.
var ErrBadConfig = errors.New("bench: bad configuration")

// ErrMismatch is returned by Workload.Run when two implementations give
// different answers for the same inputs: the comparison would be
// meaningless.
var ErrMismatch = errors.New("bench: implementations disagree")

// ErrReadBack is returned by Workload.Run when a write row reads back,
// after its round, a value other than the one it wrote (or finds a key it
// wrote missing, or a deleted key present): an implementation that
// dropped or mangled writes would otherwise be timed as if it had done the
// work.
var ErrReadBack = errors.New("bench: a write row read back something other than what it wrote")

// Looper is an implementation of a lookup-style workload. Loop runs
// operations [lo, hi) of a round in one plain loop, as goroutine g of the
// round (0 when the round runs in one goroutine), and returns its check sum
// (for lookups: bits found set, keys found, ...). The harness calls it once
// per round and goroutine, never once per operation: near the floor an
// indirect call per operation costs more than the difference being
// measured.
type Looper interface {
	Loop(g, lo, hi int) (checks int64, err error)
}

// ReadBacker is implemented by a Looper that writes (W3's churn): after
// each round the harness calls ReadBack, not timed, and the Looper reads
// back what the round left (a sample of it, or all of it: Config.ReadBack)
// and returns how many values it checked, or an error wrapping ErrReadBack
// for one that differs from what it wrote. A Rounder that writes reads
// back inside its round instead, after its timed part, and reports the
// count in RoundResult.ReadBack.
type ReadBacker interface {
	ReadBack(ctx context.Context) (checked int64, err error)
}

// Rounder is an implementation that runs whole rounds itself (flushes,
// writes under load, ...). goroutines is the workload's goroutine count
// for parallel workloads, else 1.
type Rounder interface {
	Round(ctx context.Context, goroutines int) (RoundResult, error)
}

// RoundFunc adapts a function to Rounder.
type RoundFunc func(ctx context.Context, goroutines int) (RoundResult, error)

// Round implements Rounder.
func (f RoundFunc) Round(ctx context.Context, goroutines int) (RoundResult, error) {
	return f(ctx, goroutines)
}

// Impl is one row of a workload: an implementation and how to run it.
// Exactly one of Loop and Round is set.
type Impl struct {
	// Name is the canonical implementation name (ImplKvbuf, ImplRaw, …).
	Name string

	// Floor marks a lower bound that does not do the same work (raw
	// bitslice and pebble-get read without the pending changes): its
	// answers differ from the others, so the cross-check skips it.
	Floor bool

	// Loop runs Workload.Ops operations per round.
	Loop Looper
	// Round runs whole rounds.
	Round Rounder

	// BytesPerEntry is a memory figure measured at setup and reported on
	// the row: live heap bytes per pending entry (W2). AccountedBytes is
	// the engine's own figure (Metrics.PendingBytes / PendingKeys).
	BytesPerEntry, AccountedBytes float64

	// Label, if not empty, says why the row does not meet the fairness
	// rule of doc/workloads.md (LabelWriteOnly, LabelComponent): its
	// ratios are not headlines, and every output prints it beside them.
	// Workload.Label labels every row of a workload at once.
	Label string
}

// Labels of rows that do not meet the fairness rule (doc/workloads.md,
// "Fairness"): what they leave out. A row with a label is never a
// headline; scripts/benchtable prints it apart, with the label.
const (
	// LabelWriteOnly: the writes are timed, what makes them durable is
	// not (kvbuf's flush, pebble's sync).
	LabelWriteOnly = "write only, durability not included"
	// LabelComponent: one part of the work is timed and another part,
	// different on each side, is not (W6's Flush with the writes before
	// it off the clock, against a synced batch of presorted keys).
	LabelComponent = "component: part of the work off the clock"
	// LabelBreaksDurability: a baseline that does less than the rule
	// asks by design (W4's singleflight returns from Flush before the
	// caller's write is durable: its violations).
	LabelBreaksDurability = "breaks durability by design (violations)"
)

// RoundResult describes one round of an implementation.
type RoundResult struct {
	// Ops is the number of operations the round did.
	Ops int
	// Checks is the round's answer: Run fails if two non-floor
	// implementations of a workload (without NoCheck) disagree.
	Checks int64
	// Elapsed is the timed part of the round; zero means the harness's
	// wall-clock time of the whole Round call.
	Elapsed time.Duration

	// W4: Flush calls, physical syncs they caused, coverage violations
	// (a Flush that returned nil before the caller's own write was
	// durable) and the latency of every Flush call.
	Flushes, Syncs, Violations int64
	FlushLatencies             []time.Duration

	// W7: reads and writes done while the reader ran, and sampled
	// latencies: reads, reads that started while a flush was running,
	// writes.
	Reads, Writes                                     int64
	ReadLatencies, ReadFlushLatencies, WriteLatencies []time.Duration

	// BytesPerEntry is a per-round memory figure (live heap per entry or
	// per instance) and AccountedBytes the engine's own per-entry figure;
	// the row reports their medians.
	BytesPerEntry, AccountedBytes float64

	// Mallocs and AllocBytes, if MallocsMeasured, are the allocations of
	// the timed part (see Timed); otherwise the harness counts those of the
	// whole Round.
	Mallocs, AllocBytes uint64
	MallocsMeasured     bool

	// CPU, if CPUMeasured, is the user+system CPU time the whole process
	// used during the timed part (Timed sets both): every goroutine's,
	// background flushes and pebble's own goroutines included. Otherwise
	// the harness measures the whole Round.
	CPU         time.Duration
	CPUMeasured bool

	// W11: the engines' puts in the round once the budget was full, least
	// and most, over their mean (1 for every engine alike); the engines'
	// mean put latency then, least and most, over the mean of every put;
	// the peak of the memory budget's total over its size; and the mean
	// generation the budget forced in the round over its size.
	EngineMinShare, EngineMaxShare, EngineMinLat, EngineMaxLat, BudgetPeak, BudgetGen float64

	// ReadBack is the number of written values the round read back, after
	// its timed part, and found as written (a Rounder of a Writes workload
	// must report at least one; a mismatch is an error wrapping
	// ErrReadBack instead).
	ReadBack int64

	// DiskBytes, if DiskMeasured, is what the process wrote to disk
	// (workload.ProcessDiskWrites) from the start of the round to the end
	// of the workload's settle step after it: the whole round, its untimed
	// parts and every goroutine included. The harness sets both, for a
	// workload with UserBytesPerOp; a Round leaves them alone.
	DiskBytes    int64
	DiskMeasured bool
	// diskLost is set by the harness when the round's quiesce or settle
	// step found a store still busy at its deadline
	// (workload.ErrStillBusy): background work the round caused may land
	// after the count, or work before it inside it, so the row reports no
	// disk figure.
	diskLost bool
	// stillBusy is set by the harness, whether or not the round counts
	// disk writes, when its quiesce or settle step found a store still
	// busy at its deadline (Row.BusyRounds).
	stillBusy bool
}

// Timed runs f as a timed part of a round: it adds f's wall time to
// res.Elapsed, the process's CPU time meanwhile to res.CPU and the
// allocations made meanwhile to res.Mallocs, so that untimed preparation
// (making a million changes pending before timing their flush) and the
// read-back after it are left out of all three. A round may call it
// several times.
func Timed(res *RoundResult, f func() error) error {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	c0, cok := processCPU()
	start := time.Now()
	err := f()
	res.Elapsed += time.Since(start)
	if c1, ok := processCPU(); ok && cok {
		res.CPU += c1 - c0
		res.CPUMeasured = true
	}
	runtime.ReadMemStats(&m1)
	res.Mallocs += m1.Mallocs - m0.Mallocs
	res.AllocBytes += m1.TotalAlloc - m0.TotalAlloc
	res.MallocsMeasured = true
	return err
}

// Workload is one named workload of a Suite, with its implementations.
type Workload struct {
	// Name is the canonical workload name, e.g. "W1/lookup-with-pending-changes".
	Name string
	// Unit is what one operation is ("lookup", "get", "scan", "write+flush", ...).
	Unit string
	// Ops is the number of operations of a Loop round.
	Ops int
	// Parallel workloads run at any goroutine count (kvtool bench --cpu);
	// the others always run in their own fixed configuration.
	Parallel bool
	// NoCheck skips the answer cross-check (W7: what a reader finds
	// depends on how far the writer got).
	NoCheck bool
	// Writes marks a workload whose rows write: every non-floor row must
	// read back what each round wrote (RoundResult.ReadBack, or a Looper's
	// ReadBacker) or Run fails.
	Writes bool
	// Label, if not empty, labels every row of the workload (see
	// Impl.Label).
	Label string
	// UserBytesPerOp is the user data one operation carries
	// (doc/workloads.md, "Disk writes per user byte"): the bytes of the
	// keys and values it writes, or one bit per bit Set (bits ÷ 8). Above
	// zero, every row reports the bytes the process wrote to disk per byte
	// of user data (Row.DiskPerUserByte); zero: no disk figure.
	UserBytesPerOp float64
	// Impls are the rows, the project's own first.
	Impls []Impl

	prepare  func(ctx context.Context) error // brings shared state to what this workload measures
	prepared bool
	// quiesce, if set, runs (untimed) before every round of every
	// implementation: it lets the stores' background work caused by the
	// previous round (memtable flushes, compactions) finish, so that one
	// implementation's round does not pay for another's.
	quiesce func(ctx context.Context) error
	// settle, if set, runs (untimed) after every round of every
	// implementation of a workload with UserBytesPerOp, before the disk
	// count is read: it makes the stores finish the work the round's
	// writes left them (memtables flushed to sstables, compactions
	// waited out), so that the round is charged for it and the next one
	// is not.
	settle func(ctx context.Context) error
	suite  *Suite
}

// NameAt is the row name of w run in g goroutines: Name, with "-cpuG"
// appended for a parallel workload run in more than one.
func (w *Workload) NameAt(g int) string {
	if !w.Parallel || g <= 1 {
		return w.Name
	}
	return w.Name + "-cpu" + strconv.Itoa(g)
}

// Prepare brings the suite's shared state to what w measures (for
// W1/lookup-with-pending-changes: the second million Sets, left pending),
// running first the prepare steps of every earlier workload of its suite
// that has not run. Each step runs at most once; Run calls Prepare.
func (w *Workload) Prepare(ctx context.Context) error {
	if w.suite != nil {
		for _, e := range w.suite.Workloads {
			if e == w {
				break
			}
			if err := e.prepareSelf(ctx); err != nil {
				return err
			}
		}
	}
	return w.prepareSelf(ctx)
}

func (w *Workload) prepareSelf(ctx context.Context) error {
	if w.prepared {
		return nil
	}
	if w.prepare != nil {
		if err := w.prepare(ctx); err != nil {
			return fmt.Errorf("bench: prepare %s: %w", w.Name, err)
		}
	}
	w.prepared = true
	return nil
}

// Row is the result of one implementation in one workload.
type Row struct {
	Workload string
	Impl     string
	Floor    bool
	// Label, if not empty, says why the row is not a headline (Impl.Label
	// or Workload.Label).
	Label string
	// Unit is what one operation is; Goroutines how many ran the round.
	Unit       string
	Goroutines int
	// Rounds is the number of rounds measured (after one warm-up round);
	// OpsPerRound the operations in each.
	Rounds, OpsPerRound int
	// NsPerOp holds each round's nanoseconds per operation (wall time ÷
	// operations, all goroutines together), in round order.
	NsPerOp []float64
	// Median, Min and Max summarise NsPerOp.
	Median, Min, Max float64
	// Noisy is set when Max > NoisyRatio × Min: the rounds disagree by more
	// than the difference a ratio of medians can be trusted for.
	Noisy bool
	// CPUNsPerOp holds each round's user+system CPU nanoseconds per
	// operation (getrusage over the timed part: the whole process, every
	// goroutine and core), in round order; CPUPerOp is their median. Both
	// are empty or 0 where getrusage does not exist.
	CPUNsPerOp []float64
	CPUPerOp   float64
	// DiskBytesPerUserByte holds each round's bytes written to disk by the
	// process (RoundResult.DiskBytes: the round and the settle step after
	// it) over the user data its operations carried
	// (Workload.UserBytesPerOp × operations), in round order.
	// DiskPerUserByte is over all rounds: their disk bytes summed over
	// their user bytes summed (not a median of the per-round figures,
	// which flips between two values when a compaction lands every other
	// round); the per-round figures give its spread. Both are empty or 0
	// where a round's quiesce or settle step found a store still busy at
	// its deadline (workload.ErrStillBusy), where the
	// workload has no UserBytesPerOp, the system keeps no count, or no row
	// of the workload counted a byte (a file system that does not count,
	// such as tmpfs).
	DiskBytesPerUserByte []float64
	DiskPerUserByte      float64
	// BusyRounds is the number of measured rounds whose quiesce step
	// (before the round: it may have been timed while a store flushed or
	// compacted) or settle step (after it: its disk figure is left out,
	// and the next round may start during that work) found a store still
	// busy at its deadline (workload.ErrStillBusy), in every row, with or
	// without a disk figure. Zero: every step found its stores idle.
	BusyRounds int
	// AllocsPerOp is the median over rounds of allocations per operation.
	AllocsPerOp float64
	// Ratios (own rows only) maps each other row of the workload to its
	// time over this row's, per round (see Ratio): above 1 means this row
	// is faster. RatioVs holds the same medians alone.
	Ratios  map[string]Ratio
	RatioVs map[string]float64
	// ReadBack is the number of written values read back and found as
	// written over every measured round (write workloads).
	ReadBack int64

	// BytesPerEntry: live heap bytes per pending entry (W2) or per
	// instance (W3 construct); AccountedBytesPerEntry: the engine's
	// PendingBytes ÷ PendingKeys (W2 kvbuf rows). Zero when not measured.
	BytesPerEntry, AccountedBytesPerEntry float64

	// W4 (Flushes > 0): Flush calls, physical syncs, coverage violations,
	// Flush latency percentiles over every round.
	Flushes, Syncs, Violations          int64
	P50FlushNs, P99FlushNs, P999FlushNs float64
	// W7 (ReadsPerSec > 0): medians over rounds of reader and writer
	// throughput, and latency percentiles over every sampled operation.
	ReadsPerSec, WritesPerSec                        float64
	P50ReadNs, P99ReadNs, P99ReadFlushNs, P99WriteNs float64
	// W11 (BudgetPeak > 0): over every round, the least and the most puts
	// an engine made over the mean, the least and the most mean put
	// latency of an engine over the mean of every put, the peak of the memory budget's total
	// over its size, the smallest mean generation the budget forced in a
	// round over its size, and the most the total passed the size in a
	// round, in that round's mean forced generations (the target: at most
	// 1).
	EngineMinShare, EngineMaxShare, EngineMinLat, EngineMaxLat, BudgetPeak, BudgetGen, BudgetOverGen float64
}

// Ratio compares a baseline row with an own row of the same run round by
// round: in every measured round both ran (in the order the rotation
// gave them), and PerRound holds the baseline's time per operation ÷ the
// own row's in that round, so that a load that slowed one round slows
// both sides of its ratio. Median, Min and Max summarise PerRound; Noisy
// is set when Max > NoisyRatio × Min. CPU is the median of the per-round
// ratios of CPU time per operation (0 when CPU time is not measured), Disk
// the ratio of the two rows' bytes written to disk per user byte over all
// rounds (Row.DiskPerUserByte; 0 when not measured or either is not
// positive).
type Ratio struct {
	PerRound         []float64
	Median, Min, Max float64
	Noisy            bool
	CPU, Disk        float64
}

// SyncsPerFlush is Syncs ÷ Flushes, or 0 when there were no flushes.
func (r Row) SyncsPerFlush() float64 {
	if r.Flushes == 0 {
		return 0
	}
	return float64(r.Syncs) / float64(r.Flushes)
}

// RoundOrder returns the order in which round r (from 0) runs n
// implementations, as indexes into Workload.Impls: row r mod m of a
// Williams design (m = n for an even n, 2n for an odd one). Its first n
// rows form a Latin square, so that in any n consecutive rounds from a
// multiple of n every implementation runs once at every position; over m
// rounds every implementation also runs right after every other one
// equally often, so that neither a position nor a predecessor (its
// garbage, its store's leftover work, a warm cache) favours one row.
func RoundOrder(n, r int) []int {
	if n <= 0 {
		return nil
	}
	first := make([]int, n) // 0, 1, n-1, 2, n-2, ...
	lo, hi := 1, n-1
	for j := 1; j < n; j++ {
		if j%2 == 1 {
			first[j], lo = lo, lo+1
		} else {
			first[j], hi = hi, hi-1
		}
	}
	m := n
	if n%2 == 1 {
		m = 2 * n
	}
	k := r % m
	out := make([]int, n)
	for j := range n {
		out[j] = (first[j] + k) % n
	}
	if k >= n { // odd n: the second square is the first one reversed
		slices.Reverse(out)
	}
	return out
}

// Run prepares w, runs one warm-up round of every implementation (in Impls
// order, not measured), then rounds measured rounds; round r runs the
// implementations in the order RoundOrder(len(Impls), r) gives, so that
// with rounds >= len(Impls) every implementation runs at every position.
// A parallel workload runs each round in goroutines goroutines (at least
// 1; others ignore it). step, if not nil, is called after each
// implementation's round, with round -1 for the warm-up. ctx is checked
// between rounds. It returns one Row per implementation, in Impls order.
func (w *Workload) Run(ctx context.Context, rounds, goroutines int, step func(impl string, round int)) ([]Row, error) {
	if err := w.check(rounds); err != nil {
		return nil, err
	}
	if !w.Parallel || goroutines < 1 {
		goroutines = 1
	}
	if err := w.Prepare(ctx); err != nil {
		return nil, err
	}
	if step == nil {
		step = func(string, int) {}
	}
	n := len(w.Impls)
	name := w.NameAt(goroutines)
	rows := make([]Row, n)
	samples := make([]rowSamples, n)
	for k, im := range w.Impls {
		label := im.Label
		if label == "" {
			label = w.Label
		}
		rows[k] = Row{Workload: name, Impl: im.Name, Floor: im.Floor, Label: label, Unit: w.Unit, Goroutines: goroutines, Rounds: rounds,
			BytesPerEntry: im.BytesPerEntry, AccountedBytesPerEntry: im.AccountedBytes}
	}
	// Warm-up: every implementation runs one round first, in order.
	for _, im := range w.Impls {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if _, _, err := w.measure(ctx, im, goroutines); err != nil {
			return nil, fmt.Errorf("bench: %s/%s warm-up: %w", name, im.Name, err)
		}
		step(im.Name, -1)
	}
	for r := range rounds {
		var checkImpl string
		var check int64
		checked := false
		for _, k := range RoundOrder(n, r) {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			im := w.Impls[k]
			res, allocs, err := w.measure(ctx, im, goroutines)
			if err != nil {
				return nil, fmt.Errorf("bench: %s/%s round %d: %w", name, im.Name, r, err)
			}
			if !w.NoCheck && !im.Floor {
				if checked && res.Checks != check {
					return nil, fmt.Errorf("%w: %s round %d: %s counted %d, %s counted %d",
						ErrMismatch, name, r, checkImpl, check, im.Name, res.Checks)
				}
				check, checkImpl, checked = res.Checks, im.Name, true
			}
			samples[k].add(&rows[k], res, allocs, w.UserBytesPerOp)
			step(im.Name, r)
		}
	}
	for k := range rows {
		samples[k].summarize(&rows[k])
	}
	dropUncountedDisk(rows)
	AddRatios(rows)
	return rows, nil
}

// check validates w and a round count before Run.
func (w *Workload) check(rounds int) error {
	if rounds <= 0 {
		return fmt.Errorf("%w: %d rounds", ErrBadConfig, rounds)
	}
	if len(w.Impls) == 0 {
		return fmt.Errorf("%w: workload %s has no implementations", ErrBadConfig, w.Name)
	}
	for _, im := range w.Impls {
		if (im.Loop == nil) == (im.Round == nil) {
			return fmt.Errorf("%w: implementation %s of %s needs exactly one of Loop and Round", ErrBadConfig, im.Name, w.Name)
		}
	}
	return nil
}

// rowSamples collects one implementation's figures over the measured
// rounds of a Run.
type rowSamples struct {
	allocs, mem, acct, reads, writes []float64
	// diskBytes and userBytes sum the measured rounds' disk writes and
	// user bytes; diskLost is set when a round's disk figure was lost
	// (RoundResult.diskLost).
	diskBytes, userBytes                      float64
	diskLost                                  bool
	flushLat, readLat, readFlushLat, writeLat []time.Duration
}

// add records one round: its time per operation and counters on row, the
// rest in s. allocs is the round's allocation count, userBytes the
// workload's UserBytesPerOp.
func (s *rowSamples) add(row *Row, res RoundResult, allocs, userBytes float64) {
	ops := max(res.Ops, 1)
	row.OpsPerRound = res.Ops
	row.NsPerOp = append(row.NsPerOp, float64(res.Elapsed.Nanoseconds())/float64(ops))
	if res.CPUMeasured {
		row.CPUNsPerOp = append(row.CPUNsPerOp, float64(res.CPU.Nanoseconds())/float64(ops))
	}
	if res.DiskMeasured && userBytes > 0 {
		row.DiskBytesPerUserByte = append(row.DiskBytesPerUserByte, float64(res.DiskBytes)/(float64(ops)*userBytes))
		s.diskBytes += float64(res.DiskBytes)
		s.userBytes += float64(ops) * userBytes
	}
	s.diskLost = s.diskLost || res.diskLost
	if res.stillBusy {
		row.BusyRounds++
	}
	row.ReadBack += res.ReadBack
	if res.BudgetPeak > 0 {
		if row.BudgetPeak == 0 { // the first round
			row.EngineMinShare, row.EngineMinLat = res.EngineMinShare, res.EngineMinLat
		}
		row.EngineMinShare = min(row.EngineMinShare, res.EngineMinShare)
		row.EngineMinLat = min(row.EngineMinLat, res.EngineMinLat)
		row.EngineMaxShare = max(row.EngineMaxShare, res.EngineMaxShare)
		row.EngineMaxLat = max(row.EngineMaxLat, res.EngineMaxLat)
		row.BudgetPeak = max(row.BudgetPeak, res.BudgetPeak)
		if res.BudgetGen > 0 {
			if row.BudgetGen == 0 || res.BudgetGen < row.BudgetGen {
				row.BudgetGen = res.BudgetGen
			}
			row.BudgetOverGen = max(row.BudgetOverGen, (res.BudgetPeak-1)/res.BudgetGen)
		}
	}
	row.Flushes += res.Flushes
	row.Syncs += res.Syncs
	row.Violations += res.Violations
	s.allocs = append(s.allocs, allocs/float64(ops))
	if res.BytesPerEntry != 0 {
		s.mem = append(s.mem, res.BytesPerEntry)
	}
	if res.AccountedBytes != 0 {
		s.acct = append(s.acct, res.AccountedBytes)
	}
	if res.Reads > 0 && res.Elapsed > 0 {
		s.reads = append(s.reads, float64(res.Reads)/res.Elapsed.Seconds())
		s.writes = append(s.writes, float64(res.Writes)/res.Elapsed.Seconds())
	}
	s.flushLat = append(s.flushLat, res.FlushLatencies...)
	s.readLat = append(s.readLat, res.ReadLatencies...)
	s.readFlushLat = append(s.readFlushLat, res.ReadFlushLatencies...)
	s.writeLat = append(s.writeLat, res.WriteLatencies...)
}

// summarize sets row's medians, extremes and percentiles.
func (s *rowSamples) summarize(row *Row) {
	row.Median = Median(row.NsPerOp)
	row.Min = slices.Min(row.NsPerOp)
	row.Max = slices.Max(row.NsPerOp)
	row.Noisy = row.Max > NoisyRatio*row.Min
	row.CPUPerOp = Median(row.CPUNsPerOp)
	row.DiskPerUserByte = 0
	if s.diskLost {
		row.DiskBytesPerUserByte = nil
	} else if s.userBytes > 0 {
		row.DiskPerUserByte = s.diskBytes / s.userBytes
	}
	row.AllocsPerOp = Median(s.allocs)
	if len(s.mem) > 0 {
		row.BytesPerEntry = Median(s.mem)
	}
	if len(s.acct) > 0 {
		row.AccountedBytesPerEntry = Median(s.acct)
	}
	if len(s.flushLat) > 0 {
		row.P50FlushNs = workload.Percentile(s.flushLat, 0.50)
		row.P99FlushNs = workload.Percentile(s.flushLat, 0.99)
		row.P999FlushNs = workload.Percentile(s.flushLat, 0.999)
	}
	if len(s.reads) > 0 {
		row.ReadsPerSec = Median(s.reads)
		row.WritesPerSec = Median(s.writes)
	}
	row.P50ReadNs = workload.Percentile(s.readLat, 0.50)
	row.P99ReadNs = workload.Percentile(s.readLat, 0.99)
	row.P99ReadFlushNs = workload.Percentile(s.readFlushLat, 0.99)
	row.P99WriteNs = workload.Percentile(s.writeLat, 0.99)
}

// dropUncountedDisk clears the disk figures of every row of a run when no
// round of any of them counted a byte: the directory's file system keeps
// no count (tmpfs), and zeros would be invented figures.
func dropUncountedDisk(rows []Row) {
	for _, r := range rows {
		for _, d := range r.DiskBytesPerUserByte {
			if d != 0 {
				return
			}
		}
	}
	for k := range rows {
		rows[k].DiskBytesPerUserByte, rows[k].DiskPerUserByte = nil, 0
	}
}

// measure runs one round of im after quiescing the stores (if the workload
// says how) and a GC (so that one implementation's garbage is not
// collected on another's time) and returns it with the number of
// allocations made during it (runtime.MemStats.Mallocs: every goroutine of
// the process, pebble's background work included). A Looper that writes
// reads back after the timed loop; a write row that read nothing back is
// an error. For a workload with UserBytesPerOp it counts the bytes the
// process writes to disk from just before the round to the end of the
// settle step it runs after it (RoundResult.DiskBytes).
func (w *Workload) measure(ctx context.Context, im Impl, goroutines int) (RoundResult, float64, error) {
	lost := false
	if w.quiesce != nil {
		if err := w.quiesce(ctx); errors.Is(err, workload.ErrStillBusy) {
			lost = true
		} else if err != nil {
			return RoundResult{}, 0, fmt.Errorf("quiesce: %w", err)
		}
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	var res RoundResult
	var err error
	var d0 int64
	dok := false
	if w.UserBytesPerOp > 0 {
		d0, dok = workload.ProcessDiskWrites()
	}
	c0, cok := processCPU()
	start := time.Now()
	if im.Round != nil {
		res, err = im.Round.Round(ctx, goroutines)
	} else {
		res.Checks, err = RunLoop(im.Loop, 0, w.Ops, goroutines)
		res.Ops = w.Ops
	}
	elapsed := time.Since(start)
	c1, cok1 := processCPU()
	runtime.ReadMemStats(&m1)
	if err != nil {
		return res, 0, err
	}
	if res.Elapsed <= 0 {
		res.Elapsed = elapsed
	}
	if !res.CPUMeasured && cok && cok1 {
		res.CPU, res.CPUMeasured = c1-c0, true
	}
	if rb, ok := im.Loop.(ReadBacker); ok {
		if res.ReadBack, err = rb.ReadBack(ctx); err != nil {
			return res, 0, err
		}
	}
	if w.Writes && !im.Floor && res.ReadBack <= 0 {
		return res, 0, fmt.Errorf("%w: write row %s of %s read nothing back", ErrBadConfig, im.Name, w.Name)
	}
	if dok {
		if w.settle != nil {
			if err := w.settle(ctx); errors.Is(err, workload.ErrStillBusy) {
				lost = true
			} else if err != nil {
				return res, 0, fmt.Errorf("settle: %w", err)
			}
		}
		d1, ok := workload.ProcessDiskWrites()
		res.DiskBytes, res.DiskMeasured = d1-d0, ok && !lost
		res.diskLost = lost
	}
	res.stillBusy = lost
	if res.MallocsMeasured {
		return res, float64(res.Mallocs), nil
	}
	return res, float64(m1.Mallocs - m0.Mallocs), nil
}

// RunLoop runs operations [lo, hi) of l in goroutines goroutines, each
// over its own contiguous part, and returns the sum of their checks (the
// same as one goroutine's over the whole range). One goroutine runs on the
// caller's.
func RunLoop(l Looper, lo, hi, goroutines int) (int64, error) {
	if goroutines <= 1 {
		return l.Loop(0, lo, hi)
	}
	sums := make([]int64, goroutines)
	errs := make([]error, goroutines)
	var wg sync.WaitGroup
	n := hi - lo
	for g := range goroutines {
		wg.Go(func() {
			sums[g], errs[g] = l.Loop(g, lo+g*n/goroutines, lo+(g+1)*n/goroutines)
		})
	}
	wg.Wait()
	var sum int64
	for _, s := range sums {
		sum += s
	}
	return sum, errors.Join(errs...)
}

// IsOwn reports whether impl is one of the project's own rows ("kvbuf" or
// "kvbuf-…") rather than a baseline.
func IsOwn(impl string) bool { return impl == ImplKvbuf || strings.HasPrefix(impl, ImplKvbuf+"-") }

// AddRatios sets Ratios and RatioVs on every own row: for each baseline
// row of the same workload, the ratio of the baseline's time per operation
// to the own row's in each round they both have (rows of one Run hold
// their rounds in the same order), summarised (see Ratio).
func AddRatios(rows []Row) {
	for k := range rows {
		own := &rows[k]
		if !IsOwn(own.Impl) || own.Median <= 0 {
			continue
		}
		own.Ratios, own.RatioVs = map[string]Ratio{}, map[string]float64{}
		for _, o := range rows {
			if o.Workload != own.Workload || IsOwn(o.Impl) {
				continue
			}
			ra := pairRatio(o, *own)
			if len(ra.PerRound) == 0 {
				continue
			}
			own.Ratios[o.Impl] = ra
			own.RatioVs[o.Impl] = ra.Median
		}
	}
}

// pairRatio returns base's ratios to own, round by round.
func pairRatio(base, own Row) Ratio {
	var ra Ratio
	var cpu []float64
	for r := range min(len(base.NsPerOp), len(own.NsPerOp)) {
		if own.NsPerOp[r] <= 0 {
			continue
		}
		ra.PerRound = append(ra.PerRound, base.NsPerOp[r]/own.NsPerOp[r])
		if r < len(base.CPUNsPerOp) && r < len(own.CPUNsPerOp) && own.CPUNsPerOp[r] > 0 {
			cpu = append(cpu, base.CPUNsPerOp[r]/own.CPUNsPerOp[r])
		}
	}
	if len(ra.PerRound) == 0 {
		return ra
	}
	ra.Median = Median(ra.PerRound)
	ra.Min, ra.Max = slices.Min(ra.PerRound), slices.Max(ra.PerRound)
	ra.Noisy = ra.Max > NoisyRatio*ra.Min
	ra.CPU = Median(cpu)
	if base.DiskPerUserByte > 0 && own.DiskPerUserByte > 0 {
		ra.Disk = base.DiskPerUserByte / own.DiskPerUserByte
	}
	return ra
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
