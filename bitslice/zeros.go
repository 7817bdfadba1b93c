package bitslice

import (
	"os"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// writeZeros writes n zero bytes at off, in 64 KiB chunks. It is only used
// where fallocate is unavailable, and for ranges that hold no data yet.
func writeZeros(f *os.File, off, n int64) error {
	var zero [64 << 10]byte
	for n > 0 {
		c := min(n, int64(len(zero)))
		if _, err := f.WriteAt(zero[:c], off); err != nil {
			return kverr.Errorf("write zeros at %d: %w", off, err)
		}
		off += c
		n -= c
	}
	return nil
}
