package kvbufprom

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/kvbuf/kvbuf"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fieldMetric maps every field of kvbuf.Metrics to the metric that exports
// it. TestEveryFieldExported fails when Metrics gains a field that is not
// here, so that a new field is not silently left out.
var fieldMetric = map[string]string{
	"PendingBytes":     "kvbuf_pending_bytes",
	"PendingKeys":      "kvbuf_pending_keys",
	"Flushes":          "kvbuf_flushes_total",
	"Coalesced":        "kvbuf_flushes_coalesced_total",
	"Generations":      "kvbuf_generations_total",
	"GenerationWrites": "kvbuf_generation_writes_total",
	"Failures":         "kvbuf_flush_failures_total",
	"LastError":        "kvbuf_flush_last_error",
	"DiskFull":         "kvbuf_disk_full_total",
	"DiskFullWaiting":  "kvbuf_disk_full_waiting",
	"Stalls":           "kvbuf_write_stalls_total",
	"StallTime":        "kvbuf_write_stall_seconds_total",
	"FlushLatency":     "kvbuf_flush_duration_seconds",
	"InFlight":         "kvbuf_generations_in_flight",
	"MaxInFlight":      "kvbuf_generations_in_flight_max",
	"Watermark":        "kvbuf_watermark",
	"HighestOp":        "kvbuf_highest_op",
	"ReceiptLag":       "kvbuf_receipt_lag_ops",
	"CompletedOp":      "kvbuf_completed_op",
	"OpenOps":          "kvbuf_open_ops",
	"Redelivered":      "kvbuf_redelivered_total",
	"Keyspaces":        "kvbuf_keyspaces",
	"Bitslices":        "kvbuf_bitslices",
	"Snapshots":        "kvbuf_snapshots",
	"StoreJobs":        "kvbuf_store_jobs",

	"StoreL0Files":        "kvbuf_store_l0_files",
	"StoreReadAmp":        "kvbuf_store_read_amp",
	"StoreLogBytes":       "kvbuf_store_log_bytes",
	"IngestedGenerations": "kvbuf_ingested_generations_total",
	"StoreFlushes":        "kvbuf_store_flushes_total",
	"StoreCompactions":    "kvbuf_store_compactions_total",
	"StoreIngests":        "kvbuf_store_ingests_total",
	"StoreCompactedBytes": "kvbuf_store_compacted_bytes_total",
	"StoreBytesWritten":   "kvbuf_store_written_bytes_total",
	"StoreL0Waits":        "kvbuf_store_l0_waits_total",
	"StoreL0WaitTime":     "kvbuf_store_l0_wait_seconds_total",
	"ReadTierBytes":       "kvbuf_read_tier_bytes",
	"ReadTierGenerations": "kvbuf_read_tier_generations",
	"ReadTierEvictions":   "kvbuf_read_tier_evictions_total",
	"FlushYields":         "kvbuf_flush_yields_total",
	"FlushThrottled":      "kvbuf_flush_throttled_seconds_total",
	"BudgetBytes":         "kvbuf_budget_bytes",
	"BudgetForcedFlushes": "kvbuf_budget_forced_flushes_total",
	"BudgetWaits":         "kvbuf_budget_waits_total",
	"BudgetWaitTime":      "kvbuf_budget_wait_seconds_total",
	"WatchSubscribers":    "kvbuf_watch_subscribers",
	"WatchDelivered":      "kvbuf_watch_delivered_total",
	"WatchLagged":         "kvbuf_watch_lagged_total",
	"WatchOverflows":      "kvbuf_watch_overflows_total",
	"WatchBufferBytes":    "kvbuf_watch_buffer_bytes",
	"WatchResolvedOp":     "kvbuf_watch_resolved_op",
	"WatchDurableOp":      "kvbuf_watch_durable_op",
	"WatchRetainedBytes":  "kvbuf_watch_retained_bytes",
	"WatchRetainedFrom":   "kvbuf_watch_retained_from_op",
}

// fabricated returns Metrics with every field set to a distinct value.
func fabricated() kvbuf.Metrics {
	m := kvbuf.Metrics{
		PendingBytes:     1 << 20,
		PendingKeys:      12,
		Flushes:          40,
		Coalesced:        30,
		Generations:      9,
		GenerationWrites: 11,
		Failures:         2,
		LastError:        errors.New("injected"),
		DiskFull:         13,
		DiskFullWaiting:  true,
		Stalls:           3,
		StallTime:        1500 * time.Millisecond,
		InFlight:         1,
		MaxInFlight:      4,
		Watermark:        1000,
		HighestOp:        1007,
		ReceiptLag:       7,
		CompletedOp:      1003,
		OpenOps:          4,
		Redelivered:      5,
		Keyspaces:        2,
		Bitslices:        3,
		Snapshots:        1,
		StoreJobs:        6,

		StoreL0Files:        13,
		StoreReadAmp:        14,
		StoreLogBytes:       14 << 10,
		IngestedGenerations: 15,
		StoreFlushes:        31,
		StoreCompactions:    32,
		StoreIngests:        33,
		StoreCompactedBytes: 34 << 20,
		StoreBytesWritten:   35 << 20,
		StoreL0Waits:        29,
		StoreL0WaitTime:     4500 * time.Millisecond,
		ReadTierBytes:       16 << 20,
		ReadTierGenerations: 17,
		ReadTierEvictions:   18,
		FlushYields:         19,
		FlushThrottled:      2500 * time.Millisecond,
		BudgetBytes:         20 << 10,
		BudgetForcedFlushes: 21,
		BudgetWaits:         22,
		BudgetWaitTime:      3500 * time.Millisecond,
		WatchSubscribers:    23,
		WatchDelivered:      24,
		WatchLagged:         25,
		WatchOverflows:      26,
		WatchBufferBytes:    27 << 10,
		WatchResolvedOp:     1002,
		WatchDurableOp:      999,
		WatchRetainedBytes:  28 << 10,
		WatchRetainedFrom:   900,
	}
	h := &m.FlushLatency
	h.Counts[0] = 1                      // under 1.024µs
	h.Counts[5] = 2                      // [2.048µs, 2.56µs)
	h.Counts[41] = 4                     // [1.048576ms, 1.31072ms)
	h.Counts[kvbuf.LatencyBuckets-1] = 1 // 68.7s and more
	h.Count = 8
	h.Sum = 80 * time.Second
	return m
}

// octaveBuckets writes the bucket lines of kvbuf_flush_duration_seconds for
// the default buckets, one per power of two from 2^10 ns to 2^36 ns,
// computed independently of kvbuf.LatencyBucketBound. count returns the
// cumulative count at 2^e ns.
func octaveBuckets(b *strings.Builder, labels string, count func(e int) int) {
	for e := 10; e <= 36; e++ {
		fmt.Fprintf(b, "kvbuf_flush_duration_seconds_bucket{%sle=\"%g\"} %d\n", labels, math.Ldexp(1, e)/1e9, count(e))
	}
}

func TestEveryFieldExported(t *testing.T) {
	var fields []string
	for _, f := range reflect.VisibleFields(reflect.TypeFor[kvbuf.Metrics]()) {
		fields = append(fields, f.Name)
	}
	var mapped []string
	for f := range fieldMetric {
		mapped = append(mapped, f)
	}
	slices.Sort(fields)
	slices.Sort(mapped)
	if !slices.Equal(fields, mapped) {
		t.Fatalf("kvbuf.Metrics fields %v\nexported fields %v\n(add the new field to the collector and to fieldMetric)", fields, mapped)
	}

	c := newCollector(fabricated, &Options{ConstLabels: prometheus.Labels{"shard": "7"}})
	var want strings.Builder
	want.WriteString(`
# HELP kvbuf_bitslices Bitslices of the engine.
# TYPE kvbuf_bitslices gauge
kvbuf_bitslices{shard="7"} 3
# HELP kvbuf_completed_op The highest op n such that every op up to n has ended: what the next flush may persist as the watermark.
# TYPE kvbuf_completed_op gauge
kvbuf_completed_op{shard="7"} 1003
# HELP kvbuf_disk_full_total Times the engine met a full disk: store write episodes, flush attempts, stalls and checkpoints that found no space.
# TYPE kvbuf_disk_full_total counter
kvbuf_disk_full_total{shard="7"} 13
# HELP kvbuf_disk_full_waiting 1 while store writes wait for disk space (Flush returns ErrDiskFull meanwhile), else 0.
# TYPE kvbuf_disk_full_waiting gauge
kvbuf_disk_full_waiting{shard="7"} 1
# HELP kvbuf_flush_failures_total Failed flush attempts.
# TYPE kvbuf_flush_failures_total counter
kvbuf_flush_failures_total{shard="7"} 2
# HELP kvbuf_flush_last_error 1 if a flush attempt has failed since the engine was opened, else 0 (the error text is DB.Metrics().LastError).
# TYPE kvbuf_flush_last_error gauge
kvbuf_flush_last_error{shard="7"} 1
# HELP kvbuf_flushes_coalesced_total Flush calls that joined a generation another caller had opened (group commit).
# TYPE kvbuf_flushes_coalesced_total counter
kvbuf_flushes_coalesced_total{shard="7"} 30
# HELP kvbuf_flushes_total Flush calls admitted.
# TYPE kvbuf_flushes_total counter
kvbuf_flushes_total{shard="7"} 40
# HELP kvbuf_generation_writes_total Generation writes, retries of failed generations included.
# TYPE kvbuf_generation_writes_total counter
kvbuf_generation_writes_total{shard="7"} 11
# HELP kvbuf_generations_in_flight Generations frozen and not yet durable.
# TYPE kvbuf_generations_in_flight gauge
kvbuf_generations_in_flight{shard="7"} 1
# HELP kvbuf_generations_in_flight_max The highest number of generations in flight since the engine was opened.
# TYPE kvbuf_generations_in_flight_max gauge
kvbuf_generations_in_flight_max{shard="7"} 4
# HELP kvbuf_generations_total Generations frozen: physical flushes, background ones included.
# TYPE kvbuf_generations_total counter
kvbuf_generations_total{shard="7"} 9
# HELP kvbuf_highest_op The highest op number seen: written, batched, begun or ended (also before a reopen, as far as a flush recorded it).
# TYPE kvbuf_highest_op gauge
kvbuf_highest_op{shard="7"} 1007
# HELP kvbuf_keyspaces Keyspaces of the engine.
# TYPE kvbuf_keyspaces gauge
kvbuf_keyspaces{shard="7"} 2
# HELP kvbuf_open_ops Ops begun and not ended.
# TYPE kvbuf_open_ops gauge
kvbuf_open_ops{shard="7"} 4
# HELP kvbuf_pending_bytes Memory held by pending changes: written, not yet durable and released.
# TYPE kvbuf_pending_bytes gauge
kvbuf_pending_bytes{shard="7"} 1.048576e+06
# HELP kvbuf_pending_keys KV keys held by pending tables (a key pending in two generations counts twice).
# TYPE kvbuf_pending_keys gauge
kvbuf_pending_keys{shard="7"} 12
# HELP kvbuf_receipt_lag_ops Op numbers between the persisted watermark and the highest op admitted (0 if the host does not track ops).
# TYPE kvbuf_receipt_lag_ops gauge
kvbuf_receipt_lag_ops{shard="7"} 7
# HELP kvbuf_redelivered_total Writes, batches and EndOp calls skipped because their op was at or below the watermark (redelivered ops).
# TYPE kvbuf_redelivered_total counter
kvbuf_redelivered_total{shard="7"} 5
# HELP kvbuf_snapshots Open snapshots.
# TYPE kvbuf_snapshots gauge
kvbuf_snapshots{shard="7"} 1
# HELP kvbuf_store_jobs Flushes and compactions of the store (pebble) in progress.
# TYPE kvbuf_store_jobs gauge
kvbuf_store_jobs{shard="7"} 6
# HELP kvbuf_watermark The persisted watermark: every write of every op up to it is durable.
# TYPE kvbuf_watermark gauge
kvbuf_watermark{shard="7"} 1000
# HELP kvbuf_write_stall_seconds_total Time writes spent waiting for a flush because pending memory was over its bound.
# TYPE kvbuf_write_stall_seconds_total counter
kvbuf_write_stall_seconds_total{shard="7"} 1.5
# HELP kvbuf_write_stalls_total Writes that waited for a flush because pending memory was over its bound.
# TYPE kvbuf_write_stalls_total counter
kvbuf_write_stalls_total{shard="7"} 3
# HELP kvbuf_store_l0_files Sstables in level 0 of the store (pebble).
# TYPE kvbuf_store_l0_files gauge
kvbuf_store_l0_files{shard="7"} 13
# HELP kvbuf_store_log_bytes Live data of the store's write-ahead log: what its memtables hold that no flush has written to an sstable yet.
# TYPE kvbuf_store_log_bytes gauge
kvbuf_store_log_bytes{shard="7"} 14336
# HELP kvbuf_store_read_amp Read amplification of the store: memtables, L0 sublevels and lower levels a point read may search.
# TYPE kvbuf_store_read_amp gauge
kvbuf_store_read_amp{shard="7"} 14
# HELP kvbuf_ingested_generations_total Generations flushed by ingesting sstables rather than through the write-ahead log.
# TYPE kvbuf_ingested_generations_total counter
kvbuf_ingested_generations_total{shard="7"} 15
# HELP kvbuf_store_flushes_total Memtable flushes of the store (pebble).
# TYPE kvbuf_store_flushes_total counter
kvbuf_store_flushes_total{shard="7"} 31
# HELP kvbuf_store_compactions_total Compactions of the store (pebble).
# TYPE kvbuf_store_compactions_total counter
kvbuf_store_compactions_total{shard="7"} 32
# HELP kvbuf_store_ingests_total Ingestions of sstables into the store (pebble).
# TYPE kvbuf_store_ingests_total counter
kvbuf_store_ingests_total{shard="7"} 33
# HELP kvbuf_store_compacted_bytes_total Bytes the store's compactions wrote.
# TYPE kvbuf_store_compacted_bytes_total counter
kvbuf_store_compacted_bytes_total{shard="7"} 3.5651584e+07
# HELP kvbuf_store_written_bytes_total Bytes the store wrote: its write-ahead log, the tables its flushes and compactions wrote, and the tables ingested.
# TYPE kvbuf_store_written_bytes_total counter
kvbuf_store_written_bytes_total{shard="7"} 3.6700160e+07
# HELP kvbuf_store_l0_waits_total Flushes by ingestion that waited for the store to compact its L0 below its stop-writes depth.
# TYPE kvbuf_store_l0_waits_total counter
kvbuf_store_l0_waits_total{shard="7"} 29
# HELP kvbuf_store_l0_wait_seconds_total Time flushes by ingestion waited for the store to compact its L0.
# TYPE kvbuf_store_l0_wait_seconds_total counter
kvbuf_store_l0_wait_seconds_total{shard="7"} 4.5
# HELP kvbuf_read_tier_bytes Memory held by the read tier: flushed generations kept readable.
# TYPE kvbuf_read_tier_bytes gauge
kvbuf_read_tier_bytes{shard="7"} 1.6777216e+07
# HELP kvbuf_read_tier_generations Flushed generations the read tier holds.
# TYPE kvbuf_read_tier_generations gauge
kvbuf_read_tier_generations{shard="7"} 17
# HELP kvbuf_read_tier_evictions_total Generations the read tier evicted.
# TYPE kvbuf_read_tier_evictions_total counter
kvbuf_read_tier_evictions_total{shard="7"} 18
# HELP kvbuf_flush_yields_total Times the flusher yielded the processor between two slices of its work on a generation's tables.
# TYPE kvbuf_flush_yields_total counter
kvbuf_flush_yields_total{shard="7"} 19
# HELP kvbuf_flush_throttled_seconds_total Time the flusher slept to stay within its CPU share (FlushCPUPercent).
# TYPE kvbuf_flush_throttled_seconds_total counter
kvbuf_flush_throttled_seconds_total{shard="7"} 2.5
# HELP kvbuf_budget_bytes The engine's share of its memory budget: its pending bytes as of its latest write or flush.
# TYPE kvbuf_budget_bytes gauge
kvbuf_budget_bytes{shard="7"} 20480
# HELP kvbuf_budget_forced_flushes_total Flushes the engine's memory budget forced on it.
# TYPE kvbuf_budget_forced_flushes_total counter
kvbuf_budget_forced_flushes_total{shard="7"} 21
# HELP kvbuf_budget_waits_total Writes that queued for the engine's memory budget (past half its high mark, or behind a round in progress).
# TYPE kvbuf_budget_waits_total counter
kvbuf_budget_waits_total{shard="7"} 22
# HELP kvbuf_budget_wait_seconds_total Time writes queued for the engine's memory budget.
# TYPE kvbuf_budget_wait_seconds_total counter
kvbuf_budget_wait_seconds_total{shard="7"} 3.5
# HELP kvbuf_watch_subscribers Open watches of the change feed.
# TYPE kvbuf_watch_subscribers gauge
kvbuf_watch_subscribers{shard="7"} 23
# HELP kvbuf_watch_delivered_total Change-feed events (changes and resolved marks) watches read.
# TYPE kvbuf_watch_delivered_total counter
kvbuf_watch_delivered_total{shard="7"} 24
# HELP kvbuf_watch_lagged_total Watches ended because they fell behind the change feed's buffer (ErrLagged).
# TYPE kvbuf_watch_lagged_total counter
kvbuf_watch_lagged_total{shard="7"} 25
# HELP kvbuf_watch_overflows_total Times the change feed's unresolved changes outgrew its bound and every watch lagged.
# TYPE kvbuf_watch_overflows_total counter
kvbuf_watch_overflows_total{shard="7"} 26
# HELP kvbuf_watch_buffer_bytes Memory the change feed holds: resolved and unresolved changes.
# TYPE kvbuf_watch_buffer_bytes gauge
kvbuf_watch_buffer_bytes{shard="7"} 27648
# HELP kvbuf_watch_resolved_op The op of the change feed's newest resolved mark.
# TYPE kvbuf_watch_resolved_op gauge
kvbuf_watch_resolved_op{shard="7"} 1002
# HELP kvbuf_watch_durable_op The op of the newest resolved mark durable-mode watches may read.
# TYPE kvbuf_watch_durable_op gauge
kvbuf_watch_durable_op{shard="7"} 999
# HELP kvbuf_watch_retained_bytes Bytes of changes retained in the store for watches that resume after a restart.
# TYPE kvbuf_watch_retained_bytes gauge
kvbuf_watch_retained_bytes{shard="7"} 28672
# HELP kvbuf_watch_retained_from_op The lowest op a watch may resume from with the changes retained in the store (0 without retention).
# TYPE kvbuf_watch_retained_from_op gauge
kvbuf_watch_retained_from_op{shard="7"} 900
# HELP kvbuf_flush_duration_seconds Durations of Flush calls.
# TYPE kvbuf_flush_duration_seconds histogram
`)
	octaveBuckets(&want, `shard="7",`, func(e int) int {
		switch {
		case e < 12: // 1.024µs, 2.048µs: bucket 0 only
			return 1
		case e < 21: // 4.096µs .. 1.048576ms: and bucket 5
			return 3
		}
		return 7 // 2.097152ms and up: and bucket 41, not the overflow
	})
	want.WriteString(`kvbuf_flush_duration_seconds_bucket{shard="7",le="+Inf"} 8
kvbuf_flush_duration_seconds_sum{shard="7"} 80
kvbuf_flush_duration_seconds_count{shard="7"} 8
`)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want.String())); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c); n != len(fieldMetric) {
		t.Errorf("%d metrics collected, want one per field (%d)", n, len(fieldMetric))
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", err, problems)
	}
}

// TestNoError: a nil LastError is 0, and zero metrics are all exported.
func TestNoError(t *testing.T) {
	c := newCollector(func() kvbuf.Metrics { return kvbuf.Metrics{} }, nil)
	err := testutil.CollectAndCompare(c, strings.NewReader(`
# HELP kvbuf_flush_last_error 1 if a flush attempt has failed since the engine was opened, else 0 (the error text is DB.Metrics().LastError).
# TYPE kvbuf_flush_last_error gauge
kvbuf_flush_last_error 0
`), "kvbuf_flush_last_error")
	if err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c); n != len(fieldMetric) {
		t.Errorf("%d metrics collected, want %d", n, len(fieldMetric))
	}
}

// TestAllLatencyBuckets exports every engine bucket: 105 bounds plus +Inf,
// cumulative, each bound the engine's.
func TestAllLatencyBuckets(t *testing.T) {
	ph := family(t, newCollector(fabricated, &Options{AllLatencyBuckets: true}), "kvbuf_flush_duration_seconds").GetMetric()[0].GetHistogram()
	bs := ph.GetBucket()
	if len(bs) != kvbuf.LatencyBuckets-1 {
		t.Fatalf("%d buckets, want %d", len(bs), kvbuf.LatencyBuckets-1)
	}
	src := fabricated().FlushLatency
	var cum uint64
	for i, b := range bs {
		cum += uint64(src.Counts[i])
		if b.GetUpperBound() != kvbuf.LatencyBucketBound(i).Seconds() || b.GetCumulativeCount() != cum {
			t.Errorf("bucket %d: le %g count %d; want le %g count %d", i, b.GetUpperBound(), b.GetCumulativeCount(), kvbuf.LatencyBucketBound(i).Seconds(), cum)
		}
	}
	if ph.GetSampleCount() != 8 || cum != 7 {
		t.Errorf("count %d, last bucket %d; want 8 and 7 (one overflow)", ph.GetSampleCount(), cum)
	}
}

// TestConstLabels registers the collectors of several engines (shards) in
// one registry: they differ by label, and a duplicate is refused.
func TestConstLabels(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	for _, shard := range []string{"a", "b"} {
		if err := reg.Register(newCollector(fabricated, &Options{ConstLabels: prometheus.Labels{"shard": shard}})); err != nil {
			t.Fatalf("shard %s: %v", shard, err)
		}
	}
	var are prometheus.AlreadyRegisteredError
	if err := reg.Register(newCollector(fabricated, &Options{ConstLabels: prometheus.Labels{"shard": "a"}})); !errors.As(err, &are) {
		t.Errorf("second collector for shard a: %v, want AlreadyRegisteredError", err)
	}
	if err := reg.Register(newCollector(fabricated, &Options{ConstLabels: prometheus.Labels{"bad-name": "x"}})); err == nil {
		t.Error("an invalid label name was registered")
	}
	n, err := testutil.GatherAndCount(reg)
	if err != nil || n != 2*len(fieldMetric) {
		t.Errorf("gathered %d series (%v), want %d", n, err, 2*len(fieldMetric))
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", err, problems)
	}
}

// TestEngine drives a real engine through writes, a flush, a snapshot and
// Close, and compares what the collector reports at each point. Interval
// flushes and backpressure are off, so every number is determined.
func TestEngine(t *testing.T) {
	ctx := context.Background()
	db, err := kvbuf.Open(t.TempDir(), &kvbuf.Options{FlushInterval: -1, MaxPendingBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c := NewCollector(db, &Options{ConstLabels: prometheus.Labels{"shard": "0"}})
	problems, err := testutil.CollectAndLint(c)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint of a fresh engine: %v %v", err, problems)
	}

	users, err := db.KV("users")
	if err != nil {
		t.Fatal(err)
	}
	live, err := db.Bits("live")
	if err != nil {
		t.Fatal(err)
	}
	// Ops 1-3 one call each, op 4 a batch: the flush may claim op 4.
	for op := uint64(1); op <= 3; op++ {
		if err := users.Put(ctx, []byte(fmt.Sprint("k", op)), []byte("v"), op); err != nil {
			t.Fatal(err)
		}
	}
	b := db.NewBatch()
	b.Set(live, 10, true)
	b.Delete(users, []byte("k1"))
	if err := db.Apply(ctx, b, 4); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Op 2 again, as a log replay would: skipped (redelivered).
	if err := users.Put(ctx, []byte("k2"), []byte("other"), 2); err != nil {
		t.Fatal(err)
	}
	// Op 5 stays pending; a snapshot is open.
	if err := users.Put(ctx, []byte("k5"), []byte("v"), 5); err != nil {
		t.Fatal(err)
	}
	snap, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()

	compare := func(when, want string) {
		t.Helper()
		var names []string
		for _, line := range strings.Split(want, "\n") {
			if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
				names = append(names, strings.Fields(name)[0])
			}
		}
		if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
			t.Errorf("%s: %v", when, err)
		}
	}
	compare("after the flush", `
# HELP kvbuf_bitslices Bitslices of the engine.
# TYPE kvbuf_bitslices gauge
kvbuf_bitslices{shard="0"} 1
# HELP kvbuf_completed_op The highest op n such that every op up to n has ended: what the next flush may persist as the watermark.
# TYPE kvbuf_completed_op gauge
kvbuf_completed_op{shard="0"} 4
# HELP kvbuf_flush_failures_total Failed flush attempts.
# TYPE kvbuf_flush_failures_total counter
kvbuf_flush_failures_total{shard="0"} 0
# HELP kvbuf_flush_last_error 1 if a flush attempt has failed since the engine was opened, else 0 (the error text is DB.Metrics().LastError).
# TYPE kvbuf_flush_last_error gauge
kvbuf_flush_last_error{shard="0"} 0
# HELP kvbuf_flushes_coalesced_total Flush calls that joined a generation another caller had opened (group commit).
# TYPE kvbuf_flushes_coalesced_total counter
kvbuf_flushes_coalesced_total{shard="0"} 0
# HELP kvbuf_flushes_total Flush calls admitted.
# TYPE kvbuf_flushes_total counter
kvbuf_flushes_total{shard="0"} 1
# HELP kvbuf_generation_writes_total Generation writes, retries of failed generations included.
# TYPE kvbuf_generation_writes_total counter
kvbuf_generation_writes_total{shard="0"} 1
# HELP kvbuf_generations_in_flight Generations frozen and not yet durable.
# TYPE kvbuf_generations_in_flight gauge
kvbuf_generations_in_flight{shard="0"} 0
# HELP kvbuf_generations_in_flight_max The highest number of generations in flight since the engine was opened.
# TYPE kvbuf_generations_in_flight_max gauge
kvbuf_generations_in_flight_max{shard="0"} 1
# HELP kvbuf_generations_total Generations frozen: physical flushes, background ones included.
# TYPE kvbuf_generations_total counter
kvbuf_generations_total{shard="0"} 1
# HELP kvbuf_highest_op The highest op number seen: written, batched, begun or ended (also before a reopen, as far as a flush recorded it).
# TYPE kvbuf_highest_op gauge
kvbuf_highest_op{shard="0"} 5
# HELP kvbuf_keyspaces Keyspaces of the engine.
# TYPE kvbuf_keyspaces gauge
kvbuf_keyspaces{shard="0"} 1
# HELP kvbuf_pending_keys KV keys held by pending tables (a key pending in two generations counts twice).
# TYPE kvbuf_pending_keys gauge
kvbuf_pending_keys{shard="0"} 1
# HELP kvbuf_open_ops Ops begun and not ended.
# TYPE kvbuf_open_ops gauge
kvbuf_open_ops{shard="0"} 1
# HELP kvbuf_receipt_lag_ops Op numbers between the persisted watermark and the highest op admitted (0 if the host does not track ops).
# TYPE kvbuf_receipt_lag_ops gauge
kvbuf_receipt_lag_ops{shard="0"} 1
# HELP kvbuf_redelivered_total Writes, batches and EndOp calls skipped because their op was at or below the watermark (redelivered ops).
# TYPE kvbuf_redelivered_total counter
kvbuf_redelivered_total{shard="0"} 1
# HELP kvbuf_snapshots Open snapshots.
# TYPE kvbuf_snapshots gauge
kvbuf_snapshots{shard="0"} 1
# HELP kvbuf_watermark The persisted watermark: every write of every op up to it is durable.
# TYPE kvbuf_watermark gauge
kvbuf_watermark{shard="0"} 4
# HELP kvbuf_write_stall_seconds_total Time writes spent waiting for a flush because pending memory was over its bound.
# TYPE kvbuf_write_stall_seconds_total counter
kvbuf_write_stall_seconds_total{shard="0"} 0
# HELP kvbuf_write_stalls_total Writes that waited for a flush because pending memory was over its bound.
# TYPE kvbuf_write_stalls_total counter
kvbuf_write_stalls_total{shard="0"} 0
`)
	// Pending bytes and the latency depend on the allocator and the disk:
	// check them against the engine's own numbers.
	m := db.Metrics()
	if got := family(t, c, "kvbuf_pending_bytes").GetMetric()[0].GetGauge().GetValue(); m.PendingBytes <= 0 || got != float64(m.PendingBytes) {
		t.Errorf("kvbuf_pending_bytes = %g, engine %d", got, m.PendingBytes)
	}
	checkLatency(t, c, m.FlushLatency)
	problems, err = testutil.CollectAndLint(c)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", err, problems)
	}

	// Op 5 was a single call: it is complete once the host says so. After
	// Close (final flush of op 5, snapshot closed) the collector still
	// reports, with the counters stopped.
	if err := db.EndOp(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	compare("after Close", `
# HELP kvbuf_completed_op The highest op n such that every op up to n has ended: what the next flush may persist as the watermark.
# TYPE kvbuf_completed_op gauge
kvbuf_completed_op{shard="0"} 5
# HELP kvbuf_generations_total Generations frozen: physical flushes, background ones included.
# TYPE kvbuf_generations_total counter
kvbuf_generations_total{shard="0"} 2
# HELP kvbuf_open_ops Ops begun and not ended.
# TYPE kvbuf_open_ops gauge
kvbuf_open_ops{shard="0"} 0
# HELP kvbuf_pending_bytes Memory held by pending changes: written, not yet durable and released.
# TYPE kvbuf_pending_bytes gauge
kvbuf_pending_bytes{shard="0"} 0
# HELP kvbuf_pending_keys KV keys held by pending tables (a key pending in two generations counts twice).
# TYPE kvbuf_pending_keys gauge
kvbuf_pending_keys{shard="0"} 0
# HELP kvbuf_receipt_lag_ops Op numbers between the persisted watermark and the highest op admitted (0 if the host does not track ops).
# TYPE kvbuf_receipt_lag_ops gauge
kvbuf_receipt_lag_ops{shard="0"} 0
# HELP kvbuf_redelivered_total Writes, batches and EndOp calls skipped because their op was at or below the watermark (redelivered ops).
# TYPE kvbuf_redelivered_total counter
kvbuf_redelivered_total{shard="0"} 1
# HELP kvbuf_snapshots Open snapshots.
# TYPE kvbuf_snapshots gauge
kvbuf_snapshots{shard="0"} 0
# HELP kvbuf_watermark The persisted watermark: every write of every op up to it is durable.
# TYPE kvbuf_watermark gauge
kvbuf_watermark{shard="0"} 5
`)
}

// family gathers c alone and returns the metric family called name.
func family(t *testing.T, c prometheus.Collector, name string) *dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	t.Fatalf("no %s", name)
	return nil
}

// checkLatency compares the exported histogram with the engine's, which
// holds one observation.
func checkLatency(t *testing.T, c prometheus.Collector, h kvbuf.LatencyHistogram) {
	t.Helper()
	ph := family(t, c, "kvbuf_flush_duration_seconds").GetMetric()[0].GetHistogram()
	if ph.GetSampleCount() != uint64(h.Count) || h.Count != 1 || ph.GetSampleSum() != h.Sum.Seconds() {
		t.Errorf("histogram count %d sum %g; engine count %d sum %v (one Flush call)", ph.GetSampleCount(), ph.GetSampleSum(), h.Count, h.Sum)
	}
	// A bucket counts the observation if its bound is above the duration.
	for _, b := range ph.GetBucket() {
		below := b.GetUpperBound() > h.Sum.Seconds()
		if got := b.GetCumulativeCount(); (got == 1) != below {
			t.Errorf("bucket le=%g holds %d for one flush of %v", b.GetUpperBound(), got, h.Sum)
		}
	}
}

// NewCollectorFunc reads whatever its function returns at each scrape: a
// host that replaces its engine keeps one collector.
func TestCollectorFunc(t *testing.T) {
	var cur atomic.Uint64
	c := NewCollectorFunc(func() kvbuf.Metrics { return kvbuf.Metrics{Watermark: cur.Load()} }, nil)
	for _, wm := range []uint64{7, 1 << 40} {
		cur.Store(wm)
		want := fmt.Sprintf("# HELP kvbuf_watermark %s\n# TYPE kvbuf_watermark gauge\nkvbuf_watermark %g\n", watermarkHelp(t, c), float64(wm))
		if err := testutil.CollectAndCompare(c, strings.NewReader(want), "kvbuf_watermark"); err != nil {
			t.Fatal(err)
		}
	}
}

// watermarkHelp returns the help text of kvbuf_watermark.
func watermarkHelp(t *testing.T, c prometheus.Collector) string {
	t.Helper()
	ch := make(chan *prometheus.Desc, 64)
	c.Describe(ch)
	close(ch)
	for d := range ch {
		if s := d.String(); strings.Contains(s, `"kvbuf_watermark"`) {
			_, h, _ := strings.Cut(s, `help: "`)
			h, _, _ = strings.Cut(h, `"`)
			return h
		}
	}
	t.Fatal("no kvbuf_watermark")
	return ""
}
