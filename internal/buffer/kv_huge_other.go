//go:build !linux

package buffer

// adviseHuge does nothing where transparent huge pages cannot be asked
// for (see kv_huge_linux.go).
func adviseHuge([]uint64) {}
