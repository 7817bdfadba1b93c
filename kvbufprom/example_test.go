package kvbufprom_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/kvbufprom"
)

// A host registers one collector per engine, labelled with its shard, and
// serves the registry (promhttp.HandlerFor(reg, promhttp.HandlerOpts{})).
// Here the registry is gathered directly to show a few of the values.
func ExampleNewCollector() {
	dir, err := os.MkdirTemp("", "kvbufprom-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := kvbuf.Open(dir, &kvbuf.Options{FlushInterval: -1})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(kvbufprom.NewCollector(db, &kvbufprom.Options{
		ConstLabels: prometheus.Labels{"shard": "0"},
	}))

	ctx := context.Background()
	users, err := db.KV("users")
	if err != nil {
		log.Fatal(err)
	}
	for op := uint64(1); op <= 3; op++ {
		b := db.NewBatch() // one batch per op: the op is complete when applied
		b.Put(users, []byte(fmt.Sprint("user", op)), []byte("x"))
		if err := db.Apply(ctx, b, op); err != nil {
			log.Fatal(err)
		}
	}
	if err := db.Flush(ctx); err != nil {
		log.Fatal(err)
	}
	if err := users.Put(ctx, []byte("user4"), []byte("x"), 4); err != nil {
		log.Fatal(err)
	}

	mfs, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, mf := range mfs {
		switch name := mf.GetName(); name {
		case "kvbuf_generations_total", "kvbuf_watermark", "kvbuf_highest_op", "kvbuf_receipt_lag_ops", "kvbuf_pending_keys":
			m := mf.GetMetric()[0]
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			fmt.Printf("%s{%s=%q} %g\n", name, m.GetLabel()[0].GetName(), m.GetLabel()[0].GetValue(), v)
		case "kvbuf_flush_duration_seconds":
			fmt.Printf("%s_count %d\n", name, mf.GetMetric()[0].GetHistogram().GetSampleCount())
		}
	}
	// Output:
	// kvbuf_flush_duration_seconds_count 1
	// kvbuf_generations_total{shard="0"} 1
	// kvbuf_highest_op{shard="0"} 4
	// kvbuf_pending_keys{shard="0"} 1
	// kvbuf_receipt_lag_ops{shard="0"} 1
	// kvbuf_watermark{shard="0"} 3
}
