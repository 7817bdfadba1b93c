package workload

import (
	"bytes"
	"os"
	"strconv"
)

// ProcessDiskWrites returns the bytes the whole process has caused to be
// written to storage so far, and true: /proc/self/io's write_bytes minus
// its cancelled_write_bytes. Linux counts a page when a thread of the
// process dirties it (a write, a pwrite, a store into a shared mapping),
// once until writeback cleans it, whichever thread or goroutine did it
// (pebble's flushes and compactions included), and cancels it if the file
// is truncated or removed before the page is written. Where the kernel
// keeps no such count (no task I/O accounting) it returns false; on a file
// system that does not count (tmpfs) the count does not grow.
func ProcessDiskWrites() (int64, bool) {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, false
	}
	return diskWritesOf(b)
}

// diskWritesOf returns write_bytes minus cancelled_write_bytes of a
// /proc/PID/io text, and whether it holds both.
func diskWritesOf(b []byte) (int64, bool) {
	w, wok := ioField(b, "write_bytes")
	c, cok := ioField(b, "cancelled_write_bytes")
	if !wok || !cok {
		return 0, false
	}
	return w - c, true
}

// ioField returns the value of the line "name: N" of a /proc/PID/io text.
func ioField(b []byte, name string) (int64, bool) {
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok || string(bytes.TrimSpace(k)) != name {
			continue
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		return n, err == nil
	}
	return 0, false
}
