package enginedir

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// publish moves tmp to path unless path exists (an error wrapping
// fs.ErrExist; fs.ErrNotExist if tmp is gone). File systems without
// RENAME_NOREPLACE get a hard link and an unlink instead.
func publish(tmp, path string) error {
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, path, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
		// Only where the kernel or file system lacks RENAME_NOREPLACE;
		// linkPublish is tested on its own.
		return linkPublish(tmp, path)
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: tmp, New: path, Err: err}
	}
	return nil
}
