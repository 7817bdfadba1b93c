package kvbuf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes an exclusive, non-blocking flock on dir/LOCK. flock locks
// belong to the open file description, so a second Open in the same process
// conflicts just as one in another process does, and the kernel drops the
// lock when the process dies (a kill -9 leaves no stale lock behind).
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, LockName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kvbuf: lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("kvbuf: lock %s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("kvbuf: lock %s: %w", path, err)
	}
	return f, nil
}

// unlockDir releases the lock by closing its file description.
func unlockDir(f *os.File) {
	if f != nil {
		_ = f.Close()
	}
}
