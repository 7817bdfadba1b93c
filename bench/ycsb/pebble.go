package ycsb

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/kvbuf/kvbuf/storage"
	"github.com/magiconair/properties"
)

// pebbleEngine binds pebble v2 opened exactly like kvbuf's store
// (storage.PebbleOptions: same format, memtable size and block cache),
// writing with pebble.NoSync: a write is in the write-ahead log's buffer
// when it returns, not on disk. A record's key is table ":" key.
type pebbleEngine struct {
	db      *pebble.DB
	flushes atomic.Int32 // memtable flushes in progress
}

func pebbleCache(p *properties.Properties) (int64, error) {
	return getInt(p, "pebble.cache_size", storage.DefaultCacheSize, 1, 1<<40)
}

func openPebble(dir string, p *properties.Properties) (engine, error) {
	cache, err := pebbleCache(p)
	if err != nil {
		return nil, err
	}
	e := &pebbleEngine{}
	o := storage.PebbleOptions(&storage.Options{CacheSize: cache})
	o.EventListener.FlushBegin = func(pebble.FlushInfo) { e.flushes.Add(1) }
	o.EventListener.FlushEnd = func(pebble.FlushInfo) { e.flushes.Add(-1) }
	if e.db, err = pebble.Open(dir, o); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *pebbleEngine) flushing() bool { return e.flushes.Load() > 0 }

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
	return e.db.Set(tableKey(t, table, key), row, pebble.NoSync)
}

func (e *pebbleEngine) putMany(_ context.Context, t *thread, table string, keys, rows [][]byte) error {
	b := e.db.NewBatch()
	defer b.Close()
	for i := range keys {
		if err := b.Set(tableKey(t, table, keys[i]), rows[i], nil); err != nil {
			return err
		}
	}
	return b.Commit(pebble.NoSync)
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
	return true, e.db.Set(k, row, pebble.NoSync)
}

func (e *pebbleEngine) delete(_ context.Context, t *thread, table string, keys [][]byte) error {
	if len(keys) == 1 {
		return e.db.Delete(tableKey(t, table, keys[0]), pebble.NoSync)
	}
	b := e.db.NewBatch()
	defer b.Close()
	for _, k := range keys {
		if err := b.Delete(tableKey(t, table, k), nil); err != nil {
			return err
		}
	}
	return b.Commit(pebble.NoSync)
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

func (e *pebbleEngine) close() error { return e.db.Close() }

// flushAll writes the memtables to sstables (the suite's settle step).
func (e *pebbleEngine) flushAll(context.Context) error { return e.db.Flush() }
