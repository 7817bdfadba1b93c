package buffer

import "sync/atomic"

// storeUnpublished stores a word readers may load before it is published
// to them: a word of a slot not yet published, a control word, a log
// count. It is an atomic store in every build (design A of issue 29: the
// plain stores the default build used before, and the atomic ones of race
// builds, made one), so that the race detector checks what ships.
func storeUnpublished(p *uint64, v uint64) { atomic.StoreUint64(p, v) }

// clearWords zeroes s, a slot array of a table no reader may still use
// but one that re-validates its view and discards what it read.
func clearWords(s []uint64) {
	for i := range s {
		atomic.StoreUint64(&s[i], 0)
	}
}
