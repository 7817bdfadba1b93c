//go:build !unix

package ycsb

import "time"

// processCPU reports no CPU time where getrusage does not exist: rows then
// carry no CPU figure (Row.CPUPerOp is 0).
func processCPU() (time.Duration, bool) { return 0, false }
