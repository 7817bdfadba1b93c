package bench

import (
	"errors"
	"path/filepath"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/storage"
)

// The raw pebble baselines of the write workloads (W6, W8) are the
// configurations a storage engineer would choose to make the same writes
// durable with pebble alone, each given the memory the kvbuf row it races
// has (doc/workloads.md, "Fairness"):
//
//   - the memtable: kvbuf's pending budget (Options.MaxPendingBytes of the
//     engine of the kvbuf row: both buffer that much before their writes
//     must reach sstables), or the engine store's own memtable (rows named
//     "…-store-memtable": pebble configured exactly like kvbuf's store);
//   - the block cache: the engine's (Options.CacheSize) plus any read
//     tier it keeps for flushed data (readTierBytes);
//   - the durability: one synced batch per round, NoSync writes with a
//     synced LogData every FlushInterval and at the end (the loss window
//     of an engine flushing every FlushInterval), or the write-ahead log
//     disabled and DB.Flush every FlushInterval and at the end (a host that
//     replays its own log after a crash, kvbuf's own promise).

// readTierBytes is the memory an engine opened with o keeps for reads of
// flushed data beyond its store's block cache (a tier of recently flushed
// tables; Options.ReadTierBytes after defaults, 0 when the tier is
// disabled): the pebble baselines' block cache gets it on top of the
// engine's CacheSize, so that both sides read with the same memory. r has
// its defaults set.
func readTierBytes(r *kvbuf.Options) int64 { return max(r.ReadTierBytes, 0) }

// baselineCache is the block cache of a pebble baseline racing an engine
// opened with o (nil: defaults).
func baselineCache(o *kvbuf.Options) int64 {
	r := o.EnsureDefaults()
	return r.CacheSize + readTierBytes(r)
}

// baselineInterval is how often the pebble baselines with a loss window
// make their writes durable: the engine's default FlushInterval.
func baselineInterval() time.Duration {
	return (&kvbuf.Options{}).EnsureDefaults().FlushInterval
}

// maxMemtable is pebble's largest MemTableSize (it must be below 4 GiB).
const maxMemtable = 4<<30 - 1

// budgetMemtable is the memtable of a baseline racing an engine opened with
// o: the engine's pending budget, within pebble's limit.
func budgetMemtable(o *kvbuf.Options) uint64 {
	return uint64(min(max(o.EnsureDefaults().MaxPendingBytes, 1<<20), maxMemtable))
}

// pebbleConfig is how one raw pebble baseline database is opened.
type pebbleConfig struct {
	// memtable is pebble's MemTableSize; 0: the engine store's default.
	memtable uint64
	// cache is the block cache; 0: the engine store's default.
	cache int64
	// noWAL disables pebble's write-ahead log (DisableWAL): writes reach
	// disk when a flush writes the memtable.
	noWAL bool
}

// openPebbleConfig opens a raw pebble database in dir/name configured like
// the engine's store (storage.PebbleOptions: format, Bloom filters,
// logger) with c's memtable, cache and WAL, and registers its Close.
func openPebbleConfig(s *Suite, name string, c pebbleConfig) (*pebble.DB, error) {
	o := storage.PebbleOptions(&storage.Options{MemTableSize: c.memtable, CacheSize: c.cache})
	o.DisableWAL = c.noWAL
	pdb, err := pebble.Open(filepath.Join(s.dir, name), o)
	if err != nil {
		return nil, err
	}
	s.onClose(pdb.Close)
	return pdb, nil
}

// logSync makes everything written to pdb without sync durable: a synced
// LogData record syncs the write-ahead log up to it.
func logSync(pdb *pebble.DB) func() error {
	return func() error { return pdb.LogData(nil, pebble.Sync) }
}

// flushMemtable makes everything written to a pdb without a write-ahead log
// durable: DB.Flush writes the memtables to synced sstables.
func flushMemtable(pdb *pebble.DB) func() error { return pdb.Flush }

// withDurableEvery runs write while a goroutine calls durable every
// interval (a loss window of interval, as an engine flushing every
// interval), then calls durable once more after write, so that everything
// write wrote is durable when it returns. All of it runs on the caller's
// clock.
func withDurableEvery(interval time.Duration, durable, write func() error) error {
	done := make(chan struct{})
	var bgErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := durable(); err != nil {
					bgErr = err
					return
				}
			}
		}
	})
	err := write()
	close(done)
	wg.Wait()
	if err = errors.Join(err, bgErr); err != nil {
		return err
	}
	return durable()
}
