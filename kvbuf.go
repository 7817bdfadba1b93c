package kvbuf

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/buffer"
	"github.com/kvbuf/kvbuf/flush"
	"github.com/kvbuf/kvbuf/internal/fsutil"
	"github.com/kvbuf/kvbuf/storage"
)

// Layout of an engine directory.
const (
	// ManifestName is the file that marks a directory as a kvbuf engine.
	ManifestName = "KVBUF"
	// LockName is the file an open engine holds an exclusive flock on.
	LockName = "LOCK"
	// StoreDir is the subdirectory holding the pebble store.
	StoreDir = "store"
	// BitsDir is the subdirectory holding one file per bitslice.
	BitsDir = "bits"
	// BitsExt is the file name extension of a bitslice file.
	BitsExt = ".bits"

	manifestText = "kvbuf engine directory\nformat 1\n"
	// manifestInit marks a directory whose store and bits directories may
	// not exist yet; Open replaces it with manifestText once they are
	// durable, so a complete manifest without a store is corruption.
	manifestInit = "kvbuf engine directory\nformat 1\ninitialising\n"
	maxNameLen   = 128
)

// DB is an open engine: one pebble store holding every keyspace, any number
// of named bitslices, each behind its pending-changes overlay, and one
// flusher that makes all of them durable under a single watermark.
//
// All methods are safe for concurrent use.
//
// # Caveats
//
//   - The watermark is the highest op number made durable. It is a receipt
//     for "everything up to here" only if the host finishes op n before it
//     starts op n+1 (as a log-replaying host does); ops written concurrently
//     may land in different flushes.
//   - Bitslices are flushed before the store, so after a crash a bitslice
//     may hold changes newer than the watermark; replaying from the
//     watermark re-applies them, which is harmless for idempotent writes.
//   - If Close's final flush fails, Close still closes every file and
//     returns that error: the changes it could not flush are gone, and the
//     host replays them from Watermark as after a crash.
//   - Iterators see the pending changes present when they were created
//     merged with the store as it is when they read it; see buffer.Iter.
type DB struct {
	dir  string
	opts Options
	lock *os.File

	store   *storage.Store
	kv      *buffer.KV
	flusher *flush.Flusher
	target  *engineTarget

	mu        sync.Mutex // guards keyspaces, bits and catalog writes
	keyspaces map[string]*KV
	bits      map[string]*Bits
	nextID    uint32

	keyBufs sync.Pool // *[]byte scratch for prefixed keys

	closeOnce sync.Once
	closeErr  error
}

// Open opens the engine in dir, creating dir and an empty engine if it does
// not exist or is empty. See Options for the defaults of a nil opts.
//
// Errors: ErrLocked if another engine has dir open; ErrNotEngine for a
// non-empty directory kvbuf did not create; ErrCorrupt (also matching the
// lower package's ErrCorrupt) for damaged files. On error nothing in dir
// has been changed, except that an empty directory may have been
// initialised.
func Open(dir string, opts *Options) (*DB, error) {
	o := withDefaults(opts)
	fresh, err := prepareDir(dir)
	if err != nil {
		return nil, err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	db := &DB{dir: dir, opts: o, lock: lock, keyspaces: map[string]*KV{}, bits: map[string]*Bits{}}
	if err := db.open(fresh); err != nil {
		db.closeFiles()
		return nil, err
	}
	return db, nil
}

func withDefaults(opts *Options) Options {
	var o Options
	if opts != nil {
		o = *opts
	}
	return o
}

// prepareDir checks that dir is an engine directory, or makes it one if it
// is absent or empty. fresh reports that initialisation is not complete
// (the manifest says so): open then creates the store and bits directories
// and only afterwards writes the final manifest, so a final manifest always
// means a complete engine.
func prepareDir(dir string) (fresh bool, err error) {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return false, fmt.Errorf("kvbuf: create %s: %w", dir, err)
		}
		if err := fsutil.SyncDir(filepath.Dir(dir)); err != nil {
			return false, fmt.Errorf("kvbuf: create %s: sync parent: %w", dir, err)
		}
	case err != nil:
		return false, fmt.Errorf("kvbuf: open %s: %w", dir, err)
	case !st.IsDir():
		return false, fmt.Errorf("kvbuf: open %s: not a directory: %w", dir, ErrNotEngine)
	}
	mpath := filepath.Join(dir, ManifestName)
	b, err := os.ReadFile(mpath)
	if err == nil {
		if string(b) == manifestInit {
			return true, nil // a crash cut initialisation short: finish it
		}
		if string(b) != manifestText {
			if strings.HasPrefix(string(b), "kvbuf engine directory\n") {
				return false, fmt.Errorf("kvbuf: %s: unsupported or damaged manifest %q: %w", mpath, b, ErrCorrupt)
			}
			return false, fmt.Errorf("kvbuf: %s: foreign manifest: %w", mpath, ErrNotEngine)
		}
		return false, nil
	}
	if errors.Is(err, syscall.EISDIR) {
		// kvbuf never makes a directory by that name.
		return false, fmt.Errorf("kvbuf: %s is a directory: %w", mpath, ErrNotEngine)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("kvbuf: read %s: %w", mpath, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false, fmt.Errorf("kvbuf: open %s: %w", dir, err)
	}
	for _, e := range ents {
		// A crash during initialisation can leave only these behind.
		switch e.Name() {
		case LockName, ManifestName + ".tmp":
		default:
			return false, fmt.Errorf("kvbuf: %s has %q but no %s: %w", dir, e.Name(), ManifestName, ErrNotEngine)
		}
	}
	if err := writeFileAtomic(mpath, []byte(manifestInit)); err != nil {
		return false, err
	}
	return true, nil
}

// writeFileAtomic writes data to path through a synced temporary file and a
// rename, then syncs the directory, so a crash leaves the old file or the
// new one, never a torn one.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("kvbuf: write %s: %w", path, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = fsutil.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		return fmt.Errorf("kvbuf: write %s: %w", path, err)
	}
	return nil
}

func (db *DB) open(fresh bool) error {
	st, err := storage.Open(filepath.Join(db.dir, StoreDir), &storage.Options{
		CacheSize:        db.opts.CacheSize,
		FS:               db.opts.storeFS,
		ErrorIfNotExists: !fresh, // a manifest without a store means lost data, not a new engine
	})
	if !fresh && errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("kvbuf: %s has a manifest but no store: %w: %w", db.dir, ErrCorrupt, err)
	}
	if err != nil {
		return wrapOpenErr(err)
	}
	db.store = st
	if err := os.MkdirAll(filepath.Join(db.dir, BitsDir), 0o755); err != nil {
		return fmt.Errorf("kvbuf: open %s: %w", db.dir, err)
	}
	// The store and bits entries must be durable before anything in them
	// is acknowledged (storage syncs the store's entry on the store's file
	// system; this covers bits, and the store when both are on the OS's).
	if err := fsutil.SyncDir(db.dir); err != nil {
		return fmt.Errorf("kvbuf: sync %s: %w", db.dir, err)
	}
	if err := db.loadCatalog(); err != nil {
		return err
	}
	if fresh {
		if err := writeFileAtomic(filepath.Join(db.dir, ManifestName), []byte(manifestText)); err != nil {
			return err
		}
	}
	wm, err := st.Watermark()
	if err != nil {
		return wrapOpenErr(err)
	}
	bopts := &buffer.Options{
		Shards:          db.opts.Shards,
		MaxKeySize:      db.maxKeySize() + prefixLen,
		MaxValueSize:    db.opts.MaxValueSize,
		MaxPendingBytes: db.opts.MaxPendingBytes,
	}
	db.kv = buffer.NewKV(st, bopts)
	db.target = &engineTarget{kv: db.kv}
	db.flusher = flush.New([]flush.Target{db.target}, &flush.Options{
		Interval:        db.opts.FlushInterval,
		MaxPendingBytes: db.opts.MaxPendingBytes,
		Watermark:       wm,
	})
	return nil
}

// wrapOpenErr adds ErrCorrupt and ErrLocked to the lower packages' errors so
// callers need only the kvbuf sentinels.
func wrapOpenErr(err error) error {
	switch {
	case errors.Is(err, storage.ErrCorrupt), errors.Is(err, bitslice.ErrCorrupt):
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	case errors.Is(err, storage.ErrLocked), errors.Is(err, bitslice.ErrLocked):
		return fmt.Errorf("%w: %w", ErrLocked, err)
	}
	return err
}

// closeFiles releases whatever open has acquired, for a failed Open.
func (db *DB) closeFiles() {
	for _, b := range db.bits {
		_ = b.file.Close()
	}
	if db.store != nil {
		_ = db.store.Close()
	}
	unlockDir(db.lock)
}

// Dir returns the engine directory.
func (db *DB) Dir() string { return db.dir }

// Flush returns once every write that completed before the call is durable
// and the watermark covering it is persisted. Concurrent callers share one
// physical flush. It returns ctx.Err() if ctx ends first (the flush goes on
// for the others) and ErrClosed after Close has begun.
func (db *DB) Flush(ctx context.Context) error {
	return db.flusher.Flush(ctx)
}

// FlushMemtables flushes like Flush, then writes pebble's memtables to
// sstables, so recovery does not need to replay the write-ahead log
// (kvtool flush uses it). It blocks until pebble's flush is done.
func (db *DB) FlushMemtables(ctx context.Context) error {
	if err := db.flusher.Flush(ctx); err != nil {
		return err
	}
	op, err := db.flusher.BeginRead()
	if err != nil {
		return err
	}
	defer op.End()
	if err := db.store.Flush(); err != nil {
		return fmt.Errorf("kvbuf: flush memtables of %s: %w", db.dir, err)
	}
	return nil
}

// Watermark returns the persisted watermark: the highest op number whose
// writes are durable. After a crash, reopen and replay the host's log from
// the op after it.
func (db *DB) Watermark() uint64 { return db.flusher.Watermark() }

// Stats is a snapshot of an engine's counters.
type Stats struct {
	flush.Stats
	// Keyspaces and Bitslices count the names in use.
	Keyspaces, Bitslices int
}

// Stats returns a snapshot of the engine's counters.
func (db *DB) Stats() Stats {
	db.mu.Lock()
	defer db.mu.Unlock()
	return Stats{Stats: db.flusher.Stats(), Keyspaces: len(db.keyspaces), Bitslices: len(db.bits)}
}

// Close refuses new operations (ErrClosed), waits for in-flight reads,
// writes and flushes, runs a final flush, stops the background flusher and
// closes every file. It is idempotent and safe to call from many goroutines:
// every call returns the first call's result (the final flush's error, or
// a close error). Done reports when it has finished.
func (db *DB) Close() error {
	db.closeOnce.Do(func() {
		err := db.flusher.Close()
		db.mu.Lock()
		for _, b := range db.bits {
			if cerr := b.file.Close(); err == nil {
				err = cerr
			}
		}
		db.mu.Unlock()
		if cerr := db.store.Close(); err == nil {
			err = cerr
		}
		unlockDir(db.lock)
		db.closeErr = err
	})
	return db.closeErr
}

// Done returns a channel closed once Close has drained every in-flight
// operation and made the final flush; any number of goroutines may wait on
// it.
func (db *DB) Done() <-chan struct{} { return db.flusher.Done() }

// Wait blocks until Close has drained the engine (see Done) or ctx ends.
func (db *DB) Wait(ctx context.Context) error { return db.flusher.Wait(ctx) }

// checkName enforces the keyspace and bitslice name rules (see ErrBadName).
func checkName(kind, name string) error {
	if name == "" || len(name) > maxNameLen || name == "." || name == ".." {
		return fmt.Errorf("kvbuf: %s name %q: %w", kind, name, ErrBadName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("kvbuf: %s name %q: byte %#x: %w", kind, name, c, ErrBadName)
		}
	}
	return nil
}

// BitsNames returns the names of the bitslices in dir's bits directory in
// sorted order, for tools that inspect an engine without opening it.
func BitsNames(dir string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(dir, BitsDir))
	if err != nil {
		return nil, fmt.Errorf("kvbuf: list bitslices in %s: %w", dir, err)
	}
	var names []string
	for _, e := range ents {
		n := e.Name()
		if !e.Type().IsRegular() || !strings.HasSuffix(n, BitsExt) {
			continue
		}
		n = strings.TrimSuffix(n, BitsExt)
		if checkName("bitslice", n) == nil {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names, nil
}
