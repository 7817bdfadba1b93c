package bench

import "testing"

// BenchmarkW10 runs W10 (sparse bitslices) as BenchmarkW1 runs W1.
func BenchmarkW10(b *testing.B) { benchSuite(b, "W10") }
