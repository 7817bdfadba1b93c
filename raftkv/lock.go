package raftkv

import (
	"errors"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/kvbuf/kvbuf"
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
