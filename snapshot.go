package kvbuf

import (
	"context"
	"iter"
	"sync"
	"sync/atomic"

	"github.com/kvbuf/kvbuf/internal/buffer"
	"github.com/kvbuf/kvbuf/internal/enginedir"
	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/storage"
)

// Snapshot reads every keyspace and bitslice of an engine as of one instant:
// later writes, batches and any number of flushes do not change what it
// reads, until it is closed. A snapshot never sees part of a Batch. Safe for
// concurrent use; Close it when done (Close of the engine closes it too,
// after which its reads return ErrClosed).
//
// Taking a snapshot seals the pending tables that hold changes (the next
// flush writes them as usual) and pins them and a pebble snapshot until
// Close. While it is open, each flush keeps the bitslice words it overwrites.
type Snapshot struct {
	db   *DB
	ss   *storage.Snapshot
	kvs  map[string]*buffer.KVSnapshot
	bits map[string]*buffer.BitsSnapshot
	op   uint64 // every op <= op is wholly in the snapshot
	wm   uint64 // the persisted watermark at the instant

	once   sync.Once
	closed atomic.Bool
}

// NewSnapshot returns a snapshot of the whole engine. It waits for writes in
// flight to finish (and holds new ones back for the moment it takes), so
// that the instant is one. Errors: ErrClosed.
func (db *DB) NewSnapshot() (*Snapshot, error) {
	s := &Snapshot{db: db, kvs: map[string]*buffer.KVSnapshot{}, bits: map[string]*buffer.BitsSnapshot{}}
	var err error
	xerr := db.flusher.Exclusive(context.Background(), func() {
		// No write is in flight, but generations are still released. Pin
		// every overlay's tables first and take the store snapshot after:
		// a table released before its pin is durable in the store by
		// then, one released after stays pinned. (The other order loses a
		// generation written and released between the two; publication
		// order 17 in internal/buffer/protocol.go.)
		db.mu.Lock()
		defer db.mu.Unlock()
		// No op changes while the barrier is held: the ops complete now
		// are wholly in the tables pinned below.
		s.op = db.flusher.CompletedOp()
		s.wm = db.flusher.Watermark()
		for name, k := range db.keyspaces {
			s.kvs[name] = k.ov.Snapshot()
		}
		for name, b := range db.bits {
			s.bits[name] = b.ov.Snapshot()
		}
		s.ss, err = db.store.NewSnapshot()
		if err != nil {
			for _, k := range s.kvs {
				k.Close()
			}
			for _, b := range s.bits {
				b.Close()
			}
			return
		}
		for _, k := range s.kvs {
			k.SetStore(s.ss)
		}
		db.snaps[s] = struct{}{}
	})
	if xerr != nil {
		return nil, xerr
	}
	if err != nil {
		return nil, kverr.Errorf("snapshot: %w", err)
	}
	return s, nil
}

// Op returns the op the snapshot reflects: every write of every op at or
// below it is in the snapshot (those ops had ended when it was taken), so an
// export of it can be tied to that position of the host's log without a
// host lock, and a copy restored from it replays the host's log from
// Op()+1. Writes of later ops may be in it too (ops still open, or ended
// after an op still open): the replay rewrites them. Op is at least
// Watermark.
func (s *Snapshot) Op() uint64 { return s.op }

// Watermark returns the engine's persisted watermark when the snapshot was
// taken.
func (s *Snapshot) Watermark() uint64 { return s.wm }

// Close releases the snapshot. It is idempotent.
func (s *Snapshot) Close() {
	s.once.Do(func() {
		s.closed.Store(true)
		for _, k := range s.kvs {
			k.Close()
		}
		for _, b := range s.bits {
			b.Close()
		}
		_ = s.ss.Close()
		s.db.mu.Lock()
		delete(s.db.snaps, s)
		s.db.mu.Unlock()
	})
}

// KV returns a reader of the keyspace called name as of the snapshot. A
// keyspace that did not exist then reads as empty. Errors: ErrBadName.
func (s *Snapshot) KV(name string) (*SnapshotKV, error) {
	if err := enginedir.CheckName("keyspace", name); err != nil {
		return nil, err
	}
	return &SnapshotKV{s: s, name: name, ks: s.kvs[name]}, nil
}

// Bits returns a reader of the bitslice called name as of the snapshot. A
// bitslice that did not exist then reads as empty. Errors: ErrBadName.
func (s *Snapshot) Bits(name string) (*SnapshotBits, error) {
	if err := enginedir.CheckName("bitslice", name); err != nil {
		return nil, err
	}
	return &SnapshotBits{s: s, name: name, bs: s.bits[name]}, nil
}

// isClosed returns ErrClosed if the snapshot or the engine is closed.
func (s *Snapshot) isClosed() error {
	if s.closed.Load() || s.db.closing.Load() {
		return ErrClosed
	}
	return nil
}

// SnapshotKV reads one keyspace as of a snapshot. Its methods behave as
// KV's, and return ErrClosed once the snapshot or the engine is closed.
type SnapshotKV struct {
	s    *Snapshot
	name string
	ks   *buffer.KVSnapshot // nil: the keyspace did not exist
}

func (r *SnapshotKV) err(err error) error {
	if cerr := r.s.isClosed(); cerr != nil {
		return cerr
	}
	return mapErr(err, "snapshot of keyspace", r.name)
}

// Get is KV.Get as of the snapshot.
func (r *SnapshotKV) Get(key []byte) ([]byte, error) {
	if r.ks == nil {
		return nil, r.err(checkKey(key, r.s.db.opts.MaxKeySize, ErrNotFound))
	}
	v, err := r.ks.Get(key)
	return v, r.err(err)
}

// GetAppend is KV.GetAppend as of the snapshot.
func (r *SnapshotKV) GetAppend(dst, key []byte) ([]byte, error) {
	if r.ks == nil {
		return dst, r.err(checkKey(key, r.s.db.opts.MaxKeySize, ErrNotFound))
	}
	v, err := r.ks.GetAppend(dst, key)
	if err = r.err(err); err != nil {
		return dst, err
	}
	return v, nil
}

// GetMany is KV.GetMany as of the snapshot.
func (r *SnapshotKV) GetMany(keys [][]byte, vals [][]byte, buf []byte) ([]byte, error) {
	if r.ks == nil {
		if len(vals) < len(keys) {
			return buf, r.err(kverr.Errorf("GetMany: %d keys but room for %d values: %w", len(keys), len(vals), ErrBadRange))
		}
		for i, k := range keys {
			if err := checkKey(k, r.s.db.opts.MaxKeySize, nil); err != nil {
				return buf, r.err(err)
			}
			vals[i] = nil
		}
		return buf, r.err(nil)
	}
	buf, err := r.ks.GetMany(keys, vals, buf)
	return buf, r.err(err)
}

// NewIter is KV.NewIter as of the snapshot: it sees exactly the snapshot.
func (r *SnapshotKV) NewIter(o *IterOptions) (*Iter, error) {
	lower, upper := o.bounds()
	if err := buffer.CheckRange(lower, upper); err != nil {
		return nil, r.err(err)
	}
	if r.ks == nil {
		// The keyspace did not exist then: an empty one.
		if err := r.err(nil); err != nil {
			return nil, err
		}
		return &Iter{db: r.s.db, name: r.name}, nil
	}
	it, err := r.ks.NewIter(lower, upper)
	if err = r.err(err); err != nil {
		if it != nil {
			_ = it.Close()
		}
		return nil, err
	}
	return &Iter{db: r.s.db, name: r.name, it: it}, nil
}

// checkKey is the key check of a keyspace that does not exist: ok is
// returned for a valid key.
func checkKey(key []byte, maxKey int, ok error) error {
	switch {
	case len(key) == 0:
		return ErrEmptyKey
	case len(key) > maxKey:
		return kverr.Errorf("key of %d bytes (max %d): %w", len(key), maxKey, ErrKeyTooLarge)
	}
	return ok
}

// SnapshotBits reads one bitslice as of a snapshot. Its methods behave as
// Bits', and return ErrClosed once the snapshot or the engine is closed.
type SnapshotBits struct {
	s    *Snapshot
	name string
	bs   *buffer.BitsSnapshot // nil: the bitslice did not exist
}

func (r *SnapshotBits) closed() error { return r.s.isClosed() }

// Get is Bits.Get as of the snapshot.
func (r *SnapshotBits) Get(i uint64) (bool, error) {
	if r.bs == nil {
		return false, r.closed()
	}
	v := r.bs.Get(i)
	if err := r.closed(); err != nil {
		return false, err
	}
	return v, nil
}

// GetMany is Bits.GetMany as of the snapshot.
func (r *SnapshotBits) GetMany(idx []uint64, out []bool) error {
	if len(out) < len(idx) {
		return kverr.Errorf("snapshot of bitslice %q: GetMany: %d indexes but room for %d: %w", r.name, len(idx), len(out), ErrBadRange)
	}
	if r.bs == nil {
		clear(out[:len(idx)])
	} else {
		r.bs.GetMany(idx, out)
	}
	return r.closed()
}

// Len is Bits.Len as of the snapshot.
func (r *SnapshotBits) Len() (uint64, error) {
	if r.bs == nil {
		return 0, r.closed()
	}
	return r.bs.Len(), r.closed()
}

// Count is Bits.Count as of the snapshot (exact: no write was in flight at
// the instant).
func (r *SnapshotBits) Count() (uint64, error) {
	if r.bs == nil {
		return 0, r.closed()
	}
	return r.bs.Count(), r.closed()
}

// Ones is Bits.Ones as of the snapshot. It ends early, without error, if
// the snapshot or the engine closes.
func (r *SnapshotBits) Ones(from uint64) iter.Seq[uint64] {
	return func(yield func(uint64) bool) {
		if r.bs == nil {
			return
		}
		for i := range r.bs.Ones(from) {
			if r.closed() != nil || !yield(i) {
				return
			}
		}
	}
}

// NextOnes is Bits.NextOnes as of the snapshot: it reads exactly the
// snapshot. Once the snapshot or the engine closes it returns 0, from and
// ErrClosed.
func (r *SnapshotBits) NextOnes(from uint64, dst []uint64) (n int, next uint64, err error) {
	if len(dst) == 0 {
		return 0, from, kverr.Errorf("snapshot of bitslice %q: NextOnes: an empty dst: %w", r.name, ErrBadRange)
	}
	if r.bs != nil {
		n, next = r.bs.NextOnes(from, dst)
	} else {
		next = from // the bitslice did not exist: empty
	}
	if err := r.closed(); err != nil {
		return 0, from, err
	}
	return n, next, nil
}

// Has is KV.Has as of the snapshot.
func (r *SnapshotKV) Has(key []byte) (bool, error) {
	if r.ks == nil {
		return false, r.err(checkKey(key, r.s.db.opts.MaxKeySize, nil))
	}
	ok, err := r.ks.Has(key)
	err = r.err(err)
	return ok && err == nil, err
}

// All is KV.All as of the snapshot: it sees exactly the snapshot.
func (r *SnapshotKV) All(o *IterOptions) iter.Seq2[[]byte, []byte] {
	return allOf(r.NewIter, o)
}

var (
	_ KVReader   = (*KV)(nil)
	_ KVReader   = (*SnapshotKV)(nil)
	_ BitsReader = (*Bits)(nil)
	_ BitsReader = (*SnapshotBits)(nil)
)
