package enginedir

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvbuf/kvbuf/internal/failpoint"
	"github.com/kvbuf/kvbuf/internal/fsutil"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

// Options configures Open. A nil *Options means defaults.
type Options struct {
	// StoreFS is the file system the pebble store lives on, where Open and
	// MarkReady look for the store directory. Default: the OS file system.
	// The engine's tests put the store on a pebble MemFS; the manifest,
	// lock and bitslices are always on the OS file system.
	StoreFS vfs.FS
}

// Dir is an engine directory held open, and locked, by this process. Its
// methods are safe for concurrent use.
type Dir struct {
	path    string
	storeFS vfs.FS // nil: the OS file system

	mu      sync.Mutex
	lock    *os.File // nil once closed
	created bool     // this Open published LOCK
	fresh   bool
	version int // the manifest's format (FormatVersion once written by this package)
}

// errClosed is returned by MarkReady after Close.
var errClosed = kverr.Errorf("engine directory: %w", kverr.ErrClosed)

// maxAttempts bounds Open's classify-and-lock rounds. A round is repeated
// only when LOCK appeared or vanished meanwhile (a racing opener published
// it, or a refused one removed it), which settles in a round or two.
const maxAttempts = 100

// testHook, nil outside tests, is called at these points of Open so tests
// can change the directory there: "listed" (readLayout has listed the
// directory), "probed" (readLayout has looked for store/ and bits/ in a
// directory without a manifest, and not yet for the manifest again),
// "opened" (acquire has opened an existing LOCK, not locked
// it yet), "locked" (the lock is held, the directory not checked again).
var testHook func(point, path string)

func hook(point, path string) {
	if testHook != nil {
		testHook(point, path)
	}
}

// Open locks the engine directory at path, creating the directory and
// initialising an empty engine if it is absent or empty (or holds only the
// leftovers of a kvbuf initialisation that crashed); the package
// documentation describes the protocol. Fresh then reports that
// initialisation is incomplete: the caller creates the store (bits/ exists
// already) and calls MarkReady.
//
// Errors, wrapped with the path: kverr.ErrLocked if another engine holds the
// directory; kverr.ErrNotEngine for a path that is not a directory, or a
// directory kvbuf did not make (in which nothing is created or changed);
// kverr.ErrCorruptDir for a damaged or newer manifest, or a ready manifest whose
// store or bits directory is missing (or not a directory). A failed Open of
// an existing engine leaves nothing behind.
func Open(path string, opts *Options) (*Dir, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if err := ensureDir(path); err != nil {
		return nil, err
	}
	for range maxAttempts {
		if _, err := readLayout(path); err != nil {
			return nil, err
		}
		f, created, err := acquire(path)
		if errors.Is(err, errAgain) {
			continue
		}
		if err != nil {
			return nil, err
		}
		d := &Dir{path: path, storeFS: o.StoreFS, lock: f, created: created}
		hook("locked", path)
		if err := d.setUp(); err != nil {
			_ = d.Discard()
			return nil, err
		}
		return d, nil
	}
	return nil, kverr.Errorf("lock %s: the lock file kept changing (%d attempts)", filepath.Join(path, LockName), maxAttempts)
}

// Modes of what the engine creates: private to its owner, as etcd's data
// directory (bitslice files are 0600 too; the store's files are pebble's,
// inside DirMode directories). Existing directories keep their mode.
const (
	DirMode  os.FileMode = 0o700
	FileMode os.FileMode = 0o600
)

// ensureDir creates path if it does not exist, with its missing parents,
// and syncs the parent of every directory it made, up to the closest one
// that existed: a directory made durable in its parent whose own entry in
// the grandparent is not could vanish in a power cut, engine and all
// (issue 30's power-cut test lost whole checkpoints made under a new
// parent directory). pebble's Checkpoint does the same.
func ensureDir(path string) error {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		var made []string // deepest first
		for d := filepath.Clean(path); ; d = filepath.Dir(d) {
			if _, err := os.Lstat(d); err == nil || d == filepath.Dir(d) {
				break
			}
			made = append(made, d)
		}
		if err := os.MkdirAll(path, DirMode); err != nil {
			return kverr.Errorf("create %s: %w", path, err)
		}
		for _, d := range made {
			if err := fsutil.SyncDir(filepath.Dir(d)); err != nil {
				return kverr.Errorf("create %s: sync %s: %w", path, filepath.Dir(d), err)
			}
		}
		return nil
	case err != nil:
		return kverr.Errorf("open %s: %w", path, err)
	case !st.IsDir():
		return kverr.Errorf("open %s: not a directory: %w", path, kverr.ErrNotEngine)
	}
	return nil
}

// setUp runs under the lock: it checks the directory again and
// initialises or checks it (package documentation, steps 4 to 6).
func (d *Dir) setUp() error {
	l, err := readLayout(d.path)
	if err != nil {
		return err
	}
	d.version = l.version
	switch l.state {
	case 0:
		if err := writeManifest(d.path, manifestInit); err != nil {
			return err
		}
		d.fresh, d.version = true, FormatVersion
	case Initialising:
		d.fresh = true
	case Ready:
		if err := d.checkDirs(); err != nil {
			return err
		}
	}
	if d.fresh {
		if err := d.makeBitsDir(); err != nil {
			return err
		}
	}
	for _, n := range l.leftovers {
		// Best effort: a leftover is harmless. One may belong to an opener
		// racing this one; it finds its file gone and looks again.
		_ = os.Remove(filepath.Join(d.path, n))
	}
	return nil
}

// checkDirs checks that a ready engine has its store and bits directories:
// they were durable before the ready manifest was written, so a missing
// one means lost data, never a new engine.
func (d *Dir) checkDirs() error {
	if err := d.checkStore(); err != nil {
		return kverr.Errorf("%s has a manifest but %w", d.path, err)
	}
	st, err := os.Stat(d.BitsDirPath())
	if err == nil && !st.IsDir() {
		err = syscall.ENOTDIR
	}
	if err != nil {
		return kverr.Errorf("%s has a manifest but no usable %s directory: %w: %w", d.path, BitsDir, kverr.ErrCorruptDir, err)
	}
	return nil
}

// checkStore checks that the store directory exists on the store's file
// system.
func (d *Dir) checkStore() error {
	var st os.FileInfo
	var err error
	if d.storeFS != nil {
		st, err = d.storeFS.Stat(d.StorePath())
	} else {
		st, err = os.Stat(d.StorePath())
	}
	if err == nil && !st.IsDir() {
		err = syscall.ENOTDIR
	}
	if err != nil {
		return kverr.Errorf("no usable %s directory: %w: %w", StoreDir, kverr.ErrCorruptDir, err)
	}
	return nil
}

// makeBitsDir creates the bits directory of an initialising engine and
// makes its entry durable.
func (d *Dir) makeBitsDir() error {
	bits := d.BitsDirPath()
	err := os.Mkdir(bits, DirMode)
	if errors.Is(err, fs.ErrExist) {
		st, serr := os.Stat(bits)
		switch {
		case serr != nil:
			err = serr
		case st.IsDir():
			err = nil
		default:
			err = kverr.Errorf("%w: %w", kverr.ErrCorruptDir, syscall.ENOTDIR)
		}
	}
	if err != nil {
		return kverr.Errorf("create %s: %w", bits, err)
	}
	if err := fsutil.SyncDir(d.path); err != nil {
		return kverr.Errorf("sync %s: %w", d.path, err)
	}
	return nil
}

// writeManifest replaces the manifest of dir with text: a temporary file
// of this writer's own, synced, renamed over the manifest, then the
// directory synced, so a crash leaves the old manifest or the new one,
// never a torn one. Only the lock holder calls it.
func writeManifest(dir, text string) (err error) {
	mpath := filepath.Join(dir, ManifestName)
	f, err := createTemp(dir, manifestTempPrefix)
	if err != nil {
		return kverr.Errorf("write %s: %w", mpath, err)
	}
	tmp := f.Name()
	err = failpoint.Hit(failpoint.EnginedirManifest)
	if err == nil {
		_, err = f.WriteString(text)
	}
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		failpoint.FileSynced(f, 0, -1)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = failpoint.Hit(failpoint.EnginedirManifestRename)
	}
	if err == nil {
		err = os.Rename(tmp, mpath)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return kverr.Errorf("write %s: %w", mpath, err)
	}
	if err := fsutil.SyncDir(dir); err != nil {
		return kverr.Errorf("write %s: sync %s: %w", mpath, dir, err)
	}
	return nil
}

// Path returns the engine directory's path, as given to Open.
func (d *Dir) Path() string { return d.path }

// Fresh reports whether initialisation is incomplete: the caller must
// create the store and then call MarkReady.
func (d *Dir) Fresh() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fresh
}

// StorePath returns the path of the store directory.
func (d *Dir) StorePath() string { return filepath.Join(d.path, StoreDir) }

// BitsDirPath returns the path of the bits directory.
func (d *Dir) BitsDirPath() string { return filepath.Join(d.path, BitsDir) }

// BitsPath returns the path of the bitslice file called name (bits/NAME.bits).
// It does not check name: call CheckName first.
func (d *Dir) BitsPath(name string) string {
	return filepath.Join(d.path, BitsDir, name+BitsExt)
}

// SyncBitsDir makes the entries of the bits directory durable: call it
// after creating a bitslice file and before acknowledging anything
// written to it.
func (d *Dir) SyncBitsDir() error {
	if err := fsutil.SyncDir(d.BitsDirPath()); err != nil {
		return kverr.Errorf("sync %s: %w", d.BitsDirPath(), err)
	}
	return nil
}

// MarkReady finishes initialisation once the caller has created the store:
// it makes the engine directory's entries durable, then atomically
// replaces the initialising manifest with the ready one (temporary file,
// fsync, rename, directory fsync). From then on a missing store is
// kverr.ErrCorruptDir. It does nothing if the directory is not Fresh.
func (d *Dir) MarkReady() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lock == nil {
		return errClosed
	}
	if !d.fresh {
		return nil
	}
	if err := d.checkStore(); err != nil {
		return kverr.Errorf("mark %s ready: %w", d.path, err)
	}
	// The store's and bits' entries must be durable before a manifest
	// that says they exist (storage syncs the store's on its own file
	// system; this covers the OS's).
	if err := fsutil.SyncDir(d.path); err != nil {
		return kverr.Errorf("mark %s ready: sync: %w", d.path, err)
	}
	if err := writeManifest(d.path, manifestReady); err != nil {
		return err
	}
	d.fresh, d.version = false, FormatVersion
	return nil
}

// Version returns the format of the directory's manifest: FormatVersion,
// or 1 for an engine made by an earlier kvbuf until Upgrade.
func (d *Dir) Version() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.version
}

// Upgrade atomically replaces a ready format-1 manifest with the current
// one (as MarkReady writes it), once the caller has recorded in the store
// what the current format needs. It does nothing for a directory that is
// Fresh or already current.
func (d *Dir) Upgrade() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lock == nil {
		return errClosed
	}
	if d.fresh || d.version >= FormatVersion {
		return nil
	}
	if err := writeManifest(d.path, manifestReady); err != nil {
		return err
	}
	d.version = FormatVersion
	return nil
}

// Close releases the lock. It is idempotent; the first call's error is
// returned once, later calls return nil.
func (d *Dir) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closeLocked(false)
}

// Discard is Close for an engine Open that failed after this package's
// Open succeeded: besides releasing the lock it removes the LOCK file if
// this Open created it, so a failed Open of an existing engine leaves
// nothing behind. (An initialising manifest and bits/ written into an
// empty directory stay: the next Open finishes the initialisation.)
func (d *Dir) Discard() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closeLocked(d.created)
}

func (d *Dir) closeLocked(removeLock bool) error {
	if d.lock == nil {
		return nil
	}
	if removeLock {
		// Removed while still locked: an opener that opened it meanwhile
		// gets kverr.ErrLocked now, or the lock on a removed file, which it
		// notices (sameFile) and looks again.
		_ = os.Remove(filepath.Join(d.path, LockName))
	}
	err := d.lock.Close()
	d.lock = nil
	if err != nil {
		return kverr.Errorf("unlock %s: %w", d.path, err)
	}
	return nil
}
