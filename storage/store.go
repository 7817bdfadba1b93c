package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Store is a pebble database with separate user, meta and system key
// namespaces and a durable watermark. All methods are safe for concurrent
// use, including concurrently with Close.
type Store struct {
	dir      string
	readOnly bool

	// mu guards db against Close: every operation holds it shared while it
	// uses db; Close takes it exclusively, so it waits for in-flight
	// operations and later ones see closed.
	mu     sync.RWMutex
	closed bool
	db     *pebble.DB
	lock   *pebble.Lock

	// closeOnce makes Close idempotent; closeErr is its result.
	closeOnce sync.Once
	closeErr  error

	// applyMu serialises Apply of batches carrying a watermark, so that the
	// max(persisted, new) decision and the commit are one step.
	applyMu sync.Mutex
	// wm is the persisted watermark, loaded at Open; written only by Apply
	// under applyMu after the commit succeeded.
	wm atomic.Uint64

	// keyBufs pools scratch buffers for tagged keys on the read path; pebble
	// retains the key it is given in a pooled struct, so a stack buffer would
	// escape and cost an allocation per Get.
	keyBufs sync.Pool

	itersMu sync.Mutex
	iters   map[*Iter]struct{}
}

// Open opens the store in dir, creating it (and dir) unless opts says
// otherwise. See Options for defaults.
//
// Errors: ErrLocked if dir is open by another Store (this process or
// another); ErrCorrupt if pebble finds on-disk corruption; fs.ErrNotExist
// for a missing store with ReadOnly or ErrorIfNotExists; fs.ErrExist for an
// existing one with ErrorIfExists.
func Open(dir string, opts *Options) (*Store, error) {
	po := opts.pebbleOptions()
	fsys := po.FS

	if po.ReadOnly || po.ErrorIfNotExists {
		fi, err := fsys.Stat(dir)
		if err != nil {
			return nil, fmt.Errorf("storage: open %q: %w", dir, err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("storage: open %q: not a directory: %w", dir, syscall.ENOTDIR)
		}
	} else if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("storage: open %q: %w", dir, err)
	} else if err := syncParent(fsys, dir); err != nil {
		// pebble syncs dir itself, never dir's entry in its parent: without
		// this a power cut can lose a new store whole, acknowledged
		// flushes and all (kvbuf's TestCrashableMemStore).
		return nil, fmt.Errorf("storage: open %q: sync parent directory: %w", dir, err)
	}

	// Take the directory lock ourselves so that a lock failure is told apart
	// from every other open failure: pebble returns it unwrapped.
	lock, err := pebble.LockDirectory(dir, fsys)
	if err != nil {
		return nil, mapLockErr(dir, err)
	}
	po.Lock = lock
	db, err := pebble.Open(dir, po)
	if err != nil {
		_ = lock.Close()
		return nil, mapOpenErr(dir, err)
	}
	s := &Store{
		dir:      dir,
		readOnly: po.ReadOnly,
		db:       db,
		lock:     lock,
		iters:    make(map[*Iter]struct{}),
	}
	s.keyBufs.New = func() any { b := make([]byte, 0, 64); return &b }
	wm, err := s.loadWatermark()
	if err != nil {
		_ = db.Close()
		_ = lock.Close()
		return nil, err
	}
	s.wm.Store(wm)
	return s, nil
}

// mapLockErr classifies an error from pebble.LockDirectory. A failure to
// create or open the LOCK file is a *PathError (permission, missing
// directory, dir is a file); anything else is the lock being held: fcntl's
// EAGAIN/EACCES from another process, vfs.MemFS's EAGAIN, or vfs.Default's
// "lock held by current process".
func mapLockErr(dir string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("storage: open %q: %w", dir, err)
	}
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) ||
		strings.Contains(err.Error(), "lock held by current process") {
		return fmt.Errorf("storage: open %q: %w: %w", dir, ErrLocked, err)
	}
	return fmt.Errorf("storage: open %q: lock: %w", dir, err)
}

// isOpenCorruption reports whether a pebble.Open failure means the store's
// own files are corrupt. Besides errors pebble marks as corruption, it
// matches plain errors by message: the MANIFEST names a table that is
// missing or has another size, the manifest marker names a missing
// MANIFEST, or the format marker names a version this pebble does not know.
// TestCorruptOpen fails if a pebble upgrade rewords them.
func isOpenCorruption(err error) bool {
	if pebble.IsCorruptionError(err) {
		return true
	}
	msg := err.Error()
	for _, c := range [...]struct {
		msg      string
		notExist bool // also require errors.Is(err, fs.ErrNotExist)
	}{
		{"object size mismatch", false},
		{"unknown to the objstorage provider", false},
		{"could not open manifest file", true},
		{"unknown format major version", false},
	} {
		if strings.Contains(msg, c.msg) && (!c.notExist || errors.Is(err, fs.ErrNotExist)) {
			return true
		}
	}
	return false
}

func mapOpenErr(dir string, err error) error {
	switch {
	case isOpenCorruption(err):
		return fmt.Errorf("storage: open %q: %w: %w", dir, ErrCorrupt, err)
	case errors.Is(err, pebble.ErrDBDoesNotExist):
		return fmt.Errorf("storage: open %q: %w: %w", dir, fs.ErrNotExist, err)
	case errors.Is(err, pebble.ErrDBAlreadyExists):
		return fmt.Errorf("storage: open %q: %w: %w", dir, fs.ErrExist, err)
	}
	return fmt.Errorf("storage: open %q: %w", dir, err)
}

// wrapErr adds the operation and directory to a pebble error and maps
// corruption to ErrCorrupt and pebble.ErrReadOnly to ErrReadOnly.
func (s *Store) wrapErr(op string, err error) error {
	switch {
	case pebble.IsCorruptionError(err):
		return fmt.Errorf("storage: %s in %q: %w: %w", op, s.dir, ErrCorrupt, err)
	case errors.Is(err, pebble.ErrReadOnly):
		return fmt.Errorf("storage: %s in %q: %w", op, s.dir, ErrReadOnly)
	}
	return fmt.Errorf("storage: %s in %q: %w", op, s.dir, err)
}

// wrapKeyErr is wrapErr naming the key. It takes the key as a string (a
// copy) so that callers' key slices do not escape to the heap.
func (s *Store) wrapKeyErr(op, key string, err error) error {
	return s.wrapErr(fmt.Sprintf("%s %q", op, key), err)
}

func (s *Store) loadWatermark() (uint64, error) {
	v, c, err := s.db.Get([]byte(watermarkKey))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, s.wrapErr("read watermark", err)
	}
	defer c.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("storage: watermark in %q has %d bytes, want 8: %w", s.dir, len(v), ErrCorrupt)
	}
	return binary.BigEndian.Uint64(v), nil
}

// Dir returns the directory the store was opened in.
func (s *Store) Dir() string { return s.dir }

// Get returns a copy of the value stored under the user key, or an error
// wrapping ErrNotFound.
func (s *Store) Get(key []byte) ([]byte, error) {
	return s.get(nil, tagUser, key, "", false)
}

// GetAppend appends the value stored under the user key to dst and returns
// the extended slice; with enough capacity in dst it does not allocate. On
// error dst is returned unchanged.
func (s *Store) GetAppend(dst, key []byte) ([]byte, error) {
	return s.get(dst, tagUser, key, "", true)
}

// GetMeta returns a copy of the meta value set with Batch.SetMeta, or an
// error wrapping ErrNotFound.
func (s *Store) GetMeta(name string) ([]byte, error) {
	return s.get(nil, tagMeta, nil, name, false)
}

func (s *Store) get(dst []byte, tag byte, key []byte, name string, appendMode bool) ([]byte, error) {
	bp := s.keyBufs.Get().(*[]byte)
	k := append((*bp)[:0], tag)
	k = append(k, key...)
	k = append(k, name...)

	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		s.keyBufs.Put(bp)
		return dst, ErrClosed
	}
	v, c, err := s.db.Get(k)
	if err != nil {
		s.mu.RUnlock()
		*bp = k
		s.keyBufs.Put(bp)
		if errors.Is(err, pebble.ErrNotFound) {
			if tag == tagMeta {
				return dst, fmt.Errorf("storage: meta %q: %w", name, ErrNotFound)
			}
			return dst, ErrNotFound
		}
		if tag == tagMeta {
			return dst, s.wrapKeyErr("get meta", name, err)
		}
		return dst, s.wrapKeyErr("get", string(key), err)
	}
	if appendMode {
		dst = append(dst, v...)
	} else {
		dst = make([]byte, len(v))
		copy(dst, v)
	}
	cerr := c.Close()
	s.mu.RUnlock()
	*bp = k
	s.keyBufs.Put(bp)
	if cerr != nil {
		return nil, s.wrapKeyErr("get", string(key), cerr)
	}
	return dst, nil
}

// Watermark returns the persisted watermark: the highest op number any
// applied batch carried, 0 for a new store.
func (s *Store) Watermark() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, ErrClosed
	}
	return s.wm.Load(), nil
}

// Flush flushes pebble's memtables to sstables and waits for it. Data is
// already durable after Apply (the WAL is synced); Flush only moves it out
// of the WAL (kvtool flush, tests of the on-disk layout).
func (s *Store) Flush() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	if s.readOnly {
		return fmt.Errorf("storage: flush %q: %w", s.dir, ErrReadOnly)
	}
	if err := s.db.Flush(); err != nil {
		return s.wrapErr("flush", err)
	}
	return nil
}

// LevelMetrics describes one LSM level.
type LevelMetrics struct {
	// Files is the number of sstables in the level.
	Files int64
	// Bytes is their total size.
	Bytes int64
}

// Metrics describes a store for kvtool inspect.
type Metrics struct {
	// EstimatedKeys approximates the number of live entries in sstables:
	// the sum over tables of entries minus deletion tombstones. It counts
	// every namespace and overwritten versions not yet compacted away, and
	// does not include the memtable.
	EstimatedKeys uint64
	// Levels holds per-level sstable counts and sizes, L0 first.
	Levels [7]LevelMetrics
	// DiskUsage is the bytes of all files the store uses, live and obsolete.
	DiskUsage uint64
	// MemTableSize is the bytes allocated by memtables and large batches.
	MemTableSize uint64
	// MemTables is the number of memtables (including queued large batches).
	MemTables int64
	// Watermark is the persisted watermark.
	Watermark uint64
}

// Metrics returns a description of the store. It reads the properties of
// every sstable, so its cost grows with the number of files.
func (s *Store) Metrics() (Metrics, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return Metrics{}, ErrClosed
	}
	var m Metrics
	pm := s.db.Metrics()
	for i := range m.Levels {
		m.Levels[i] = LevelMetrics{Files: pm.Levels[i].TablesCount, Bytes: pm.Levels[i].TablesSize}
	}
	m.DiskUsage = pm.DiskSpaceUsage()
	m.MemTableSize = pm.MemTable.Size
	m.MemTables = pm.MemTable.Count
	tables, err := s.db.SSTables(pebble.WithProperties())
	if err != nil {
		return Metrics{}, s.wrapErr("metrics", err)
	}
	for _, level := range tables {
		for _, t := range level {
			if p := t.Properties; p != nil && p.NumEntries >= p.NumDeletions {
				m.EstimatedKeys += p.NumEntries - p.NumDeletions
			}
		}
	}
	m.Watermark = s.wm.Load()
	return m, nil
}

// Close closes any iterators still open, then the pebble database, then
// releases the directory lock. It waits for in-flight operations. Every
// call returns the result of the first; every other method then returns
// ErrClosed.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Store) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true

	s.itersMu.Lock()
	iters := make([]*Iter, 0, len(s.iters))
	for it := range s.iters {
		iters = append(iters, it)
	}
	clear(s.iters)
	s.itersMu.Unlock()
	var err error
	for _, it := range iters {
		err = errors.Join(err, it.closeByStore())
	}
	if cerr := s.db.Close(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if lerr := s.lock.Close(); lerr != nil {
		err = errors.Join(err, lerr)
	}
	if err != nil {
		return fmt.Errorf("storage: close %q: %w", s.dir, err)
	}
	return nil
}

// syncParent fsyncs the directory holding dir, so that dir's entry in it is
// durable.
func syncParent(fsys vfs.FS, dir string) error {
	d, err := fsys.OpenDir(fsys.PathDir(dir))
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
