package ycsb

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/magiconair/properties"

	"github.com/kvbuf/kvbuf/internal/workload"
)

// TestPhaseLeavesNoBackgroundWork checks that the load and each measured
// run settle their engine before its Close, so that the next phase's Open
// finds no memtable to flush and no compaction to resume: otherwise the
// next run's disk figure would count work it did not cause. A small
// memtable makes the load and the run leave both behind when they are not
// settled.
func TestPhaseLeavesNoBackgroundWork(t *testing.T) {
	ctx := context.Background()
	explicit := properties.MustLoadString("pebble.memtable_size=65536\n")
	cfg, loadProps, wls, err := Config{Engines: []string{"pebble"}, Workloads: []string{"a"}, Records: 3000, Ops: 3000,
		Warmup: 500, Rounds: 1, Seed: 1, Props: explicit}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	mode, err := modeProperties(DurabilityWindow, loadProps)
	if err != nil {
		t.Fatal(err)
	}
	loadProps, wl := withMode(loadProps, explicit, mode), withMode(wls[0], explicit, mode)
	loadW, err := NewWorkload(loadProps)
	if err != nil {
		t.Fatal(err)
	}
	es := &engineState{name: "pebble", dir: filepath.Join(t.TempDir(), "pebble")}
	var done atomic.Int64

	// nextOpen opens the engine as the next phase would, waits for what
	// its Open started and checks that it wrote no sstable.
	nextOpen := func(phase string) {
		t.Helper()
		db, err := Open(es.name, es.dir, loadProps)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := db.Close(); err != nil {
				t.Error(err)
			}
		}()
		e := db.e.(*pebbleEngine)
		if err := e.waitIdle(ctx); err != nil {
			t.Fatal(err)
		}
		m := e.db.Metrics()
		tot := m.Total()
		// Open flushes the replayed log; the Close's synced LogData leaves
		// one holding no key, whose flush writes nothing.
		if written := tot.TableBytesFlushed + tot.TableBytesCompacted; written != 0 || m.Compact.Count != 0 {
			t.Errorf("after the %s, the next Open wrote %d bytes of sstables (%d flushes, %d compactions), want none", phase, written, m.Flush.Count, m.Compact.Count)
		}
	}

	res, err := loadOne(ctx, cfg, es, loadProps, loadW, 1, &done)
	if err != nil {
		t.Fatal(err)
	}
	es.records = res.Records
	nextOpen("load")
	res, err = runOne(ctx, cfg, es, wl, 1, 2, &done)
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops == 0 || res.UserBytes == 0 {
		t.Fatalf("run: %d ops, %d user bytes", res.Ops, res.UserBytes)
	}
	nextOpen("run")
}

// TestSettle checks the settle step's bounds: a wait ends with its
// context, an engine that waits reports idle (kvbuf, pebble, bbolt), and
// badger, which cannot tell when its compactions are done, gets no disk
// figure.
func TestSettle(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := waitUntil(ctx, func() bool { return true }); !errors.Is(err, context.Canceled) {
		t.Errorf("waitUntil, busy forever, context cancelled: %v", err)
	}
	looks := 0
	if err := waitUntil(context.Background(), func() bool { looks++; return looks < 3 }); err != nil || looks != 2+workload.IdleLooks {
		t.Errorf("waitUntil, busy twice: %v after %d looks, want nil after %d", err, looks, 2+workload.IdleLooks)
	}
	for _, engine := range Engines {
		t.Run(engine, func(t *testing.T) {
			db := openTest(t, engine)
			defer func() {
				if err := db.Close(); err != nil {
					t.Error(err)
				}
			}()
			if err := db.Insert(context.Background(), "t", "k", map[string][]byte{"field0": []byte("v")}); err != nil {
				t.Fatal(err)
			}
			idle, err := settle(context.Background(), db)
			if err != nil {
				t.Fatal(err)
			}
			if want := engine != "badger"; idle != want {
				t.Errorf("settle: idle %v, want %v", idle, want)
			}
			if _, err := settle(ctx, db); engine != "badger" && !errors.Is(err, context.Canceled) {
				t.Errorf("settle, context cancelled: %v", err)
			}
		})
	}
}

// TestDiskOverAllRounds: a row's disk figure is its rounds' disk bytes
// summed over their user bytes summed, with the per-round extremes, not
// the median of the per-round figures; a round that wrote and left no
// figure (its settle step found the engine still busy), or a negative
// total, leaves the row with none.
func TestDiskOverAllRounds(t *testing.T) {
	round := func(disk, user int64, measured bool) *Result {
		return &Result{Ops: 1, Elapsed: time.Second, UserBytes: user, DiskBytes: disk, DiskMeasured: measured}
	}
	row := summarize("a", 1, "kvbuf", DurabilityWindow, []*Result{round(1, 1, true), round(1, 1, true), round(10, 1, true)})
	if row.DiskPerUserByte != 4 || row.DiskMin != 1 || row.DiskMax != 10 {
		t.Errorf("rounds 1, 1, 10: figure %v (%v–%v), want 4 (1–10)", row.DiskPerUserByte, row.DiskMin, row.DiskMax)
	}
	row = summarize("a", 1, "kvbuf", DurabilityWindow, []*Result{round(1, 1, true), round(27, 3, true)})
	if row.DiskPerUserByte != 7 || row.DiskMin != 1 || row.DiskMax != 9 {
		t.Errorf("rounds 1/1, 27/3: figure %v (%v–%v), want 7 (1–9)", row.DiskPerUserByte, row.DiskMin, row.DiskMax)
	}
	for name, rs := range map[string][]*Result{
		"a round lost": {round(1, 1, true), round(0, 1, false)},
		"negative":     {round(-5, 1, true), round(1, 1, true)},
	} {
		if row := summarize("a", 1, "kvbuf", DurabilityWindow, rs); row.DiskPerUserByte != 0 || row.DiskMin != 0 || row.DiskMax != 0 {
			t.Errorf("%s: figure %v (%v–%v), want none", name, row.DiskPerUserByte, row.DiskMin, row.DiskMax)
		}
	}
}

// stillBusy is an engine whose background work never ends before the
// settle step's deadline.
type stillBusy struct{ engine }

func (stillBusy) waitIdle(context.Context) error { return workload.ErrStillBusy }

// TestSettleStillBusy: a settle step that finds the engine still busy at
// its deadline is no error, and leaves the disk figure out.
func TestSettleStillBusy(t *testing.T) {
	idle, err := settle(t.Context(), &DB{name: "busy", e: stillBusy{}})
	if idle || err != nil {
		t.Errorf("settle of an engine still busy: idle %v, %v; want not idle, no error", idle, err)
	}
}

// TestStoreWorkCounted: the load of kvbuf and of pebble counts its store's
// work through the settle step: every byte of user data went through the
// store (its log, or an ingested or flushed table), so the store wrote at
// least that much, in at least one flush or ingestion; an engine with no
// store counters (bbolt) leaves it unmeasured. A row sums the rounds that
// measured it.
func TestStoreWorkCounted(t *testing.T) {
	ctx := context.Background()
	for _, engine := range []string{"kvbuf", "pebble", "bbolt"} {
		t.Run(engine, func(t *testing.T) {
			cfg, loadProps, _, err := Config{Engines: []string{engine}, Workloads: []string{"a"}, Records: 2000, Ops: 100, Rounds: 1, Seed: 1}.resolve()
			if err != nil {
				t.Fatal(err)
			}
			mode, err := modeProperties(DurabilityWindow, loadProps)
			if err != nil {
				t.Fatal(err)
			}
			loadProps = withMode(loadProps, nil, mode)
			loadW, err := NewWorkload(loadProps)
			if err != nil {
				t.Fatal(err)
			}
			es := &engineState{name: engine, dir: filepath.Join(t.TempDir(), engine)}
			var done atomic.Int64
			res, err := loadOne(ctx, cfg, es, loadProps, loadW, 1, &done)
			if err != nil {
				t.Fatal(err)
			}
			if engine == "bbolt" {
				if res.StoreMeasured {
					t.Fatalf("bbolt: store work measured: %+v", res.Store)
				}
				return
			}
			s := res.Store
			if !res.StoreMeasured || s.WrittenBytes < res.UserBytes || s.Flushes+s.Ingests == 0 {
				t.Fatalf("%s load of %d user bytes: store work %+v (measured %v), want at least the user bytes written, in a flush or an ingestion",
					engine, res.UserBytes, s, res.StoreMeasured)
			}
		})
	}
	w := StoreWork{Flushes: 1, Compactions: 2, Ingests: 3, CompactedBytes: 4, WrittenBytes: 5}
	rs := []*Result{
		{Ops: 1, Elapsed: time.Second, Store: w, StoreMeasured: true},
		{Ops: 1, Elapsed: time.Second, Store: w.add(w), StoreMeasured: true},
		{Ops: 1, Elapsed: time.Second, Store: w, StoreMeasured: false},
	}
	row := summarize("a", 1, "kvbuf", DurabilityWindow, rs)
	if want := (StoreWork{3, 6, 9, 12, 15}); row.Store != want || row.StoreRounds != 2 {
		t.Errorf("row's store work %+v over %d rounds, want %+v over 2", row.Store, row.StoreRounds, want)
	}
}
