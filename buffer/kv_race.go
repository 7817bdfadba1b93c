//go:build race

package buffer

import "sync/atomic"

// storeUnpublished stores a word readers may load before it is published
// to them: a word of a slot not yet published, a control word, a log count
// (see kv_norace.go). Under the race detector it is an atomic store, so
// that the detector checks every path by which a reader reaches such a
// word.
func storeUnpublished(p *uint64, v uint64) { atomic.StoreUint64(p, v) }

// clearWords zeroes s, a slot array of a table no reader may still use
// but one that re-validates its view and discards what it read.
func clearWords(s []uint64) {
	for i := range s {
		atomic.StoreUint64(&s[i], 0)
	}
}
