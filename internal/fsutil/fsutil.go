// Package fsutil holds the small file-system durability helpers that the
// engine directory, the bitslice files and the store share: one place for
// each, so that they fail the same way everywhere (pebble's vfs/atomicfs is
// the model).
package fsutil

import (
	"os"

	"github.com/kvbuf/kvbuf/internal/failpoint"
)

// SyncDir fsyncs directory dir, so that entries created, renamed or removed
// in it survive a crash. The error is the OS's, unwrapped: callers add the
// context they know.
func SyncDir(dir string) error {
	err := SyncDirWith(os.Open, dir)
	if err == nil {
		failpoint.DirSynced(dir)
	}
	return err
}

// SyncCloser is a directory handle that SyncDirWith can sync: an *os.File,
// or a pebble vfs.File for code that works through a vfs.FS.
type SyncCloser interface {
	Sync() error
	Close() error
}

// SyncDirWith is SyncDir with the directory opened by open (a vfs.FS's
// OpenDir, say). A close error is returned only if the sync succeeded.
func SyncDirWith[F SyncCloser](open func(string) (F, error), dir string) error {
	d, err := open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// LinkPublish hard-links tmp to path, failing with an error that wraps
// fs.ErrExist if path exists (fs.ErrNotExist if tmp is gone), then removes
// the name tmp. It is Publish where RENAME_NOREPLACE is unsupported.
//
// A failure to remove tmp is not returned: path is published by then, so
// an error would tell the caller that a file it can already see was not
// made. tmp is then a leftover for the caller's clean-up of temporary
// names.
func LinkPublish(tmp, path string) error {
	if err := os.Link(tmp, path); err != nil {
		return err
	}
	_ = os.Remove(tmp)
	return nil
}
