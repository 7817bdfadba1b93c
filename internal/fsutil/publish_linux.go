package fsutil

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// Publish moves the finished temporary file tmp to path unless path exists
// (an error wrapping fs.ErrExist; fs.ErrNotExist if tmp is gone). A rename
// keeps an open descriptor's name right (in /proc/self/maps, lsof); file
// systems without RENAME_NOREPLACE get LinkPublish instead. Neither syncs
// the directory: call SyncDir once the new name must survive a crash.
func Publish(tmp, path string) error {
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, path, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
		// Only where the kernel or file system lacks RENAME_NOREPLACE;
		// LinkPublish is tested on its own.
		return LinkPublish(tmp, path)
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: tmp, New: path, Err: err}
	}
	return nil
}
