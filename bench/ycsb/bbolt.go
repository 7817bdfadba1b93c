package ycsb

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/magiconair/properties"
	bolt "go.etcd.io/bbolt"
)

// bboltEngine binds bbolt with its default options: every write
// transaction is fsynced before it returns. A table is a bucket. Writes go
// through DB.Batch, which merges concurrent writers' calls into one
// transaction (one fsync), when the client runs more than one thread; with
// one thread they use DB.Update, because Batch would wait MaxBatchDelay
// (10 ms) for companions that never come. An update reads and writes the
// record inside the one write transaction.
type bboltEngine struct {
	db       *bolt.DB
	nthreads atomic.Int32
}

// bboltFile is the database file's name in the binding's directory.
const bboltFile = "ycsb.bbolt"

func openBbolt(dir string, p *properties.Properties) (engine, error) {
	nosync, err := getBool(p, "bbolt.nosync", false)
	if err != nil {
		return nil, err
	}
	if err := mkdirAll(dir); err != nil {
		return nil, err
	}
	db, err := bolt.Open(filepath.Join(dir, bboltFile), 0o600, &bolt.Options{Timeout: time.Second, NoSync: nosync})
	if err != nil {
		return nil, err
	}
	return &bboltEngine{db: db}, nil
}

// threads records the client's thread count (InitThread).
func (e *bboltEngine) threads(n int) { e.nthreads.Store(int32(n)) }

// write runs fn in a write transaction: Batch with concurrent threads,
// Update with one. fn may run more than once (Batch retries it alone if
// another call of its batch failed).
func (e *bboltEngine) write(fn func(*bolt.Tx) error) error {
	if e.nthreads.Load() > 1 {
		return e.db.Batch(fn)
	}
	return e.db.Update(fn)
}

func (e *bboltEngine) get(_ *thread, table string, key, dst []byte) ([]byte, bool, error) {
	found := false
	err := e.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(table))
		if b == nil {
			return nil
		}
		if v := b.Get(key); v != nil {
			found = true
			dst = append(dst, v...)
		}
		return nil
	})
	return dst, found, err
}

func (e *bboltEngine) getMany(_ *thread, table string, keys, rows [][]byte, buf []byte) ([]byte, error) {
	err := e.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(table))
		for i, k := range keys {
			rows[i] = nil
			if b == nil {
				continue
			}
			if v := b.Get(k); v != nil {
				start := len(buf)
				buf = append(buf, v...)
				rows[i] = buf[start:len(buf):len(buf)]
			}
		}
		return nil
	})
	return recut(buf, rows), err
}

func (e *bboltEngine) put(_ context.Context, _ *thread, table string, key, row []byte) error {
	return e.write(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte(table))
		if err != nil {
			return err
		}
		return b.Put(key, row)
	})
}

func (e *bboltEngine) putMany(_ context.Context, _ *thread, table string, keys, rows [][]byte) error {
	return e.write(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte(table))
		if err != nil {
			return err
		}
		for i := range keys {
			if err := b.Put(keys[i], rows[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

func (e *bboltEngine) update(_ context.Context, t *thread, table string, key []byte, merge mergeFunc) (bool, error) {
	found := false
	err := e.write(func(tx *bolt.Tx) error {
		found = false
		b := tx.Bucket([]byte(table))
		if b == nil {
			return nil
		}
		old := b.Get(key)
		if old == nil {
			return nil
		}
		found = true
		row, err := merge(old, t.out[:0])
		if err != nil {
			return err
		}
		t.out = row
		return b.Put(key, row)
	})
	return found, err
}

func (e *bboltEngine) delete(_ context.Context, _ *thread, table string, keys [][]byte) error {
	return e.write(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(table))
		if b == nil {
			return nil
		}
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

func (e *bboltEngine) scan(_ *thread, table string, start []byte, count int, fn func(key, row []byte) error) error {
	return e.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(table))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		n := 0
		for k, v := c.Seek(start); k != nil && n < count; k, v = c.Next() {
			if err := fn(k, v); err != nil {
				return err
			}
			n++
		}
		return nil
	})
}

// durable does nothing by default: every bbolt write transaction is synced
// before it returns; with bbolt.nosync it syncs the file.
func (e *bboltEngine) durable(context.Context) error {
	if e.db.NoSync {
		return e.db.Sync()
	}
	return nil
}

func (e *bboltEngine) close() error { return e.db.Close() }

// waitIdle returns at once: bbolt writes in the caller's goroutine and
// does nothing in the background.
func (e *bboltEngine) waitIdle(ctx context.Context) error { return ctx.Err() }
