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
// not measured), then the measured rounds interleaved in rotating order
// (round r starts at implementation r mod n), with a garbage collection
// before every implementation's round. It returns one Row per
// implementation with the median, minimum and maximum time per operation,
// a Noisy flag when the maximum exceeds NoisyRatio times the minimum and,
// on the project's own rows ("kvbuf", "kvbuf-…"), the ratio of every
// baseline's median to theirs.
//
// # Fairness
//
//   - Every baseline does the work kvbuf does: values found are copied
//     into a buffer the caller reuses on every row (kvbuf's GetAppend,
//     append for the others); a row that returns the map's value without
//     copying is named "…-no-copy". Writes copy keys and values on every
//     row; deletes leave tombstones where kvbuf keeps them.
//   - Engines that must keep changes pending run without the interval
//     flush and with a pending limit sized to the workload, never disabled;
//     one row per family runs an engine with default Options.
//   - Every implementation gets the same warm-up round.
//   - Every round of every implementation that does the same work must give
//     the same check count (bits found set, keys found plus their last
//     value byte, keys scanned); Run fails if two disagree, so a benchmark
//     cannot silently compare different answers. Floor rows (the raw
//     bitslice and pebble-get, which read without the pending changes) and
//     W7 (whose reads depend on how far the writer got) are not compared.
//
// # Caveats
//
//   - Figures are wall-clock times on whatever machine runs them. Compare
//     rows of one run as ratios; absolute nanoseconds move from run to run.
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
