// Package bench implements the benchmark workloads of doc/workloads.md —
// the kvbuf engine and every baseline — as ordinary Go code, so that
// `kvtool bench` (a thin wrapper over it) and the `go test -bench`
// functions in this package time exactly the same loops.
//
// It drives kvbuf through its public API only, as a user would: engines
// opened with kvbuf.Open, their keyspaces and bitslices, DB.Flush,
// DB.Watermark and DB.Metrics. The baselines use the public packages
// underneath where a user would (bitslice.File for the raw bit vector,
// storage.Store for W4's baselines) and raw pebble databases opened with
// storage.PebbleOptions, the engine store's configuration, holding their
// keys in the store's documented key layout.
//
// A Suite is one workload family (W1, W2, W2-memory, W3, W4, W6, W7, W8, W10)
// set up once on real files in a directory. Its Workloads share that
// setup; each has the canonical name from doc/workloads.md and one Impl per
// row (impl "kvbuf" and the baselines "raw", "mutex+map", …).
//
// # How an implementation runs a round
//
// An implementation runs the round's loop itself: a Looper's Loop(g, lo,
// hi) goes over operations [lo, hi) in one plain loop with the lookup (or
// write) inline, and the harness calls it once per round and goroutine, so
// no closure or interface call is paid per operation (near the floor such
// a call costs more than the difference being measured). A parallel
// workload (W1 and W2 lookups, W3) splits a round's operations into
// contiguous parts, one per goroutine. A Rounder runs a whole round itself
// and reports its timed part through Timed (W4 flush loops, W6 flushes
// whose changes may be made pending untimed, W7 reads under write load, W8
// batches, memory rows).
//
// Workload.Run runs one warm-up round of every implementation (in order,
// not measured), then the measured rounds, round r in the order of row r of
// a Williams design (RoundOrder: in n rounds every implementation runs once
// at every position, and each runs right after each other one equally
// often), with a garbage collection before every implementation's round.
// It returns one Row per implementation with the median, minimum and
// maximum time per operation, a Noisy flag when the maximum exceeds
// NoisyRatio times the minimum, the user+system CPU time per operation of
// the whole process over the timed part (getrusage: work moved to other
// goroutines and cores counts) and, on the project's own rows ("kvbuf",
// "kvbuf-…"), a Ratio to every baseline computed round by round: in each
// round, the baseline's time over the own row's, summarised by its median
// and min–max (flagged noisy the same way) and the median ratio of CPU
// times. A workload whose rows write user data (UserBytesPerOp: W4, W6,
// W8, W11) also runs a settle step after every round (off the clock: the
// stores' memtables flushed, in W6 and W8 only those whose log holds
// settleLogMin bytes or more, their flushes and compactions waited out
// on several idle looks in a row, workload.WaitIdle) and reports the
// bytes the process wrote to disk from the round's start to the settle
// step's end per byte of that data, over all rounds
// (Row.DiskPerUserByte) and per round (Row.DiskBytesPerUserByte). A
// smaller memtable is flushed by the next round's quiesce step,
// uncounted: its flush and the compaction it triggers are charged to no
// row. A store still busy at the deadline leaves the row without a disk
// figure; a quiesce or settle step that finds one, in any workload, is
// counted in Row.BusyRounds.
//
// # Adding a row
//
// A row is an Impl: a Name, a Loop or a Round, and a Label if it cannot
// meet the fairness rule of doc/workloads.md (LabelWriteOnly,
// LabelComponent, LabelBreaksDurability; Workload.Label labels a whole
// workload). A Round times its work with Timed, which also counts the
// CPU time and the allocations of that part; whatever it does outside
// Timed (preparation, a flush that empties the engine, the read-back) is
// off the clock. A workload whose rows write sets Workload.Writes: after
// every round each row reads back what it wrote and compares it (a sample
// of Config.ReadBack values, or all of them), reporting the count in
// RoundResult.ReadBack or, for a Looper, through ReadBacker; readBackKV and
// readBackBits do the comparison and return ErrReadBack on a difference.
// Run computes the per-round ratios, the CPU figures and the noise flags
// of every row it runs; nothing else is needed.
//
// # Fairness
//
// doc/workloads.md ("Fairness") states the rule (the same work at the same
// durability with the same memory, all of kvbuf's work timed, the best
// baseline, every write checked) and, row by row, what each side has made
// durable when the clock stops, its memory and its work off the clock.
// In code:
//
//   - Every baseline does the work kvbuf does: values found are copied
//     into a buffer the caller reuses on every row (kvbuf's GetAppend,
//     append for the others); a row that returns the map's value without
//     copying is named "…-no-copy". Writes copy keys and values on every
//     row; deletes leave tombstones where kvbuf keeps them.
//   - Engines that must keep changes pending run without the interval
//     flush and with a pending limit sized to the workload, never disabled;
//     one row per family runs an engine with default Options.
//   - The raw pebble baselines of the write workloads get the engine's
//     memory: a memtable of its pending budget (or of its store's own,
//     "…-store-memtable") and its block cache plus its read tier
//     (pebble_baselines.go), and make the same writes durable by the best
//     means pebble has (a synced batch, NoSync writes with a synced LogData
//     every FlushInterval, no WAL and DB.Flush).
//   - Every implementation gets the same warm-up round.
//   - Every round of every implementation that does the same work must give
//     the same check count (bits found set, keys found plus their last
//     value byte, keys scanned); Run fails if two disagree, so a benchmark
//     cannot silently compare different answers. Floor rows (the raw
//     bitslice and pebble-get, which read without the pending changes) and
//     W7 (whose reads depend on how far the writer got) are not compared.
//   - Every write row reads back what it wrote (see Adding a row); a row
//     that drops or mangles a write fails the run with ErrReadBack.
//
// # Caveats
//
//   - Figures are wall-clock times on whatever machine runs them. Compare
//     rows of one run as ratios; absolute nanoseconds move from run to run.
//   - CPU time is the whole process's (getrusage(RUSAGE_SELF)): a row's
//     figure includes any other goroutine that runs during its timed part,
//     pebble's compactions of an earlier round included when the quiesce
//     step did not finish them. Where getrusage does not exist rows carry
//     no CPU figure.
//   - Disk bytes are Linux's /proc/self/io count (written minus cancelled,
//     counted when a page is dirtied, by any goroutine): elsewhere, or on a
//     file system that keeps no count (tmpfs), rows carry no disk figure.
//     The settle step of W4 and W11 flushes every store of the suite, so a
//     row is also charged the few kilobytes of flushing the others' empty
//     memtables; that of W6 and W8 flushes only the memtables whose log
//     holds settleLogMin bytes or more (settleRounds).
//   - AllocsPerOp comes from runtime.MemStats.Mallocs deltas over the timed
//     part: it counts allocations by every goroutine in the process,
//     including pebble's background work.
//   - Memory per entry is the live-heap growth (after GC) while one
//     implementation's structure was built, divided by its entries; it
//     includes the map's or table's own growth slack at that size, and
//     nothing allocated outside the Go heap (pebble's cache and memtables
//     when built with cgo).
//   - W4 violations are a lower bound (see doc/workloads.md): the check
//     reads the durable watermark after Flush returned.
//   - The twin engines of the snapshot rows hold the same data as the
//     main ones but are separate allocations: a difference of a few
//     percent between them can be placement as well as snapshots.
//   - Setting up W1, W2 and W7 at Scale 1 takes tens of seconds and
//     several hundred MiB of memory each; W2 over a GiB.
package bench
