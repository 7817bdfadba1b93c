package kvbuf

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/kvbuf/kvbuf/buffer"
	"github.com/kvbuf/kvbuf/storage"
)

const (
	// catalogMeta is the storage meta entry listing keyspaces as
	// "name id\n" lines. One entry, rewritten whole on each new keyspace, in
	// a synced batch of its own, so the catalog is always complete.
	catalogMeta = "kvbuf/catalog"
	prefixLen   = 4

	defaultMaxKeySize   = 4096
	defaultMaxValueSize = 1 << 20
)

// KV is a named keyspace: keys are isolated from other keyspaces by a
// prefix inside the engine's one pebble store, and flushed with them under
// the engine's one watermark. Get it from DB.KV. Safe for concurrent use.
type KV struct {
	db     *DB
	name   string
	prefix [prefixLen]byte
}

// loadCatalog reads the persisted keyspace names.
func (db *DB) loadCatalog() error {
	b, err := db.store.GetMeta(catalogMeta)
	if errors.Is(err, storage.ErrNotFound) {
		db.nextID = 1
		return nil
	}
	if err != nil {
		return wrapOpenErr(err)
	}
	db.nextID = 1
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line == "" {
			continue
		}
		name, idText, ok := strings.Cut(line, " ")
		id, perr := strconv.ParseUint(idText, 10, 32)
		if !ok || perr != nil || id == 0 || checkName("keyspace", name) != nil {
			return fmt.Errorf("kvbuf: keyspace catalog line %q: %w", line, ErrCorrupt)
		}
		if _, dup := db.keyspaces[name]; dup {
			return fmt.Errorf("kvbuf: keyspace catalog names %q twice: %w", name, ErrCorrupt)
		}
		db.keyspaces[name] = newKVHandle(db, name, uint32(id))
		db.nextID = max(db.nextID, uint32(id)+1)
	}
	return nil
}

func newKVHandle(db *DB, name string, id uint32) *KV {
	k := &KV{db: db, name: name}
	binary.BigEndian.PutUint32(k.prefix[:], id)
	return k
}

// KV returns the keyspace called name, creating it (durably, before it
// returns) on first use. Names are 1–128 bytes of [A-Za-z0-9._-]
// (ErrBadName otherwise).
func (db *DB) KV(name string) (*KV, error) {
	if err := checkName("keyspace", name); err != nil {
		return nil, err
	}
	op, err := db.flusher.BeginRead()
	if err != nil {
		return nil, err
	}
	defer op.End()
	db.mu.Lock()
	defer db.mu.Unlock()
	if k, ok := db.keyspaces[name]; ok {
		return k, nil
	}
	k := newKVHandle(db, name, db.nextID)
	var buf strings.Builder
	names := make([]string, 0, len(db.keyspaces)+1)
	for n := range db.keyspaces {
		names = append(names, n)
	}
	names = append(names, name)
	sort.Strings(names)
	for _, n := range names {
		ks := db.keyspaces[n]
		if n == name {
			ks = k
		}
		fmt.Fprintf(&buf, "%s %d\n", n, binary.BigEndian.Uint32(ks.prefix[:]))
	}
	b := db.store.NewBatch()
	b.SetMeta(catalogMeta, []byte(buf.String()))
	if err := db.store.Apply(b); err != nil {
		return nil, fmt.Errorf("kvbuf: create keyspace %q: %w", name, err)
	}
	db.keyspaces[name] = k
	db.nextID++
	return k, nil
}

// Keyspaces returns the names of the engine's keyspaces, sorted.
func (db *DB) Keyspaces() []string {
	db.mu.Lock()
	defer db.mu.Unlock()
	names := make([]string, 0, len(db.keyspaces))
	for n := range db.keyspaces {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Name returns the keyspace's name.
func (k *KV) Name() string { return k.name }

func (k *KV) checkKey(key []byte) error {
	switch {
	case len(key) == 0:
		return fmt.Errorf("kvbuf: keyspace %q: %w", k.name, ErrEmptyKey)
	case len(key) > k.db.maxKeySize():
		return fmt.Errorf("kvbuf: keyspace %q: key of %d bytes (max %d): %w", k.name, len(key), k.db.maxKeySize(), ErrKeyTooLarge)
	}
	return nil
}

func (db *DB) maxKeySize() int {
	if db.opts.MaxKeySize > 0 {
		return db.opts.MaxKeySize
	}
	return defaultMaxKeySize
}

// fullKey returns the prefixed key, in scratch when it fits.
func (k *KV) fullKey(scratch []byte, key []byte) []byte {
	return append(append(scratch[:0], k.prefix[:]...), key...)
}

// withKey calls f with the prefixed key in a pooled buffer. The overlay
// copies what it keeps, but its store sits behind an interface, so a stack
// buffer would escape: the pool saves an allocation per operation.
func (k *KV) withKey(key []byte, f func(full []byte) error) error {
	bp, _ := k.db.keyBufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	*bp = k.fullKey(*bp, key)
	err := f(*bp)
	if cap(*bp) <= 4*defaultMaxKeySize { // don't pin a huge key's buffer
		k.db.keyBufs.Put(bp)
	}
	return err
}

// Put sets key to value (both copied), tagged with the host's op number
// (0 if the host does not track them). It may wait for a flush to make room
// when pending memory is over its bound, and returns ctx.Err() if ctx ends
// first. After it returns every Get sees the value (or a later one).
func (k *KV) Put(ctx context.Context, key, value []byte, op uint64) error {
	return k.write(ctx, key, func(full []byte) error { return k.db.kv.Put(full, value, op) })
}

// Delete removes key (a tombstone until the next flush), tagged with op.
// Deleting an absent key is not an error.
func (k *KV) Delete(ctx context.Context, key []byte, op uint64) error {
	return k.write(ctx, key, func(full []byte) error { return k.db.kv.Delete(full, op) })
}

// write is the shared path of Put and Delete: key check, admission through
// the flusher's write side (gate, barrier, backpressure), then apply to the
// overlay with the prefixed key.
func (k *KV) write(ctx context.Context, key []byte, apply func(full []byte) error) error {
	if err := k.checkKey(key); err != nil {
		return err
	}
	o, err := k.db.flusher.BeginWrite(ctx)
	if err != nil {
		return err
	}
	defer o.End()
	if err := k.withKey(key, apply); err != nil {
		return fmt.Errorf("kvbuf: keyspace %q: %w", k.name, err)
	}
	return nil
}

// Get returns a copy of key's value: the pending one if there is one, else
// the stored one. It returns ErrNotFound for an absent or deleted key.
func (k *KV) Get(key []byte) ([]byte, error) {
	if err := k.checkKey(key); err != nil {
		return nil, err
	}
	o, err := k.db.flusher.BeginRead()
	if err != nil {
		return nil, err
	}
	defer o.End()
	var v []byte
	err = k.withKey(key, func(full []byte) (err error) {
		v, err = k.db.kv.Get(full)
		return err
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("kvbuf: keyspace %q: %w", k.name, err)
	}
	return v, err
}

// Iter iterates over a keyspace in key order, merging pending changes with
// the store. It is not safe for concurrent use; close it when done. After
// the engine closes, its methods return false and Error returns ErrClosed.
type Iter struct {
	kv  *KV
	it  *buffer.Iter
	err error
}

// NewIter returns an iterator over keys in [lower, upper) of the keyspace;
// a nil bound is open.
func (k *KV) NewIter(lower, upper []byte) (*Iter, error) {
	o, err := k.db.flusher.BeginRead()
	if err != nil {
		return nil, err
	}
	defer o.End()
	lo := k.fullKey(nil, lower)
	var hi []byte
	if upper != nil {
		hi = k.fullKey(nil, upper)
	} else {
		hi = prefixSuccessor(k.prefix[:])
	}
	it, err := k.db.kv.NewIter(lo, hi)
	if err != nil {
		return nil, fmt.Errorf("kvbuf: keyspace %q: %w", k.name, err)
	}
	return &Iter{kv: k, it: it}, nil
}

// prefixSuccessor returns the smallest key greater than every key with
// prefix p (p is never all 0xff: keyspace ids start at 1 and stay small).
func prefixSuccessor(p []byte) []byte {
	s := bytes.Clone(p)
	for i := len(s) - 1; i >= 0; i-- {
		s[i]++
		if s[i] != 0 {
			return s[:i+1]
		}
	}
	return nil
}

// step runs a positioning call inside the drain gate so that Close cannot
// close the store under it.
func (it *Iter) step(f func() bool) bool {
	if it.err != nil {
		return false
	}
	o, err := it.kv.db.flusher.BeginRead()
	if err != nil {
		it.err = err
		return false
	}
	defer o.End()
	return f()
}

// First moves to the first key and reports whether there is one.
func (it *Iter) First() bool { return it.step(it.it.First) }

// Next moves to the next key and reports whether there is one.
func (it *Iter) Next() bool { return it.step(it.it.Next) }

// SeekGE moves to the first key at or after key.
func (it *Iter) SeekGE(key []byte) bool {
	full := it.kv.fullKey(nil, key)
	return it.step(func() bool { return it.it.SeekGE(full) })
}

// Valid reports whether the iterator is at a key.
func (it *Iter) Valid() bool { return it.err == nil && it.it.Valid() }

// Key returns the current key without the keyspace prefix. It is valid
// until the next positioning call.
func (it *Iter) Key() []byte { return it.it.Key()[prefixLen:] }

// Value returns the current value, valid until the next positioning call.
func (it *Iter) Value() []byte { return it.it.Value() }

// Error returns the error that stopped the iteration, if any.
func (it *Iter) Error() error {
	if it.err != nil {
		return it.err
	}
	return it.it.Error()
}

// Close releases the iterator. After the engine has closed it returns
// ErrClosed (the store closed the iterator's storage side already).
func (it *Iter) Close() error {
	err := it.it.Close()
	if errors.Is(err, storage.ErrClosed) {
		err = fmt.Errorf("%w: %w", ErrClosed, err)
	}
	if it.err != nil && err == nil && !errors.Is(it.err, ErrClosed) {
		err = it.err
	}
	return err
}
