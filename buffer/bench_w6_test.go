package buffer

import "testing"

// BenchmarkW6 is workload W6, flush throughput (workloads.md):
// flush-kv-1m/{kvbuf,pebble-batch-sync} (kv_w6_bench_test.go) and
// flush-bits-1m/{kvbuf,direct-apply+msync} (bits_w6_test.go). Each op is
// one flush of 1,000,000 pending changes; ms/flush is reported beside ns/op.
//
//	go test ./buffer -run '^$' -bench 'BenchmarkW6' -benchtime 3x -count 5 -timeout 60m
func BenchmarkW6(b *testing.B) {
	benchW6FlushKV(b)
	benchW6FlushBits(b)
}
