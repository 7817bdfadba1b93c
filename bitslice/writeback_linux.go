package bitslice

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing [off, off+n) of f back to
// the disk and returns without waiting (sync_file_range with
// SYNC_FILE_RANGE_WRITE alone: it neither waits for the writes nor reports
// their errors, which the next fdatasync does).
func startWriteback(f *os.File, off, n int64) error {
	return unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}
