package fsutil

import (
	"fmt"
	"io"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// ModeFS returns pebble's OS file system (vfs.Default) creating directories
// with mode dir and files with mode file (less the umask, as the OS does),
// where pebble asks for 0755 directories and 0666 files: a store private to
// its owner with 0700 and 0600. Each file pebble creates is set to file
// before anything is written to it (created 0666 less the umask, then
// chmodded: its directory, created with dir, keeps others out meanwhile).
// For the OS file system only: it chmods by path.
func ModeFS(dir, file os.FileMode) vfs.FS {
	return modeFS{FS: vfs.Default, dir: dir, file: file}
}

type modeFS struct {
	vfs.FS
	dir, file os.FileMode
}

func (m modeFS) chmod(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return f, err
	}
	return chmodOpened(name, m.file, f)
}

// chmodOpened gives name, just opened as f, mode; if it cannot, f is
// closed.
func chmodOpened[F io.Closer](name string, mode os.FileMode, f F) (F, error) {
	if err := os.Chmod(name, mode); err != nil {
		_ = f.Close()
		var none F
		return none, fmt.Errorf("chmod %s: %w", name, err)
	}
	return f, nil
}

// Create implements vfs.FS.
func (m modeFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := m.FS.Create(name, category)
	return m.chmod(name, f, err)
}

// OpenReadWrite implements vfs.FS (it creates a missing file).
func (m modeFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := m.FS.OpenReadWrite(name, category, opts...)
	return m.chmod(name, f, err)
}

// ReuseForWrite implements vfs.FS: a recycled file keeps the mode it was
// created with, set again in case that was before this file system.
func (m modeFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := m.FS.ReuseForWrite(oldname, newname, category)
	return m.chmod(newname, f, err)
}

// MkdirAll implements vfs.FS: with the directory mode, whatever pebble asks.
func (m modeFS) MkdirAll(dir string, _ os.FileMode) error { return m.FS.MkdirAll(dir, m.dir) }

// Lock implements vfs.FS.
func (m modeFS) Lock(name string) (io.Closer, error) {
	c, err := m.FS.Lock(name)
	if err != nil {
		return nil, err
	}
	return chmodOpened(name, m.file, c)
}

// Unwrap implements vfs.FS.
func (m modeFS) Unwrap() vfs.FS { return m.FS }
