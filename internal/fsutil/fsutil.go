// Package fsutil holds the small file-system durability helpers that the
// engine and the bitslice package share.
package fsutil

import "os"

// SyncDir fsyncs directory dir, so that entries created, renamed or removed
// in it survive a crash. The error is the OS's, unwrapped: callers add the
// context they know.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
