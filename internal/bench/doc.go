// Package bench implements the benchmark workloads W1, W2 and W4 of
// shared/workloads.md — the kvbuf engine and every baseline — as ordinary
// Go code, so that `kvtool bench` and the `go test -bench` functions in this
// package time exactly the same loops.
//
// A Suite is one workload family (W1, W2 or W4) set up once on real files
// in a directory: kvbuf engines opened with kvbuf.Open, raw bitslice files,
// pebble databases. Its Workloads share that setup; each has the canonical
// name from workloads.md and one Impl per row (impl "kvbuf" and the
// baselines "raw", "mutex+map", …). Workload.Run runs rounds interleaved in
// rotating order (round r starts at implementation r mod n) and returns one
// Row per implementation with the median, minimum and maximum time per
// operation and the ratios of the kvbuf row to each baseline.
//
// What one operation is:
//
//   - W1: one bit lookup. A round is one pass over the pre-generated lookup
//     indexes (1,000,000 at Scale 1).
//   - W2 get-*: one Get. A round is one pass over that workload's keys.
//   - W2 scan-10k: one range scan reading up to 10,000 keys.
//   - W4 flush-gG: one write followed by Flush, in G goroutines. A round is
//     every goroutine doing Config.FlushesPerGoroutine of them.
//
// Every round of every non-floor implementation must produce the same
// check count (bits found set, keys found, keys scanned); Run fails if two
// disagree, so a benchmark cannot silently compare different answers.
//
// # Caveats
//
//   - Figures are wall-clock times on a shared machine. Compare rows of one
//     run as ratios; absolute nanoseconds move from run to run.
//   - AllocsPerOp comes from runtime.MemStats.Mallocs deltas over the timed
//     loop: it counts allocations by every goroutine in the process,
//     including pebble's background work, so W4 figures are approximate.
//   - Floor rows (raw with pending changes, pebble-get) read without the
//     pending changes: they are lower bounds, not equivalent
//     implementations, and are excluded from the answer cross-check.
//   - The kvbuf rows measure the engine's public API (kvbuf.DB.Bits,
//     kvbuf.DB.KV), including its drain gate and keyspace prefix, not the
//     buffer package alone.
//   - The W4 kvbuf row detects coverage violations through the persisted
//     watermark (a flush that returned before the watermark reached the
//     caller's op number); the baselines are checked exactly, by reading the
//     store under the overlay.
//   - Setting up W1 and W2 at Scale 1 takes several seconds and a few
//     hundred MiB of memory.
package bench
