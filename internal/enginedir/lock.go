package enginedir

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/kvbuf/kvbuf/internal/failpoint"
	"github.com/kvbuf/kvbuf/internal/fsutil"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

// flock locks belong to the open file description, so a second Open in the
// same process conflicts just as one in another process does, and the
// kernel drops the lock when the process dies: a kill -9 leaves no stale
// lock behind.

// acquire takes the engine lock of the directory at path (package
// documentation, step 3). created reports that this call published LOCK.
// errAgain means LOCK changed under it: classify the directory again.
func acquire(path string) (f *os.File, created bool, err error) {
	lpath := filepath.Join(path, LockName)
	f, err = os.OpenFile(lpath, os.O_RDWR|syscall.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return publishLock(path)
	case errors.Is(err, syscall.EISDIR):
		return nil, false, kverr.Errorf("lock %s: not a regular file: %w", lpath, kverr.ErrCorruptDir)
	case err != nil:
		return nil, false, kverr.Errorf("lock %s: %w", lpath, err)
	}
	hook("opened", path)
	if err := lockFile(f, lpath, unix.LOCK_EX); err != nil {
		f.Close()
		return nil, false, err
	}
	if err := sameFile(f, lpath); err != nil {
		f.Close()
		return nil, false, err
	}
	return f, false, nil
}

// lockFile flocks f non-blocking: kverr.ErrLocked if another holder conflicts.
func lockFile(f *os.File, lpath string, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EWOULDBLOCK):
			return kverr.Errorf("lock %s: %w", lpath, kverr.ErrLocked)
		}
		// Untested: besides EWOULDBLOCK and EINTR, flock fails only with
		// ENOLCK.
		return kverr.Errorf("lock %s: %w", lpath, err)
	}
}

// sameFile checks, after f was locked, that lpath still names f and that f
// is a regular file. LOCK is removed only by its lock holder, so if lpath
// now names another file (or none), the lock was taken on a removed file:
// errAgain.
func sameFile(f *os.File, lpath string) error {
	fst, err := f.Stat()
	if err != nil {
		// Untested: fstat of an open descriptor fails only on an I/O error.
		return kverr.Errorf("lock %s: %w", lpath, err)
	}
	if !fst.Mode().IsRegular() {
		return kverr.Errorf("lock %s: not a regular file: %w", lpath, kverr.ErrCorruptDir)
	}
	pst, err := os.Lstat(lpath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return errAgain
	case err != nil:
		// Untested: the directory was just read.
		return kverr.Errorf("lock %s: %w", lpath, err)
	case !pst.Mode().IsRegular():
		return kverr.Errorf("lock %s: not a regular file: %w", lpath, kverr.ErrCorruptDir) // a symbolic link, say
	case !os.SameFile(fst, pst):
		return errAgain
	}
	return nil
}

// publishLock makes LOCK: a temporary file, locked, holding lockText,
// synced, then renamed without replacing. Whoever publishes LOCK holds its
// lock from the moment it exists.
func publishLock(path string) (_ *os.File, _ bool, err error) {
	lpath := filepath.Join(path, LockName)
	f, err := createTemp(path, lockTempPrefix)
	if err != nil {
		return nil, false, kverr.Errorf("lock %s: %w", lpath, err)
	}
	tmp := f.Name()
	published := false
	defer func() {
		if !published {
			f.Close()
			_ = os.Remove(tmp) // ENOENT if the lock holder cleaned it up
		}
	}()
	// Nobody else opens a temporary file: the lock cannot be held.
	if err := lockFile(f, tmp, unix.LOCK_EX); err != nil {
		return nil, false, err
	}
	if _, err := f.WriteString(lockText); err != nil {
		return nil, false, kverr.Errorf("lock %s: write %s: %w", lpath, tmp, err)
	}
	if err := f.Sync(); err != nil {
		// Untested: fsync fails only on an I/O error.
		return nil, false, kverr.Errorf("lock %s: sync %s: %w", lpath, tmp, err)
	}
	failpoint.FileSynced(f, 0, -1)
	switch err := fsutil.Publish(tmp, lpath); {
	case errors.Is(err, fs.ErrExist):
		return nil, false, errAgain // another opener published LOCK first
	case errors.Is(err, fs.ErrNotExist):
		return nil, false, errAgain // the lock holder removed tmp as a leftover
	case err != nil:
		return nil, false, kverr.Errorf("lock %s: %w", lpath, err)
	}
	published = true
	// The directory entry is made durable with the manifest that follows
	// (or by MarkReady); until then a crash just loses LOCK, which the
	// next Open makes again.
	return f, true, nil
}

// createTemp creates a new file prefix+<random> in dir with O_EXCL, mode
// FileMode less the umask: the name is this writer's alone.
func createTemp(dir, prefix string) (*os.File, error) {
	for range 100 {
		name := filepath.Join(dir, fmt.Sprintf("%s%016x", prefix, rand.Uint64()))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, FileMode)
		if errors.Is(err, fs.ErrExist) {
			continue // untested: a 64-bit collision
		}
		return f, err
	}
	return nil, kverr.Errorf("create a temporary file %s* in %s: %w", prefix, dir, fs.ErrExist)
}

// ReadLock takes a shared lock on the engine directory at path for a tool
// that reads it without opening it (kvtool inspect): while the tool holds
// it, no engine can open the directory (Open returns kverr.ErrLocked). If an
// engine has the directory open, it returns locked = true and takes no
// lock. A directory without a LOCK file needs none and gets none: ReadLock
// never creates anything. release (never nil on success) drops the lock.
func ReadLock(path string) (release func(), locked bool, err error) {
	lpath := filepath.Join(path, LockName)
	for range 8 {
		f, err := os.OpenFile(lpath, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if errors.Is(err, fs.ErrNotExist) {
			return func() {}, false, nil
		}
		if err != nil {
			return nil, false, kverr.Errorf("lock %s: %w", lpath, err)
		}
		err = lockFile(f, lpath, unix.LOCK_SH)
		if errors.Is(err, kverr.ErrLocked) {
			f.Close()
			return nil, true, nil
		}
		if err == nil {
			err = sameFile(f, lpath)
		}
		if err == nil {
			return func() { f.Close() }, false, nil
		}
		f.Close()
		if !errors.Is(err, errAgain) {
			return nil, false, err
		}
	}
	return nil, false, kverr.Errorf("lock %s: the lock file keeps changing", lpath)
}

// probeLocked reports whether an engine holds the lock of the directory at
// path, without keeping any lock.
func probeLocked(path string) (bool, error) {
	release, locked, err := ReadLock(path)
	if err != nil || locked {
		return locked, err
	}
	release()
	return false, nil
}
