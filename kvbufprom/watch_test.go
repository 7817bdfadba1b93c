package kvbufprom

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvbuf/kvbuf"
)

// TestWatchMetrics drives a real engine's change feed with retention (a
// durable watch reading two ops' changes, then a restart) and compares the
// kvbuf_watch_* series.
func TestWatchMetrics(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := &kvbuf.Options{FlushInterval: -1, MaxPendingBytes: -1, WatchRetain: &kvbuf.WatchRetention{}}
	db, err := kvbuf.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	users, err := db.KV("users")
	if err != nil {
		t.Fatal(err)
	}
	w, err := db.Watch(ctx, &kvbuf.WatchOptions{From: 1, Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	for op := uint64(1); op <= 2; op++ {
		if err := users.Put(ctx, []byte(fmt.Sprint("k", op)), []byte("v"), op); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.EndOp(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < 3; n++ { // two puts and the mark at 2
		if _, err := w.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c := NewCollector(db, nil)
	m := db.Metrics()
	if m.WatchRetainedBytes <= 0 || m.WatchBufferBytes <= 0 {
		t.Fatalf("retained %d bytes, buffer %d bytes", m.WatchRetainedBytes, m.WatchBufferBytes)
	}
	want := fmt.Sprintf(`
# HELP kvbuf_watch_subscribers Open watches of the change feed.
# TYPE kvbuf_watch_subscribers gauge
kvbuf_watch_subscribers 1
# HELP kvbuf_watch_delivered_total Change-feed events (changes and resolved marks) watches read.
# TYPE kvbuf_watch_delivered_total counter
kvbuf_watch_delivered_total 3
# HELP kvbuf_watch_lagged_total Watches ended because they fell behind the change feed's buffer (ErrLagged).
# TYPE kvbuf_watch_lagged_total counter
kvbuf_watch_lagged_total 0
# HELP kvbuf_watch_overflows_total Times the change feed's unresolved changes outgrew its bound and every watch lagged.
# TYPE kvbuf_watch_overflows_total counter
kvbuf_watch_overflows_total 0
# HELP kvbuf_watch_buffer_bytes Memory the change feed holds: resolved and unresolved changes.
# TYPE kvbuf_watch_buffer_bytes gauge
kvbuf_watch_buffer_bytes %d
# HELP kvbuf_watch_resolved_op The op of the change feed's newest resolved mark.
# TYPE kvbuf_watch_resolved_op gauge
kvbuf_watch_resolved_op 2
# HELP kvbuf_watch_durable_op The op of the newest resolved mark durable-mode watches may read.
# TYPE kvbuf_watch_durable_op gauge
kvbuf_watch_durable_op 2
# HELP kvbuf_watch_retained_bytes Bytes of changes retained in the store for watches that resume after a restart.
# TYPE kvbuf_watch_retained_bytes gauge
kvbuf_watch_retained_bytes %d
# HELP kvbuf_watch_retained_from_op The lowest op a watch may resume from with the changes retained in the store (0 without retention).
# TYPE kvbuf_watch_retained_from_op gauge
kvbuf_watch_retained_from_op 1
`, m.WatchBufferBytes, m.WatchRetainedBytes)
	names := []string{"kvbuf_watch_subscribers", "kvbuf_watch_delivered_total", "kvbuf_watch_lagged_total", "kvbuf_watch_overflows_total",
		"kvbuf_watch_buffer_bytes", "kvbuf_watch_resolved_op", "kvbuf_watch_durable_op", "kvbuf_watch_retained_bytes", "kvbuf_watch_retained_from_op"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	w.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// After a restart the retained bytes are read back from the store.
	db, err = kvbuf.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := db.Metrics(); got.WatchRetainedBytes != m.WatchRetainedBytes || got.WatchRetainedFrom != 1 || got.WatchSubscribers != 0 {
		t.Errorf("after a restart: retained %d bytes from op %d, %d watches; want %d bytes from op 1, none",
			got.WatchRetainedBytes, got.WatchRetainedFrom, got.WatchSubscribers, m.WatchRetainedBytes)
	}
}
