package ycsb

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/magiconair/properties"
)

var (
	benchRecords = flag.Int64("ycsb.records", 20000, "records loaded for BenchmarkYCSB")
	benchProps   = flag.String("ycsb.props", "", "extra properties for BenchmarkYCSB, comma-separated key=value")
)

// BenchmarkYCSB runs one YCSB operation per b.Loop iteration on one thread,
// per workload and engine, for profiling a binding
// (go test -run '^$' -bench 'YCSB/f/kvbuf' -cpuprofile cpu.out ./bench/ycsb).
// The comparison across engines is kvtool ycsb's job (rotating rounds);
// this runs each engine alone.
func BenchmarkYCSB(b *testing.B) {
	for _, wl := range StandardOrder {
		b.Run(wl, func(b *testing.B) {
			for _, engine := range Engines {
				b.Run(engine, func(b *testing.B) { benchYCSB(b, wl, engine) })
			}
		})
	}
}

func benchYCSB(b *testing.B, wl, engine string) {
	p, err := WorkloadProperties(wl)
	if err != nil {
		b.Fatal(err)
	}
	p.MustSet("recordcount", strconv.FormatInt(*benchRecords, 10))
	p.MustSet("operationcount", "1000000")
	for _, kv := range splitProps(*benchProps) {
		p.Merge(kv)
	}
	w, err := NewWorkload(p)
	if err != nil {
		b.Fatal(err)
	}
	db, err := Open(engine, b.TempDir(), p)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	res, err := Load(ctx, db, w, 256, RunOptions{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := settle(ctx, db); err != nil {
		b.Fatal(err)
	}
	seq := newKeySeq(res.Records)
	th := &worker{c: w.newChooser(1, seq, res.Records), rec: newThreadRec(db), one: make([]string, 1),
		vals: []map[string][]byte{{}}, bufs: [][][]byte{make([][]byte, w.FieldCount)}}
	tctx := db.InitThread(ctx, 0, 1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := th.transaction(tctx, db, w, seq, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func splitProps(s string) []*properties.Properties {
	var out []*properties.Properties
	for _, kv := range strings.Split(s, ",") {
		if p, err := properties.LoadString(kv); err == nil && kv != "" {
			out = append(out, p)
		}
	}
	return out
}

// BenchmarkZipfianReuse measures how much of workload A a write buffer can
// serve from memory: of the reads of A's operation stream over
// -ycsb.records records (one thread, seed 1), the share whose record was
// updated within the last W operations, for W from 10k to 1M (a buffer
// that flushes every W operations holds, on average, the updates of the
// last W/2). YCSB's scrambled zipfian draws from 10^10 items hashed onto
// the records, so a large share of its accesses is spread almost
// uniformly. go test -run '^$' -bench ZipfianReuse ./bench/ycsb
// -args -ycsb.records=1000000
func BenchmarkZipfianReuse(b *testing.B) {
	p, err := WorkloadProperties("a")
	if err != nil {
		b.Fatal(err)
	}
	p.MustSet("recordcount", strconv.FormatInt(*benchRecords, 10))
	p.MustSet("operationcount", "2000000")
	w, err := NewWorkload(p)
	if err != nil {
		b.Fatal(err)
	}
	windows := []int64{10_000, 50_000, 100_000, 250_000, 1_000_000}
	for b.Loop() {
		c := w.newChooser(1, newKeySeq(*benchRecords), *benchRecords)
		last := make(map[int64]int64) // key -> op index of its last update
		hits := make([]int64, len(windows))
		var reads int64
		for i := range int64(2_000_000) {
			op := c.nextOp()
			k := c.nextKey()
			if op == kindUpdate {
				last[k] = i
				continue
			}
			if i < 1_000_000 { // the first million operations warm the history up
				continue
			}
			reads++
			if at, ok := last[k]; ok {
				for j, win := range windows {
					if i-at <= win {
						hits[j]++
					}
				}
			}
		}
		for j, win := range windows {
			b.ReportMetric(float64(hits[j])/float64(reads), fmt.Sprintf("hit-frac-%dk", win/1000))
		}
	}
}
