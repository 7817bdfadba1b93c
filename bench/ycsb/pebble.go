package ycsb

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/kvbuf/kvbuf/storage"
	"github.com/magiconair/properties"
)

// pebbleEngine binds pebble v2 opened like kvbuf's store
// (storage.PebbleOptions: the same format, Bloom filters and logger) with
// the block cache and memtable its properties give (pebble.cache_size,
// default storage.DefaultCacheSize; pebble.memtable_size, default the
// store's). Writes use pebble.NoSync (a write is in the write-ahead log's
// buffer when it returns), plus a synced LogData every
// pebble.sync_interval if set (the loss window of an engine flushing that
// often), or pebble.Sync with pebble.sync_writes (durable when it
// returns; concurrent writers share the syncs). A record's key is table
// ":" key.
type pebbleEngine struct {
	db      *pebble.DB
	wo      *pebble.WriteOptions
	flushes atomic.Int32 // memtable flushes in progress
	syncer  *ticker      // the interval LogData, if any
}

// pebbleOptions reads the pebble binding's properties.
func pebbleOptions(p *properties.Properties) (o *pebble.Options, syncWrites bool, interval time.Duration, err error) {
	cache, err := getInt(p, "pebble.cache_size", storage.DefaultCacheSize, 1, 1<<40)
	if err != nil {
		return nil, false, 0, err
	}
	memtable, err := getInt(p, "pebble.memtable_size", 0, 0, 4<<30-1)
	if err != nil {
		return nil, false, 0, err
	}
	if syncWrites, err = getBool(p, "pebble.sync_writes", false); err != nil {
		return nil, false, 0, err
	}
	if interval, err = getDuration(p, "pebble.sync_interval", 0); err != nil {
		return nil, false, 0, err
	}
	return storage.PebbleOptions(&storage.Options{CacheSize: cache, MemTableSize: uint64(memtable)}), syncWrites, interval, nil
}

func openPebble(dir string, p *properties.Properties) (engine, error) {
	o, syncWrites, interval, err := pebbleOptions(p)
	if err != nil {
		return nil, err
	}
	e := &pebbleEngine{wo: pebble.NoSync}
	if syncWrites {
		e.wo = pebble.Sync
	}
	o.EventListener.FlushBegin = func(pebble.FlushInfo) { e.flushes.Add(1) }
	o.EventListener.FlushEnd = func(pebble.FlushInfo) { e.flushes.Add(-1) }
	if e.db, err = pebble.Open(dir, o); err != nil {
		return nil, err
	}
	if interval > 0 && !syncWrites {
		e.syncer = startTicker(interval, func() error { return e.db.LogData(nil, pebble.Sync) })
	}
	return e, nil
}

func (e *pebbleEngine) flushing() bool { return e.flushes.Load() > 0 }

// storeWork reads pebble's metrics as kvbuf's store reports its own
// (storage.PebbleLSMStats).
func (e *pebbleEngine) storeWork() StoreWork {
	st := storage.PebbleLSMStats(e.db.Metrics())
	return StoreWork{st.Flushes, st.Compactions, int64(st.Ingests), int64(st.CompactedBytes), int64(st.BytesWritten)}
}

// tableKey returns table ":" key in t.scratch.
func tableKey(t *thread, table string, key []byte) []byte {
	t.scratch = append(append(append(t.scratch[:0], table...), ':'), key...)
	return t.scratch
}

func (e *pebbleEngine) get(t *thread, table string, key, dst []byte) ([]byte, bool, error) {
	v, closer, err := e.db.Get(tableKey(t, table, key))
	if errors.Is(err, pebble.ErrNotFound) {
		return dst, false, nil
	}
	if err != nil {
		return dst, false, err
	}
	dst = append(dst, v...)
	return dst, true, closer.Close()
}

func (e *pebbleEngine) getMany(t *thread, table string, keys, rows [][]byte, buf []byte) ([]byte, error) {
	for i, k := range keys {
		start := len(buf)
		var found bool
		var err error
		if buf, found, err = e.get(t, table, k, buf); err != nil {
			return buf, err
		}
		rows[i] = nil
		if found {
			rows[i] = buf[start:len(buf):len(buf)]
		}
	}
	// buf may have moved while growing: cut the rows again from the end.
	return recut(buf, rows), nil
}

// recut points rows (subslices of some earlier version of buf, in order)
// into the final buf.
func recut(buf []byte, rows [][]byte) []byte {
	off := 0
	for i, r := range rows {
		if r == nil {
			continue
		}
		rows[i] = buf[off : off+len(r) : off+len(r)]
		off += len(r)
	}
	return buf
}

func (e *pebbleEngine) put(_ context.Context, t *thread, table string, key, row []byte) error {
	return e.db.Set(tableKey(t, table, key), row, e.wo)
}

func (e *pebbleEngine) putMany(_ context.Context, t *thread, table string, keys, rows [][]byte) error {
	b := e.db.NewBatch()
	defer b.Close()
	for i := range keys {
		if err := b.Set(tableKey(t, table, keys[i]), rows[i], nil); err != nil {
			return err
		}
	}
	return b.Commit(e.wo)
}

func (e *pebbleEngine) update(_ context.Context, t *thread, table string, key []byte, merge mergeFunc) (bool, error) {
	k := tableKey(t, table, key)
	old, closer, err := e.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	row, err := merge(old, t.out[:0])
	if cerr := closer.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return true, err
	}
	t.out = row
	return true, e.db.Set(k, row, e.wo)
}

func (e *pebbleEngine) delete(_ context.Context, t *thread, table string, keys [][]byte) error {
	if len(keys) == 1 {
		return e.db.Delete(tableKey(t, table, keys[0]), e.wo)
	}
	b := e.db.NewBatch()
	defer b.Close()
	for _, k := range keys {
		if err := b.Delete(tableKey(t, table, k), nil); err != nil {
			return err
		}
	}
	return b.Commit(e.wo)
}

func (e *pebbleEngine) scan(t *thread, table string, start []byte, count int, fn func(key, row []byte) error) error {
	lower := tableKey(t, table, start)
	upper := append([]byte(table), ':'+1)
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	n := 0
	for ok := it.First(); ok && n < count; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return err
		}
		if err := fn(it.Key()[len(table)+1:], v); err != nil {
			it.Close()
			return err
		}
		n++
	}
	return it.Close()
}

// durable syncs the write-ahead log: every write so far is durable.
func (e *pebbleEngine) durable(context.Context) error { return e.db.LogData(nil, pebble.Sync) }

// close stops the interval sync, syncs the log and closes the database.
func (e *pebbleEngine) close() error {
	var err error
	if e.syncer != nil {
		err = e.syncer.stop()
	}
	return errors.Join(err, e.durable(context.Background()), e.db.Close())
}

// flushAll writes the memtables to sstables (the suite's settle step).
func (e *pebbleEngine) flushAll(context.Context) error { return e.db.Flush() }

// waitIdle waits until pebble has no flush or compaction running on
// workload.IdleLooks looks in a row (waitUntil): pebble schedules a
// compaction's successor as it finishes (a moment after it counts it
// done), so none running on looks workload.IdlePoll apart is none pending.
func (e *pebbleEngine) waitIdle(ctx context.Context) error {
	return waitUntil(ctx, func() bool {
		m := e.db.Metrics()
		return m.Compact.NumInProgress > 0 || m.Flush.NumInProgress > 0
	})
}
