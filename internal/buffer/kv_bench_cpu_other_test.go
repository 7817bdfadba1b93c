//go:build !linux

package buffer

import "time"

// threadCPU is not available: benchmarks report wall time only.
func threadCPU() (time.Duration, bool) { return 0, false }

func processCPU() (time.Duration, bool) { return 0, false }
