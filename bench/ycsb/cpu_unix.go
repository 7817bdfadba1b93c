//go:build unix

package ycsb

import (
	"syscall"
	"time"
)

// processCPU returns the user and system CPU time the whole process has
// used so far (getrusage(RUSAGE_SELF): every thread, so work a run moves
// to background goroutines on other cores is counted), and true.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
