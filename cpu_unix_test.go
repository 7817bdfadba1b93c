//go:build unix

package kvbuf

import (
	"time"

	"golang.org/x/sys/unix"
)

// processCPU returns the user and system CPU time of the process so far:
// every goroutine, the flusher's and pebble's background work included.
func processCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
