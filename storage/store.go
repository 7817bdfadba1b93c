package storage

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvbuf/kvbuf/internal/fsutil"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

// Store is a pebble database with keyspaced user keys, meta entries, a
// durable watermark and ordered, pipelined commits. All methods are safe for
// concurrent use, including concurrently with Close.
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

	// commitMu orders commits and guards the group-commit state below:
	// Commit holds it from the watermark decision to applying the batch to
	// pebble or merging it into the next group.
	commitMu sync.Mutex
	// committedWM is the highest watermark committed (applied to pebble or
	// merged into the pending group, durable or not); it starts at the
	// persisted one.
	committedWM uint64
	// last is the latest commit that wrote anything, nil before the first.
	last *Commit
	// inflight is the group applied to pebble whose WAL sync the syncer is
	// waiting for, or the ingest it is running; queue holds what arrives
	// meanwhile, in commit order: batch groups (every commit that arrived
	// between two ingests merged into one batch) and ingests, each started
	// once everything before it is durable. At most one group is ever in
	// pebble's hands: see Commit and ingest_commit.go.
	inflight *group
	queue    []*group
	// settledWM is the highest watermark of a commit the syncer reported
	// durable; committedWM falls back to it when a failure fails the
	// queue.
	settledWM uint64
	// ig writes ingests' tables (nil on a read-only store).
	ig *ingester
	// stopSync asks the syncer to return once nothing is in flight.
	stopSync bool
	// syncKick wakes the syncer (buffered 1); syncerDone is closed when it
	// returns. Both are nil on a read-only store.
	syncKick   chan struct{}
	syncerDone chan struct{}
	// syncErr is the first failed WAL write or sync; from then on the
	// store refuses writes (kvbuf.ErrSyncFailed).
	syncErr atomic.Pointer[error]
	// wm is the persisted watermark: loaded at Open, raised by
	// Commit.Wait.
	wm atomic.Uint64

	// keyBufs pools scratch buffers for stored keys on the read path;
	// pebble retains the key it is given in a pooled struct, so a stack
	// buffer would escape and cost an allocation per Get.
	keyBufs sync.Pool

	// pit caches the iterators of point reads (pointread.go).
	pit *pointIters
	// l0 wakes WaitL0 at the end of every pebble flush and compaction;
	// l0Stop is pebble's L0StopWritesThreshold, after defaults.
	l0     *l0Waker
	l0Stop int

	// openMu guards the iterators and snapshots Close must close.
	openMu sync.Mutex
	iters  map[*Iter]struct{}
	snaps  map[*Snapshot]struct{}
}

// Open opens the store in dir, creating it (and dir) unless opts says
// otherwise. See Options for defaults.
//
// Errors: kvbuf.ErrLocked if dir is open by another Store (this process or
// another); kvbuf.ErrCorruptBlock if pebble finds on-disk corruption; fs.ErrNotExist
// for a missing store with ReadOnly or ErrorIfNotExists (dir is then left
// exactly as it was); fs.ErrExist for an existing one with ErrorIfExists;
// kvbuf.ErrBadOptions for an option out of range (Options.Validate).
func Open(dir string, opts *Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	po := PebbleOptions(opts)
	fsys := po.FS

	if po.ReadOnly || po.ErrorIfNotExists {
		fi, err := fsys.Stat(dir)
		if err != nil {
			return nil, kverr.Errorf("open %q: %w", dir, err)
		}
		if !fi.IsDir() {
			return nil, kverr.Errorf("open %q: not a directory: %w", dir, syscall.ENOTDIR)
		}
		// pebble.Open would say so too, but only after LockDirectory
		// created a LOCK file in dir.
		if noStore(fsys, dir) {
			return nil, kverr.Errorf("open %q: %w: %w", dir, fs.ErrNotExist, pebble.ErrDBDoesNotExist)
		}
	} else if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return nil, kverr.Errorf("open %q: %w", dir, err)
	} else if err := fsutil.SyncDirWith(fsys.OpenDir, fsys.PathDir(dir)); err != nil {
		// pebble syncs dir itself, never dir's entry in its parent: without
		// this a power cut can lose a new store whole, acknowledged
		// flushes and all (kvbuf's TestCrashableMemStore).
		return nil, kverr.Errorf("open %q: sync parent directory: %w", dir, err)
	}

	// Take the directory lock ourselves so that a lock failure is told apart
	// from every other open failure: pebble returns it unwrapped.
	lock, err := pebble.LockDirectory(dir, fsys)
	if err != nil {
		return nil, mapLockErr(dir, err)
	}
	po.Lock = lock
	// Point-read rule P1: a flush or compaction retires the version cached
	// iterators read.
	pit := &pointIters{}
	el := *po.EventListener
	l0 := &l0Waker{}
	el.FlushEnd = func(pebble.FlushInfo) { pit.bump(); l0.wake() }
	el.CompactionEnd = func(pebble.CompactionInfo) { pit.bump(); l0.wake() }
	po.EventListener = &el
	if opts != nil && opts.noAutoCompactions {
		po.DisableAutomaticCompactions = true
	}
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
		pit:      pit,
		l0:       l0,
		l0Stop:   cmp.Or(po.L0StopWritesThreshold, pebbleL0StopWritesThreshold),
		iters:    make(map[*Iter]struct{}),
		snaps:    make(map[*Snapshot]struct{}),
	}
	s.keyBufs.New = func() any { b := make([]byte, 0, 64); return &b }
	wm, err := s.loadWatermark()
	if err != nil {
		_ = db.Close()
		_ = lock.Close()
		return nil, err
	}
	s.wm.Store(wm)
	s.committedWM = wm
	s.settledWM = wm
	if !s.readOnly {
		s.ig = newIngester(fsys, dir, po, ingestSplit(opts), ingestFormat(opts))
		if err := s.ig.removeLeftovers(); err != nil {
			_ = db.Close()
			_ = lock.Close()
			return nil, kverr.Errorf("open %q: remove unfinished ingests: %w", dir, err)
		}
		s.syncKick = make(chan struct{}, 1)
		s.syncerDone = make(chan struct{})
		go s.syncLoop()
	}
	return s, nil
}

// noStore reports whether dir certainly holds no pebble store: pebble.Peek
// finds no manifest marker (the test pebble.Open uses for
// ErrDBDoesNotExist) and there is no CURRENT file (a format-1 store, which
// pebble.Open rejects with its own error). When Peek fails, pebble.Open
// reports the problem.
func noStore(fsys vfs.FS, dir string) bool {
	desc, err := pebble.Peek(dir, fsys)
	if err != nil || desc.Exists {
		return false
	}
	_, err = fsys.Stat(fsys.PathJoin(dir, "CURRENT"))
	return errors.Is(err, fs.ErrNotExist)
}

// mapLockErr classifies an error from pebble.LockDirectory. A failure to
// create or open the LOCK file is a *PathError (permission, missing
// directory, dir is a file); anything else is the lock being held: fcntl's
// EAGAIN/EACCES from another process, vfs.MemFS's EAGAIN, or vfs.Default's
// "lock held by current process".
func mapLockErr(dir string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return kverr.Errorf("open %q: %w", dir, err)
	}
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) ||
		strings.Contains(err.Error(), "lock held by current process") {
		return kverr.Errorf("open %q: %w: %w", dir, kverr.ErrLocked, err)
	}
	return kverr.Errorf("open %q: lock: %w", dir, err)
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
		return kverr.Errorf("open %q: %w: %w", dir, kverr.ErrCorruptBlock, err)
	case errors.Is(err, pebble.ErrDBDoesNotExist):
		return kverr.Errorf("open %q: %w: %w", dir, fs.ErrNotExist, err)
	case errors.Is(err, pebble.ErrDBAlreadyExists):
		return kverr.Errorf("open %q: %w: %w", dir, fs.ErrExist, err)
	}
	return kverr.Errorf("open %q: %w", dir, err)
}

// wrapErr adds the operation and directory to a pebble error and maps
// corruption to kvbuf.ErrCorruptBlock and pebble.ErrReadOnly to kvbuf.ErrReadOnly.
func (s *Store) wrapErr(op string, err error) error {
	switch {
	case pebble.IsCorruptionError(err):
		return kverr.Errorf("%s in %q: %w: %w", op, s.dir, kverr.ErrCorruptBlock, err)
	case errors.Is(err, pebble.ErrReadOnly):
		return kverr.Errorf("%s in %q: %w", op, s.dir, kverr.ErrReadOnly)
	}
	return kverr.Errorf("%s in %q: %w", op, s.dir, err)
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
		return 0, kverr.Errorf("watermark in %q has %d bytes, want 8: %w", s.dir, len(v), kverr.ErrCorruptBlock)
	}
	return binary.BigEndian.Uint64(v), nil
}

// Dir returns the directory the store was opened in.
func (s *Store) Dir() string { return s.dir }

// Get returns a copy of the value stored under key in keyspace ks, or an
// error wrapping kvbuf.ErrNotFound (or kvbuf.ErrInvalidKeyspace, kvbuf.ErrClosed,
// kvbuf.ErrCorruptBlock).
func (s *Store) Get(ks KeyspaceID, key []byte) ([]byte, error) {
	return s.getUser(nil, ks, key, false)
}

// GetAppend appends the value stored under key in keyspace ks to dst and
// returns the extended slice; with enough capacity in dst it does not
// allocate. On error dst is returned unchanged; errors are Get's.
func (s *Store) GetAppend(dst []byte, ks KeyspaceID, key []byte) ([]byte, error) {
	return s.getUser(dst, ks, key, true)
}

func (s *Store) getUser(dst []byte, ks KeyspaceID, key []byte, appendMode bool) ([]byte, error) {
	return userRead(s, "get", ks, key, &s.mu, s.closedErr, dst, func(k []byte) ([]byte, error) {
		return s.pointGet(dst, k, appendMode) // a cached iterator, not DB.Get (pointread.go)
	})
}

// userRead is the guarded read that the point reads (Store's and
// Snapshot's Get, GetAppend and Has) share: it refuses keyspace 0, builds
// the stored key in a pooled buffer, and runs read on it under mu's read
// lock unless closedErr (called under that lock) says the reader is
// closed. On an error it returns failed (false, or Get's dst unchanged);
// read's error is wrapped with op, the keyspace and the key.
func userRead[T any](s *Store, op string, ks KeyspaceID, key []byte, mu *sync.RWMutex, closedErr func() error, failed T, read func(k []byte) (T, error)) (T, error) {
	if ks == 0 {
		return failed, errKeyspace(op)
	}
	bp := s.keyBufs.Get().(*[]byte)
	k := appendUserKey((*bp)[:0], ks, key)
	mu.RLock()
	if err := closedErr(); err != nil {
		mu.RUnlock()
		s.keyBufs.Put(bp)
		return failed, err
	}
	v, err := read(k)
	mu.RUnlock()
	*bp = k
	s.keyBufs.Put(bp)
	if err != nil {
		return failed, s.userKeyErr(op, ks, key, err)
	}
	return v, nil
}

// untrack removes x from set (the store's open snapshots or iterators):
// its owner closed it, so Store.Close need not.
func untrack[T comparable](s *Store, set map[T]struct{}, x T) {
	s.openMu.Lock()
	delete(set, x)
	s.openMu.Unlock()
}

// closeByStore empties set (the open snapshots or iterators) under mu and
// closes each one it held for Store.Close, outside mu.
func closeByStore[T interface {
	comparable
	closeByStore() error
}](mu *sync.Mutex, set map[T]struct{}) error {
	mu.Lock()
	all := make([]T, 0, len(set))
	for x := range set {
		all = append(all, x)
	}
	clear(set)
	mu.Unlock()
	var err error
	for _, x := range all {
		err = errors.Join(err, x.closeByStore())
	}
	return err
}

// closedErr is kvbuf.ErrClosed once Close has begun, nil before. Callers hold
// s.mu.
func (s *Store) closedErr() error {
	if s.closed {
		return kverr.ErrClosed
	}
	return nil
}

// GetMeta returns a copy of the meta value set with Batch.SetMeta, or an
// error wrapping kvbuf.ErrNotFound.
func (s *Store) GetMeta(name string) ([]byte, error) {
	k := appendMetaKey(nil, name)
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, kverr.ErrClosed
	}
	v, err := readValue(s.db, nil, k, false)
	s.mu.RUnlock()
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, kverr.Errorf("meta %q: %w", name, kverr.ErrNotFound)
	}
	if err != nil {
		return nil, s.wrapErr(fmt.Sprintf("get meta %q", name), err)
	}
	return v, nil
}

// readValue looks the stored key k up in r and returns its value appended
// to dst (appendMode) or in a new slice; on error it returns dst unchanged
// and pebble's error.
func readValue(r pebble.Reader, dst, k []byte, appendMode bool) ([]byte, error) {
	v, c, err := r.Get(k)
	if err != nil {
		return dst, err
	}
	out := dst
	if appendMode {
		out = append(out, v...)
	} else {
		out = make([]byte, len(v))
		copy(out, v)
	}
	if err := c.Close(); err != nil {
		return dst, err
	}
	return out, nil
}

// userKeyErr maps a pebble error from reading a user key: kvbuf.ErrNotFound is
// returned as is (no allocation on a miss), anything else names the key.
// It takes the key as a string copy so that callers' slices do not escape.
func (s *Store) userKeyErr(op string, ks KeyspaceID, key []byte, err error) error {
	if errors.Is(err, pebble.ErrNotFound) {
		return kverr.ErrNotFound
	}
	return s.wrapErr(fmt.Sprintf("%s keyspace %d key %q", op, ks, string(key)), err)
}

// Watermark returns the persisted watermark: the highest op number carried
// by a commit whose Wait returned nil (Apply included), or the one found
// at Open; 0 for a new store. It never goes backwards.
func (s *Store) Watermark() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, kverr.ErrClosed
	}
	return s.wm.Load(), nil
}

// Flush flushes pebble's memtables to sstables and waits for it. Commits
// are durable without it (the WAL is synced); Flush only moves data out of
// the WAL (kvtool flush, tests of the on-disk layout).
func (s *Store) Flush() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.writable("flush"); err != nil {
		return err
	}
	// A flush rotates the WAL, which pebble cannot do after a log failure
	// (it panics).
	if err := s.syncErr.Load(); err != nil {
		return *err
	}
	if err := s.db.Flush(); err != nil {
		return s.wrapErr("flush", err)
	}
	return nil
}

// Compact compacts every key of the store down to pebble's last level and
// waits for it (ctx ends the wait early, with ctx's error). Reads and
// writes go on meanwhile. Point reads of the last level do not consult
// Bloom filters (pebble's default: most keys read there exist), so after
// Compact a read of an absent key reads a data block.
func (s *Store) Compact(ctx context.Context) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.writable("compact"); err != nil {
		return err
	}
	it, err := s.db.NewIter(nil)
	if err != nil {
		return s.wrapErr("compact", err)
	}
	var lo, hi []byte
	if it.First() {
		lo = slices.Clone(it.Key())
		it.Last()
		hi = append(slices.Clone(it.Key()), 0) // past the last key
	}
	if err := it.Close(); err != nil {
		return s.wrapErr("compact", err)
	}
	if lo == nil {
		return nil // empty
	}
	if err := s.db.Compact(ctx, lo, hi, true); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return s.wrapErr("compact", err)
	}
	return nil
}

// writable returns kvbuf.ErrClosed after Close and, wrapped as `op "dir": ...`,
// kvbuf.ErrReadOnly for a read-only store. s.mu must be held (read side).
func (s *Store) writable(op string) error {
	if s.closed {
		return kverr.ErrClosed
	}
	if s.readOnly {
		return kverr.Errorf("%s %q: %w", op, s.dir, kverr.ErrReadOnly)
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
	// Watermark is the persisted watermark (Store.Watermark).
	Watermark uint64
}

// BackgroundJobs returns the number of pebble flushes and compactions in
// progress: reads timed while it is above 0 also pay for them. 0 after
// Close.
func (s *Store) BackgroundJobs() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0
	}
	pm := s.db.Metrics()
	return pm.Compact.NumInProgress + pm.Flush.NumInProgress
}

// Metrics returns a description of the store. It reads the properties of
// every sstable, so its cost grows with the number of files.
func (s *Store) Metrics() (Metrics, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return Metrics{}, kverr.ErrClosed
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

// Close finishes pending commits (waits for their WAL syncs, so their
// Waits return the sync's result), closes the snapshots and iterators still
// open, then the pebble database, then releases the directory lock. It
// waits for in-flight operations. Every call returns the result of the
// first; every other method then returns kvbuf.ErrClosed. After a failed WAL
// sync it reports pebble's error from closing the log.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Store) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	// Commit runs under mu.RLock: none is running or can start. The
	// syncer settles what is in flight and pending, then returns.
	if s.syncerDone != nil {
		s.commitMu.Lock()
		s.stopSync = true
		s.commitMu.Unlock()
		s.kickSyncer()
		<-s.syncerDone
	}

	var err error
	// Snapshots first: Snapshot.NewIter registers its iterator under the
	// snapshot's lock, so once every snapshot is closed no iterator can
	// appear behind the collection below.
	err = errors.Join(err, closeByStore(&s.openMu, s.snaps))
	err = errors.Join(err, closeByStore(&s.openMu, s.iters))
	if cerr := s.pit.closeAll(); cerr != nil { // point-read rule P3
		err = errors.Join(err, cerr)
	}
	if cerr := s.db.Close(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if lerr := s.lock.Close(); lerr != nil {
		err = errors.Join(err, lerr)
	}
	if err != nil {
		return kverr.Errorf("close %q: %w", s.dir, err)
	}
	return nil
}
