package ycsb

import (
	"context"
	"flag"
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
	if err := settle(ctx, db); err != nil {
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
