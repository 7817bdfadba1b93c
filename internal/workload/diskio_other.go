//go:build !linux

package workload

// ProcessDiskWrites reports no count where /proc/self/io does not exist:
// the benchmarks then carry no disk figure.
func ProcessDiskWrites() (int64, bool) { return 0, false }
