package ycsb

import (
	"context"
	"errors"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/magiconair/properties"
)

// badgerEngine binds badger v4 with its default options except SyncWrites
// off (badger's default too) and no logger (badger logs to stderr by
// default); badger.sync_writes syncs every write, badger.sync_interval
// calls DB.Sync every interval (the loss window of an engine flushing that
// often), badger.memtable_size, badger.num_memtables and
// badger.block_cache_size size its memory. Writes are transactions
// (DB.Update); an update reads and writes the record in one transaction,
// retried on ErrConflict as badger asks. A record's key is table ":" key.
type badgerEngine struct {
	db     *badger.DB
	syncer *ticker
}

// badgerMinMemtable is the smallest memtable badger opens with its default
// value threshold (1 MiB: a batch may be 15% of the memtable).
const badgerMinMemtable = 8 << 20

// badgerMaxRetries bounds the retries of a conflicting update.
const badgerMaxRetries = 100

func badgerOptions(dir string, p *properties.Properties) (badger.Options, time.Duration, error) {
	o := badger.DefaultOptions(dir).WithLogger(nil).WithSyncWrites(false)
	sync, err := getBool(p, "badger.sync_writes", false)
	if err != nil {
		return o, 0, err
	}
	cache, err := getInt(p, "badger.block_cache_size", o.BlockCacheSize, 0, 1<<40)
	if err != nil {
		return o, 0, err
	}
	memtable, err := getInt(p, "badger.memtable_size", o.MemTableSize, 1<<20, 1<<40)
	if err != nil {
		return o, 0, err
	}
	memtables, err := getInt(p, "badger.num_memtables", int64(o.NumMemtables), 1, 64)
	if err != nil {
		return o, 0, err
	}
	interval, err := getDuration(p, "badger.sync_interval", 0)
	if err != nil {
		return o, 0, err
	}
	return o.WithSyncWrites(sync).WithBlockCacheSize(cache).WithMemTableSize(memtable).WithNumMemtables(int(memtables)), interval, nil
}

func openBadger(dir string, p *properties.Properties) (engine, error) {
	o, interval, err := badgerOptions(dir, p)
	if err != nil {
		return nil, err
	}
	db, err := badger.Open(o)
	if err != nil {
		return nil, err
	}
	e := &badgerEngine{db: db}
	if interval > 0 && !o.SyncWrites {
		e.syncer = startTicker(interval, db.Sync)
	}
	return e, nil
}

func (e *badgerEngine) get(t *thread, table string, key, dst []byte) ([]byte, bool, error) {
	found := false
	err := e.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(tableKey(t, table, key))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		return item.Value(func(v []byte) error { dst = append(dst, v...); return nil })
	})
	return dst, found, err
}

func (e *badgerEngine) getMany(t *thread, table string, keys, rows [][]byte, buf []byte) ([]byte, error) {
	err := e.db.View(func(txn *badger.Txn) error {
		for i, k := range keys {
			rows[i] = nil
			item, err := txn.Get(tableKey(t, table, k))
			if errors.Is(err, badger.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			start := len(buf)
			if err := item.Value(func(v []byte) error { buf = append(buf, v...); return nil }); err != nil {
				return err
			}
			rows[i] = buf[start:len(buf):len(buf)]
		}
		return nil
	})
	return recut(buf, rows), err
}

func (e *badgerEngine) put(_ context.Context, t *thread, table string, key, row []byte) error {
	return e.db.Update(func(txn *badger.Txn) error { return txn.Set(tableKey(t, table, key), row) })
}

func (e *badgerEngine) putMany(_ context.Context, t *thread, table string, keys, rows [][]byte) error {
	return e.db.Update(func(txn *badger.Txn) error {
		// The transaction keeps every key until it commits: one buffer
		// holds them all.
		t.scratch = t.scratch[:0]
		for _, k := range keys {
			t.scratch = append(append(append(t.scratch, table...), ':'), k...)
		}
		off := 0
		for i, k := range keys {
			n := len(table) + 1 + len(k)
			if err := txn.Set(t.scratch[off:off+n:off+n], rows[i]); err != nil {
				return err
			}
			off += n
		}
		return nil
	})
}

func (e *badgerEngine) update(_ context.Context, t *thread, table string, key []byte, merge mergeFunc) (bool, error) {
	k := tableKey(t, table, key)
	for range badgerMaxRetries {
		found := false
		err := e.db.Update(func(txn *badger.Txn) error {
			item, err := txn.Get(k)
			if errors.Is(err, badger.ErrKeyNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			found = true
			var row []byte
			if err := item.Value(func(old []byte) error {
				row, err = merge(old, t.out[:0])
				return err
			}); err != nil {
				return err
			}
			t.out = row
			return txn.Set(k, row)
		})
		if !errors.Is(err, badger.ErrConflict) {
			return found, err
		}
	}
	return true, badger.ErrConflict
}

func (e *badgerEngine) delete(_ context.Context, t *thread, table string, keys [][]byte) error {
	return e.db.Update(func(txn *badger.Txn) error {
		t.scratch = t.scratch[:0]
		for _, k := range keys {
			t.scratch = append(append(append(t.scratch, table...), ':'), k...)
		}
		off := 0
		for _, k := range keys {
			n := len(table) + 1 + len(k)
			if err := txn.Delete(t.scratch[off : off+n : off+n]); err != nil {
				return err
			}
			off += n
		}
		return nil
	})
}

func (e *badgerEngine) scan(t *thread, table string, start []byte, count int, fn func(key, row []byte) error) error {
	return e.db.View(func(txn *badger.Txn) error {
		o := badger.DefaultIteratorOptions
		o.PrefetchSize = min(count, o.PrefetchSize)
		o.Prefix = append([]byte(table), ':')
		it := txn.NewIterator(o)
		defer it.Close()
		n := 0
		for it.Seek(tableKey(t, table, start)); it.Valid() && n < count; it.Next() {
			item := it.Item()
			err := item.Value(func(v []byte) error { return fn(item.Key()[len(table)+1:], v) })
			if err != nil {
				return err
			}
			n++
		}
		return nil
	})
}

// durable syncs badger's log: every write so far is durable.
func (e *badgerEngine) durable(context.Context) error { return e.db.Sync() }

// close stops the interval sync, syncs and closes the database.
func (e *badgerEngine) close() error {
	var err error
	if e.syncer != nil {
		err = e.syncer.stop()
	}
	return errors.Join(err, e.db.Sync(), e.db.Close())
}
