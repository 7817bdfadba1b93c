package ycsb

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/magiconair/properties"
	"github.com/pingcap/go-ycsb/pkg/prop"
)

// kvbufConfig is one kvbuf configuration: kvbuf.* properties.
type kvbufConfig struct{ name, props string }

// kvbufConfigSets are the comparisons of BenchmarkKvbufConfigs: the first
// configuration of each set is the default, the others differ in one
// option.
var kvbufConfigSets = []struct {
	name    string
	configs []kvbufConfig
}{
	{"read-tier", []kvbufConfig{{"tier", ""}, {"no-tier", "kvbuf.read_tier_bytes=-1"}, {"tier-64m", "kvbuf.read_tier_bytes=67108864"}}},
	{"flush-pacing", []kvbufConfig{{"yield", ""}, {"no-yield", "kvbuf.flush_quantum=-1ns"}, {"cpu50", "kvbuf.flush_cpu_percent=50"}}},
	{"ingest", []kvbufConfig{{"ingest", ""}, {"batch-path", "kvbuf.ingest_threshold=-1"}}},
}

// BenchmarkKvbufConfigs compares kvbuf configurations on YCSB workloads in
// one process: each configuration's engine is loaded once with
// KVBUF_YCSB_RECORDS records (default 100000); one op is a round of every
// workload of KVBUF_YCSB_WORKLOADS (default a,b,d,f), each run by every
// configuration in rotating order (open, KVBUF_YCSB_OPS/10 operations of
// warm-up, KVBUF_YCSB_OPS measured ones (default 100000), close), one
// client thread. Metrics per workload and configuration: ops/s (median
// over the rounds), cpu-us/op (the process's user+sys time over the
// measured operations, flusher and pebble included, per operation: what a
// machine shared with other work disturbs least), read-p99-us (all rounds'
// reads), read@flush-p99-us (the reads that overlapped a generation in
// flight) and, for every configuration but the first, its ops/s and
// cpu-us/op over the first's (medians of the per-round ratios).
func BenchmarkKvbufConfigs(b *testing.B) {
	for _, set := range kvbufConfigSets {
		b.Run("set="+set.name, func(b *testing.B) { benchKvbufConfigs(b, set.configs) })
	}
}

func envInt(name string, def int64) int64 {
	if v, err := strconv.ParseInt(os.Getenv(name), 10, 64); err == nil && v > 0 {
		return v
	}
	return def
}

// cpuNow is the process's CPU time so far (user and system; 0 where the
// platform cannot tell).
func cpuNow() time.Duration {
	d, _ := processCPU()
	return d
}

func benchKvbufConfigs(b *testing.B, configs []kvbufConfig) {
	ctx := context.Background()
	records := envInt("KVBUF_YCSB_RECORDS", 100000)
	ops := envInt("KVBUF_YCSB_OPS", 100000)
	workloads := strings.Split(os.Getenv("KVBUF_YCSB_WORKLOADS"), ",")
	if workloads[0] == "" {
		workloads = []string{"a", "b", "d", "f"}
	}
	propsFor := func(wl string, c kvbufConfig, count int64) *properties.Properties {
		p, err := WorkloadProperties(wl)
		if err != nil {
			b.Fatal(err)
		}
		p.MustSet(prop.RecordCount, strconv.FormatInt(records, 10))
		p.MustSet(prop.OperationCount, strconv.FormatInt(count, 10))
		for _, kv := range strings.Split(c.props, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				p.MustSet(k, v)
			}
		}
		return p
	}
	dirs := make([]string, len(configs))
	recs := make([]int64, len(configs))
	for i, c := range configs {
		dirs[i] = filepath.Join(b.TempDir(), c.name)
		lp := propsFor("a", c, records)
		lp.MustSet(prop.InsertCount, strconv.FormatInt(records, 10))
		w, err := NewWorkload(lp)
		if err != nil {
			b.Fatal(err)
		}
		db, err := Open("kvbuf", dirs[i], lp)
		if err != nil {
			b.Fatal(err)
		}
		res, err := Load(ctx, db, w, 256, RunOptions{Seed: 1})
		if err == nil {
			_, err = settle(ctx, db)
		}
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			b.Fatalf("load %s: %v", c.name, err)
		}
		recs[i] = res.Records
	}
	type cell struct {
		opsPerSec, cpuPerOp []float64
		reads, readsInFlush *hdrhistogram.Histogram
	}
	cells := make([][]cell, len(workloads))
	for w := range cells {
		cells[w] = make([]cell, len(configs))
		for i := range configs {
			cells[w][i].reads = hdrhistogram.New(histMin, histMax, histDigits)
			cells[w][i].readsInFlush = hdrhistogram.New(histMin, histMax, histDigits)
		}
	}
	round := 0
	for b.Loop() {
		for wi, wl := range workloads {
			seed := runSeed(7, wl, 1, round)
			for j := range configs {
				i := (j + round) % len(configs)
				c := configs[i]
				db, err := Open("kvbuf", dirs[i], propsFor(wl, c, ops))
				if err != nil {
					b.Fatal(err)
				}
				warm, err := NewWorkload(propsFor(wl, c, ops/10))
				if err != nil {
					b.Fatal(err)
				}
				wr, err := Run(ctx, db, warm, recs[i], RunOptions{Seed: seed ^ 0x5eed})
				if err != nil {
					b.Fatalf("%s %s warm-up: %v", wl, c.name, err)
				}
				w, err := NewWorkload(propsFor(wl, c, ops))
				if err != nil {
					b.Fatal(err)
				}
				c0 := cpuNow()
				res, err := Run(ctx, db, w, wr.Records, RunOptions{Seed: seed})
				cpu := cpuNow() - c0
				if err != nil {
					b.Fatalf("%s %s: %v", wl, c.name, err)
				}
				if err := db.Close(); err != nil {
					b.Fatal(err)
				}
				recs[i] = res.Records
				ce := &cells[wi][i]
				ce.opsPerSec = append(ce.opsPerSec, res.OpsPerSec())
				ce.cpuPerOp = append(ce.cpuPerOp, float64(cpu.Microseconds())/float64(res.Ops))
				if h := res.Latency[OpRead]; h != nil {
					ce.reads.Merge(h)
				}
				if h := res.Latency[OpReadInFlush]; h != nil {
					ce.readsInFlush.Merge(h)
				}
			}
		}
		round++
	}
	median := func(xs []float64) float64 {
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[len(s)/2]
	}
	ratios := func(a, base []float64) []float64 {
		out := make([]float64, len(a))
		for r := range a {
			out[r] = a[r] / base[r]
		}
		return out
	}
	for wi, wl := range workloads {
		for i, c := range configs {
			ce := cells[wi][i]
			pre := fmt.Sprintf("%s/%s-", wl, c.name)
			b.ReportMetric(median(ce.opsPerSec), pre+"ops/s")
			b.ReportMetric(median(ce.cpuPerOp), pre+"cpu-us/op")
			b.ReportMetric(float64(ce.reads.ValueAtQuantile(99))/1e3, pre+"read-p99-us")
			b.ReportMetric(float64(ce.readsInFlush.ValueAtQuantile(99))/1e3, pre+"read@flush-p99-us")
			if i > 0 {
				base := cells[wi][0]
				b.ReportMetric(median(ratios(ce.opsPerSec, base.opsPerSec)), fmt.Sprintf("%s/%s/%s-ops", wl, c.name, configs[0].name))
				b.ReportMetric(median(ratios(ce.cpuPerOp, base.cpuPerOp)), fmt.Sprintf("%s/%s/%s-cpu", wl, c.name, configs[0].name))
			}
		}
	}
}
