//go:build unix

package storage

import (
	"time"

	"golang.org/x/sys/unix"
)

// processCPU returns the user and system CPU time of the process so far
// (every goroutine, pebble's background work included).
func processCPU() (time.Duration, bool) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
