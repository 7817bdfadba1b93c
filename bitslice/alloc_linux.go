package bitslice

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// allocate makes [off, off+n) of f real, allocated blocks, extending the
// file if needed. fallocate fails with ENOSPC now rather than letting a
// store into a hole SIGBUS later; file systems without it get written zeros.
func allocate(f *os.File, off, n int64) error {
	if n <= 0 {
		return nil
	}
	err := unix.Fallocate(int(f.Fd()), 0, off, n)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		// Untested here: only on file systems without fallocate, which the
		// test's temporary directory is not; writeZeros has TestWriteZeros.
		return writeZeros(f, off, n)
	}
	return err
}

// fillHoles allocates blocks under any holes in [0, size) (a file copied
// sparsely, say) without touching data, so that a later store through the
// mapping cannot SIGBUS on a full disk. Where fallocate is unsupported it
// does nothing: writing zeros would destroy data.
func fillHoles(f *os.File, size int64) error {
	if size <= 0 {
		return nil
	}
	err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, size)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		// Untested: only on file systems without fallocate.
		return nil
	}
	return err
}
