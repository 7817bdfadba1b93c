package ycsb

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/magiconair/properties"
)

// TestKvbufHostLog: with kvbuf.host_log every write op is numbered and
// appended to the host's log beside the engine (one record per op, in op
// order, with its keys and rows; deletes without rows) before the engine
// applies it, and the engine's watermark covers the ops after Close.
func TestKvbufHostLog(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "engine")
	db, err := Open("kvbuf", dir, properties.MustLoadString("fieldcount=1\nkvbuf.host_log=true\nkvbuf.flush_interval=10ms\n"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := db.InitThread(context.Background(), 0, 1)
	v := map[string][]byte{"field0": []byte("v")}
	if err := db.Insert(ctx, "t", "a", v); err != nil {
		t.Fatal(err)
	}
	if err := db.BatchInsert(ctx, "t", []string{"b", "c"}, []map[string][]byte{v, v}); err != nil {
		t.Fatal(err)
	}
	if err := db.Delete(ctx, "t", "a"); err != nil {
		t.Fatal(err)
	}
	e := db.e.(*kvbufEngine)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if wm := e.db.Watermark(); wm != 3 {
		t.Errorf("watermark %d after 3 ops", wm)
	}
	b, err := os.ReadFile(dir + hostLogSuffix)
	if err != nil {
		t.Fatal(err)
	}
	var ops []uint64
	var keys []string
	for len(b) > 0 {
		ops = append(ops, binary.BigEndian.Uint64(b))
		n := binary.BigEndian.Uint32(b[8:])
		b = b[12:]
		for range n {
			kl := binary.BigEndian.Uint32(b)
			keys = append(keys, string(b[4:4+kl]))
			b = b[4+kl:]
			rl := binary.BigEndian.Uint32(b)
			b = b[4+rl:]
		}
	}
	if !slices.Equal(ops, []uint64{1, 2, 3}) || !slices.Equal(keys, []string{"a", "b", "c", "a"}) {
		t.Errorf("host log holds ops %v, keys %v", ops, keys)
	}
}

// TestKvbufHostLogWindow: the host log is synced every loss window
// (lossWindow), also when kvbuf's interval flushes are off, where it alone
// keeps the window.
func TestKvbufHostLogWindow(t *testing.T) {
	for props, want := range map[string]time.Duration{
		"kvbuf.flush_interval=20ms\n":                             20 * time.Millisecond,
		"kvbuf.flush_interval=-1s\n":                              time.Second,
		"kvbuf.flush_interval=-1s\nkvbuf.host_log_interval=7ms\n": 7 * time.Millisecond,
	} {
		db, err := Open("kvbuf", filepath.Join(t.TempDir(), "engine"), properties.MustLoadString("kvbuf.host_log=true\n"+props))
		if err != nil {
			t.Fatal(err)
		}
		if got := db.e.(*kvbufEngine).log.interval; got != want {
			t.Errorf("%q: host log synced every %v, want %v", props, got, want)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestKvbufFlushWrites: with kvbuf.flush_writes every write is durable when
// it returns: nothing is pending after it.
func TestKvbufFlushWrites(t *testing.T) {
	db, err := Open("kvbuf", t.TempDir(), properties.MustLoadString("fieldcount=1\nkvbuf.flush_writes=true\nkvbuf.flush_interval=-1s\n"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := db.InitThread(context.Background(), 0, 1)
	e := db.e.(*kvbufEngine)
	for i, write := range []func() error{
		func() error { return db.Insert(ctx, "t", "a", map[string][]byte{"field0": []byte("v")}) },
		func() error { return db.Update(ctx, "t", "a", map[string][]byte{"field0": []byte("w")}) },
		func() error { return db.Delete(ctx, "t", "a") },
	} {
		if err := write(); err != nil {
			t.Fatal(err)
		}
		if m := e.db.Metrics(); m.PendingBytes != 0 || m.Flushes != int64(i+1) {
			t.Errorf("after write %d: %d bytes pending, %d flushes", i, m.PendingBytes, m.Flushes)
		}
	}
}

// TestPebbleAndBadgerDurability: the properties that give pebble and badger
// a durability mode take effect, and bad values are ErrBadProperty.
func TestPebbleAndBadgerDurability(t *testing.T) {
	db, err := Open("pebble", t.TempDir(), properties.MustLoadString("pebble.sync_writes=true\npebble.memtable_size=8388608\npebble.cache_size=1048576\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := db.e.(*pebbleEngine)
	if e.wo != pebble.Sync || e.syncer != nil {
		t.Errorf("sync_writes: write options %v, interval syncer %v", e.wo, e.syncer)
	}
	db.Close()
	db, err = Open("pebble", t.TempDir(), properties.MustLoadString("pebble.sync_interval=5ms\n"))
	if err != nil {
		t.Fatal(err)
	}
	if e := db.e.(*pebbleEngine); e.wo != pebble.NoSync || e.syncer == nil {
		t.Errorf("sync_interval: write options %v, interval syncer %v", e.wo, e.syncer)
	}
	db.Close()
	db, err = Open("badger", t.TempDir(), properties.MustLoadString("badger.sync_interval=5ms\nbadger.memtable_size=8388608\nbadger.num_memtables=2\n"))
	if err != nil {
		t.Fatal(err)
	}
	if e := db.e.(*badgerEngine); e.syncer == nil || e.db.Opts().MemTableSize != 8<<20 || e.db.Opts().NumMemtables != 2 {
		t.Errorf("badger: syncer %v, options %+v", e.syncer, e.db.Opts())
	}
	db.Close()
	for _, bad := range []struct{ engine, prop string }{
		{"pebble", "pebble.memtable_size=-1"}, {"pebble", "pebble.sync_writes=often"}, {"pebble", "pebble.sync_interval=soon"},
		{"badger", "badger.num_memtables=0"}, {"badger", "badger.sync_interval=x"}, {"kvbuf", "kvbuf.host_log=maybe"},
		{"kvbuf", "kvbuf.flush_writes=2"},
	} {
		if _, err := Open(bad.engine, t.TempDir(), properties.MustLoadString(bad.prop)); !errors.Is(err, ErrBadProperty) {
			t.Errorf("%s %q: %v, want ErrBadProperty", bad.engine, bad.prop, err)
		}
	}
}

// TestModeProperties: each durability mode sizes the other engines from
// kvbuf's options (its pending budget as their memtables, its cache plus
// its read tier as their block caches, its flush interval as their sync
// interval), and the run's own properties win.
func TestModeProperties(t *testing.T) {
	p := properties.MustLoadString("kvbuf.max_pending_bytes=33554432\nkvbuf.flush_interval=2s\n")
	win, err := modeProperties(DurabilityWindow, p)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"kvbuf.host_log": "true", "pebble.sync_interval": "2s", "badger.sync_interval": "2s",
		"pebble.memtable_size": "33554432", "badger.memtable_size": "33554432",
		// kvbuf's 8 MiB cache and its 32 MiB read tier (the defaults).
		"pebble.cache_size": "41943040", "badger.block_cache_size": "41943040"} {
		if win[k] != want {
			t.Errorf("window: %s=%q, want %q", k, win[k], want)
		}
	}
	for tier, want := range map[string]string{"-1": "8388608", "1048576": "9437184", "0": "41943040"} {
		m, err := modeProperties(DurabilityWindow, properties.MustLoadString("kvbuf.read_tier_bytes="+tier+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		if m["pebble.cache_size"] != want || m["badger.block_cache_size"] != want {
			t.Errorf("read tier %s: pebble cache %s, badger cache %s, want %s for both", tier, m["pebble.cache_size"], m["badger.block_cache_size"], want)
		}
	}
	// The loss window: the host log's interval if set, else kvbuf's
	// FlushInterval, else (interval flushes off) kvbuf's default; the
	// other engines sync their logs as often.
	for props, want := range map[string]string{
		"kvbuf.flush_interval=-1s\n":                               "1s",
		"kvbuf.flush_interval=-1s\nkvbuf.host_log_interval=3s\n":   "3s",
		"kvbuf.flush_interval=2s\nkvbuf.host_log_interval=500ms\n": "500ms",
	} {
		m, err := modeProperties(DurabilityWindow, properties.MustLoadString(props))
		if err != nil {
			t.Fatal(err)
		}
		if m["pebble.sync_interval"] != want || m["badger.sync_interval"] != want {
			t.Errorf("%q: pebble sync every %s, badger every %s, want %s", props, m["pebble.sync_interval"], m["badger.sync_interval"], want)
		}
	}
	for _, bad := range []string{"kvbuf.host_log_interval=-1s\n", "kvbuf.host_log_interval=soon\n"} {
		if _, err := modeProperties(DurabilityWindow, properties.MustLoadString(bad)); !errors.Is(err, ErrBadProperty) {
			t.Errorf("%q: %v, want ErrBadProperty", bad, err)
		}
		if _, err := Open("kvbuf", t.TempDir(), properties.MustLoadString(bad+"kvbuf.host_log=true\n")); !errors.Is(err, ErrBadProperty) {
			t.Errorf("Open kvbuf with %q: %v, want ErrBadProperty", bad, err)
		}
	}
	acked, err := modeProperties(DurabilityAcked, properties.NewProperties())
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"kvbuf.flush_writes": "true", "pebble.sync_writes": "true", "badger.sync_writes": "true",
		"pebble.memtable_size": "67108864"} {
		if acked[k] != want {
			t.Errorf("acked: %s=%q, want %q", k, acked[k], want)
		}
	}
	if _, err := modeProperties("sometimes", p); !errors.Is(err, ErrBadProperty) {
		t.Errorf("unknown mode: %v", err)
	}
	// The run's properties are already merged into p (Config.resolve):
	// withMode leaves them alone.
	explicit := properties.MustLoadString("pebble.memtable_size=4194304\n")
	if v, _ := withMode(p, nil, win).Get("pebble.memtable_size"); v != "33554432" {
		t.Errorf("memtable %q", v)
	}
	p.Merge(explicit)
	if v, _ := withMode(p, explicit, win).Get("pebble.memtable_size"); v != "4194304" {
		t.Errorf("an explicit property was overridden: %q", v)
	}
	if slices.Contains(modeEngines(DurabilityWindow, Engines), "bbolt") || !slices.Contains(modeEngines(DurabilityAcked, Engines), "bbolt") {
		t.Error("bbolt runs in acked only")
	}
}

// TestBenchDurability runs a tiny comparison in both modes: every row says
// its mode, bbolt appears in acked only, every run's rate counts its Close,
// and kvbuf's speedups carry their per-round range.
func TestBenchDurability(t *testing.T) {
	rows, err := Bench(context.Background(), Config{Engines: []string{"kvbuf", "pebble", "bbolt"}, Workloads: []string{"a"},
		Records: 300, Ops: 300, Rounds: 2, Dir: t.TempDir(), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	disk := map[bool]int{} // rows with and without a disk figure
	for _, r := range rows {
		count[r.Durability+"/"+r.Engine]++
		if r.Workload == "a" && (len(r.RoundOpsPerSec) != 2 || r.OpsPerSec <= 0) {
			t.Errorf("%s/%s: rates %v", r.Durability, r.Engine, r.RoundOpsPerSec)
		}
		// Every engine writes what it is given to disk at least once (a
		// log, a table, a B-tree page) by the time it is closed.
		if r.DiskPerUserByte != 0 && r.DiskPerUserByte < 0.5 {
			t.Errorf("%s/%s/%s: %v disk bytes per user byte", r.Durability, r.Workload, r.Engine, r.DiskPerUserByte)
		}
		disk[r.DiskPerUserByte > 0]++
		if r.Engine != "kvbuf" && (r.KvbufSpeedup <= 0 || r.SpeedupMin > r.KvbufSpeedup || r.SpeedupMax < r.KvbufSpeedup) {
			t.Errorf("%s/%s/%s: speedup %v (%v–%v)", r.Durability, r.Workload, r.Engine, r.KvbufSpeedup, r.SpeedupMin, r.SpeedupMax)
		}
	}
	// Every row writes (the load, workload a's updates): all of them have
	// a disk figure, or (no count on this system) none.
	if disk[true] > 0 && disk[false] > 0 {
		t.Errorf("rows with a disk figure: %d, without: %d", disk[true], disk[false])
	}
	want := map[string]int{"window/kvbuf": 2, "window/pebble": 2, "acked/kvbuf": 2, "acked/pebble": 2, "acked/bbolt": 2}
	if len(count) != len(want) {
		t.Errorf("rows per mode and engine: %v, want %v", count, want)
	}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("%s: %d rows, want %d (load and a)", k, count[k], n)
		}
	}
	_, err = Bench(context.Background(), Config{Engines: []string{"bbolt"}, Durability: []string{DurabilityWindow}, Records: 10, Ops: 10, Dir: t.TempDir()})
	if !errors.Is(err, ErrBadProperty) || !strings.Contains(err.Error(), "bbolt") {
		t.Errorf("bbolt in window mode only: %v", err)
	}
	_, err = Bench(context.Background(), Config{Durability: []string{"never"}, Records: 10, Ops: 10, Dir: t.TempDir()})
	if !errors.Is(err, ErrBadProperty) {
		t.Errorf("unknown mode: %v", err)
	}
}
