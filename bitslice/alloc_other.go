//go:build unix && !linux

package bitslice

import "os"

// allocate makes [off, off+n) of f real blocks by writing zeros over it
// (there is no portable fallocate), extending the file if needed.
func allocate(f *os.File, off, n int64) error {
	return writeZeros(f, off, n)
}

// fillHoles does nothing here: without fallocate, the only way to fill holes
// would be to rewrite data.
func fillHoles(f *os.File, size int64) error { return nil }
