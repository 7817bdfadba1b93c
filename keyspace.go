package kvbuf

import (
	"context"
	"iter"

	"github.com/kvbuf/kvbuf/internal/buffer"
	"github.com/kvbuf/kvbuf/internal/enginedir"
	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/storage"
)

// KV is a named keyspace: ordered byte keys and values, isolated from the
// engine's other keyspaces inside its one pebble store and flushed with them
// under the engine's one watermark. Get it from DB.KV. Safe for concurrent
// use.
type KV struct {
	db   *DB
	name string
	id   storage.KeyspaceID
	ov   *buffer.KV
}

// KV returns the keyspace called name, creating it on first use (it is
// persisted with the next flush): it opens or creates, there is no separate
// create (DB.Keyspaces lists the keyspaces without creating one). Names are 1–128 bytes of [A-Za-z0-9._-],
// not "." or ".." (ErrBadName otherwise). It returns ErrClosed after Close
// has begun.
func (db *DB) KV(name string) (*KV, error) {
	return handle(db, "keyspace", name, db.keyspaces, db.createKV)
}

// createKV creates the keyspace called name. db.mu held.
func (db *DB) createKV(name string) (*KV, error) {
	// Add refuses what would make the catalog invalid (a bad name, no id
	// left) and changes nothing then; it keeps a valid catalog valid, so
	// the flush can always encode it. (Cloning and encoding the catalog
	// here made creating n keyspaces cost O(n^2): W3/construct.)
	id, err := db.catalog.Add(name)
	if err != nil {
		return nil, kverr.Errorf("create keyspace %q: %w", name, err)
	}
	k, err := db.newKV(name, storage.KeyspaceID(id))
	if err != nil {
		// Untested: the overlay's options were checked by Open.
		delete(db.catalog.Keyspaces, name)
		db.catalog.NextID--
		return nil, err
	}
	db.catDirty = true
	db.markCatalog()
	return k, nil
}

// handle returns the handle called name from m, or makes it with create:
// the steps DB.KV and DB.Bits share. The name is checked first; the
// flusher is entered (so that Close waits for a creation under way, and
// none begins after it) and db.mu held around the look-up and create.
func handle[H any](db *DB, kind, name string, m map[string]*H, create func(string) (*H, error)) (*H, error) {
	if err := enginedir.CheckName(kind, name); err != nil {
		return nil, err
	}
	t, err := db.flusher.Enter()
	if err != nil {
		return nil, err
	}
	defer t.End()
	db.mu.Lock()
	defer db.mu.Unlock()
	if h, ok := m[name]; ok {
		return h, nil
	}
	return create(name)
}

// newKV makes the handle and overlay of a keyspace. db.mu held (or Open).
func (db *DB) newKV(name string, id storage.KeyspaceID) (*KV, error) {
	ov, err := buffer.NewKV(db.store, id, &db.acct, db.bopts)
	if err != nil {
		return nil, err
	}
	k := &KV{db: db, name: name, id: id, ov: ov}
	db.keyspaces[name] = k
	db.addTarget(k, nil)
	return k, nil
}

// DropKV deletes the keyspace called name and everything in it, as a write
// of op: O(1) in memory (one range tombstone), one range deletion in the
// store at the next flush, together with the catalog change. Handles to the
// keyspace then fail with ErrDropped; a later DB.KV(name) creates a new,
// empty keyspace. Dropping a keyspace that does not exist is not an error,
// and the change feed reports it all the same (EventDropKeyspace).
func (db *DB) DropKV(ctx context.Context, name string, op uint64) error {
	if err := enginedir.CheckName("keyspace", name); err != nil {
		return err
	}
	t, err := db.flusher.BeginWrite(ctx, op, false)
	if err != nil || t.Skipped() {
		return err // nil if redelivered: see \"Ops and the watermark\"
	}
	defer t.End()
	db.mu.Lock()
	defer db.mu.Unlock()
	if k, ok := db.keyspaces[name]; ok {
		k.ov.Drop()
		delete(db.keyspaces, name)
		db.catalog.Drop(name)
		db.catDirty = true
		db.markCatalog()
	}
	if db.feed.on.Load() {
		// Recorded even if there was no such keyspace: a host replaying
		// the op above the watermark after a restart may find its drop
		// already durable (a freeze between two of the op's writes), and
		// the feed of an op is the host's writes of it, whatever the store
		// held (doc/design.md, "Change feed", rule 1).
		db.feed.drop(op, name)
	}
	return nil
}

// Name returns the keyspace's name.
func (k *KV) Name() string { return k.name }

// wrap adds the keyspace to err (see "Texts" in errors.go).
func (k *KV) wrap(err error) error { return kverr.Errorf("keyspace %q: %w", k.name, err) }

// Put sets key to value (both copied), as a write of op (see "Ops and the
// watermark"; 0 if the host does not track ops). It may wait for a flush to
// make room when pending memory is over its bound, and returns ctx.Err() if
// ctx ends first. After it returns every read sees the value (or a later
// one). Errors: ErrEmptyKey, ErrKeyTooLarge, ErrValueTooLarge, ErrStaleOp,
// ErrDropped, ErrClosed.
func (k *KV) Put(ctx context.Context, key, value []byte, op uint64) error {
	return k.db.write(ctx, op, "keyspace", k.name, k.ov.CheckPut(key, value), func() error {
		err := k.ov.Put(key, value)
		if err == nil && k.db.feed.on.Load() {
			k.db.feed.put(op, k.name, key, value)
		}
		return err
	})
}

// Delete removes key, as a write of op. Deleting an absent key is not an
// error. Errors as Put.
func (k *KV) Delete(ctx context.Context, key []byte, op uint64) error {
	return k.db.write(ctx, op, "keyspace", k.name, k.ov.CheckKey(key), func() error {
		err := k.ov.Delete(key)
		if err == nil && k.db.feed.on.Load() {
			k.db.feed.del(op, k.name, key)
		}
		return err
	})
}

// DeleteRange removes every key k with lower <= k < upper (nil = open on
// that side), pending or stored, as a write of op. It costs O(1) in memory
// whatever the number of keys (one range tombstone, its bounds counted in
// Metrics.PendingBytes) and one range deletion in the store at the next
// flush. Errors: ErrBadRange (lower > upper), and
// as Put.
func (k *KV) DeleteRange(ctx context.Context, lower, upper []byte, op uint64) error {
	return k.db.write(ctx, op, "keyspace", k.name, buffer.CheckRange(lower, upper), func() error {
		err := k.ov.DeleteRange(lower, upper)
		if err == nil && k.db.feed.on.Load() {
			k.db.feed.delRange(op, k.name, lower, upper)
		}
		return err
	})
}

// Get returns a copy of key's value: the newest pending change, else the
// stored value. Errors: ErrNotFound (absent or deleted), ErrEmptyKey,
// ErrKeyTooLarge, ErrDropped, ErrClosed, and storage errors (ErrCorruptBlock
// for a block pebble finds damaged).
func (k *KV) Get(key []byte) ([]byte, error) {
	v, err := k.ov.Get(key)
	return v, k.readErr(err)
}

// GetAppend is Get appending the value to dst instead of allocating: with
// enough capacity in dst it allocates nothing. On error it returns dst
// unchanged.
func (k *KV) GetAppend(dst, key []byte) ([]byte, error) {
	v, err := k.ov.GetAppend(dst, key)
	if err = k.readErr(err); err != nil {
		return dst, err
	}
	return v, nil
}

// GetMany looks up every key of keys at once (overlapping their cache
// misses), appending each found value to buf and setting vals[i] to the
// value of keys[i] (a subslice of buf as it was when appended) or to nil if
// the key is absent or deleted. It returns the extended buf; with enough
// capacity in buf it allocates nothing. The values are those a loop of Get
// would return, all read at one instant during the call (never part of a
// Batch). len(vals) must be at least len(keys). Errors as Get (a bad key is
// reported before any lookup).
func (k *KV) GetMany(keys [][]byte, vals [][]byte, buf []byte) ([]byte, error) {
	buf, err := k.ov.GetMany(keys, vals, buf)
	return buf, k.readErr(err)
}

// readErr turns a read's result into the engine's: ErrClosed once Close has
// begun (whatever was read), ErrDropped for a dropped keyspace, else as
// mapErr.
func (k *KV) readErr(err error) error {
	if cerr := k.db.closed(); cerr != nil {
		return cerr
	}
	if k.ov.Dropped() {
		return k.wrap(ErrDropped)
	}
	return mapErr(err, "keyspace", k.name)
}

// IterOptions bounds an iterator. The zero value (or nil) iterates the whole
// keyspace.
type IterOptions struct {
	// LowerBound is the inclusive lower bound; nil is open.
	LowerBound []byte
	// UpperBound is the exclusive upper bound; nil is open.
	UpperBound []byte
	// Prefix, if not nil, further limits the iterator to keys that start
	// with it (the bounds [Prefix, the next prefix), intersected with the
	// bounds above).
	Prefix []byte
}

// bounds returns the effective [lower, upper) of o.
func (o *IterOptions) bounds() (lower, upper []byte) {
	if o == nil {
		return nil, nil
	}
	lower, upper = o.LowerBound, o.UpperBound
	if o.Prefix != nil {
		pl, pu := o.Prefix, prefixEnd(o.Prefix)
		if lower == nil || string(pl) > string(lower) {
			lower = pl
		}
		if pu != nil && (upper == nil || string(pu) < string(upper)) {
			upper = pu
		}
		if upper != nil && string(lower) > string(upper) {
			upper = lower // disjoint: an empty range
		}
	}
	return lower, upper
}

// prefixEnd returns the smallest key greater than every key with prefix p,
// or nil if there is none (p is all 0xff).
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// NewIter returns an iterator over the keyspace within o's bounds, merging
// pending changes with the store in key order. It is unpositioned: call
// First, Last, SeekGE or SeekLT. Close it when done. See Iter for what a
// scan concurrent with writes sees. Errors: ErrBadRange (lower > upper),
// ErrDropped, ErrClosed.
func (k *KV) NewIter(o *IterOptions) (*Iter, error) {
	lower, upper := o.bounds()
	it, err := k.ov.NewIter(lower, upper)
	if err = k.readErr(err); err != nil {
		if it != nil {
			_ = it.Close()
		}
		return nil, err
	}
	return &Iter{db: k.db, name: k.name, it: it}, nil
}

// KVReader is the read side of a keyspace, live (*KV: the newest state,
// pending changes included) or as of a snapshot (*SnapshotKV: frozen at
// DB.NewSnapshot). Code written against it serves both, as pebble's Reader
// serves a DB, a batch and a snapshot. The methods are documented on *KV.
type KVReader interface {
	Get(key []byte) ([]byte, error)
	GetAppend(dst, key []byte) ([]byte, error)
	GetMany(keys [][]byte, vals [][]byte, buf []byte) ([]byte, error)
	Has(key []byte) (bool, error)
	NewIter(o *IterOptions) (*Iter, error)
	All(o *IterOptions) iter.Seq2[[]byte, []byte]
}

// Has reports whether key is present (the newest pending change, else the
// store) without copying its value. Errors: ErrEmptyKey, ErrKeyTooLarge,
// ErrDropped, ErrClosed, and storage errors (ErrCorruptBlock).
func (k *KV) Has(key []byte) (bool, error) {
	ok, err := k.ov.Has(key)
	err = k.readErr(err)
	return ok && err == nil, err
}

// All returns the keys and values of the keyspace within o's bounds (nil:
// all of it) in increasing key order, pending changes merged with the store
// as NewIter does (see Iter for what a scan concurrent with writes sees;
// use a Snapshot for a point-in-time one). The iteration holds an iterator,
// closed when the loop ends, however it ends.
//
// Copying: the key and the value passed to the loop body are valid only
// until it returns (the next step may reuse their memory); copy them to
// keep them, and do not modify them.
//
// An error ends the sequence early, as the end of the keyspace would:
// ErrBadRange (lower > upper), ErrDropped, ErrClosed, a storage error.
// Where the difference matters (an export, a backup), iterate with NewIter
// and Iter.All, and check Iter.Error after the loop.
func (k *KV) All(o *IterOptions) iter.Seq2[[]byte, []byte] {
	return allOf(k.NewIter, o)
}
