package raftkv

import (
	"errors"
	"io"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2/vfs"

	"golang.org/x/sys/unix"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/internal/fsutil"
)

// lockDir takes an exclusive lock on dir (the file dir/LOCK, flocked), so
// that a second node cannot open the same data directory. The lock is
// released when the returned file is closed, or the process dies. The file
// is created with mode.
func lockDir(dir string, mode os.FileMode) (*os.File, error) {
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, mode)
	if err != nil {
		return nil, errorf("%w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, errorf("%s is open in another node: %w", dir, kvbuf.ErrLocked)
		}
		return nil, errorf("lock %s: %w", path, err)
	}
	return f, nil
}

// lockNodeDir takes the lock of the node's directory: lockDir's on the
// OS's file system, the file system's own (vfs.FS.Lock) on another one
// (testHooks.fs).
func (n *Node) lockNodeDir() (io.Closer, error) {
	if n.hooks == nil || n.hooks.fs == nil {
		return lockDir(n.dir, fileMode(n.opts.DirMode))
	}
	l, err := n.fs.Lock(filepath.Join(n.dir, "LOCK"))
	if err != nil {
		return nil, errorf("lock %s: %w", n.dir, err)
	}
	return l, nil
}

// nodeFS returns the file system of a node's own files (the log store,
// IDENTITY, LOCK): the OS's, creating directories with dirMode and files
// with fileMode(dirMode), unless a test gives another (testHooks.fs). The
// engine directories are always on the OS's (kvbuf's engine).
func nodeFS(hooks *testHooks, dirMode os.FileMode) vfs.FS {
	if hooks != nil && hooks.fs != nil {
		return hooks.fs
	}
	return fsutil.ModeFS(dirMode, fileMode(dirMode))
}

// mkdirAllDurable creates dir and its missing parents on fsys with mode,
// and syncs the parent of every directory it created: a new directory's
// entry survives a power cut only once its parent is synced, and a node
// whose directory entry is lost loses its log and its engine together
// (pebble does the same for the directories it creates).
func mkdirAllDurable(fsys vfs.FS, dir string, mode os.FileMode) error {
	var created []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := fsys.Stat(d); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return errorf("%w", err)
		}
		created = append(created, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := fsys.MkdirAll(dir, mode); err != nil {
		return errorf("%w", err)
	}
	for _, d := range created {
		if err := fsutil.SyncDirWith(fsys.OpenDir, filepath.Dir(d)); err != nil {
			return errorf("sync %s: %w", filepath.Dir(d), err)
		}
	}
	return nil
}
