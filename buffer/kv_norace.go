//go:build !race

package buffer

// storeUnpublished stores a word readers may load before it is published
// to them: a word of a slot not yet published, a control word, a log
// count. The store needs no ordering of its own, and an atomic store is a
// locked exchange on amd64 that waits for every earlier store to reach the
// cache (the write of a new key's slot is a cache miss): three of them per
// new key made a put wait for each miss in turn.
//
// What orders these words for a reader that must see them is something
// else: the sequence number's publication (SeqRange.Publish, an atomic
// compare-and-swap the writer makes after its stores and a reader loads
// before its loads) for every change numbered at or below the reader's
// visible number; the shard mutex for an iterator reading a log count. A
// reader may also see such a word early, from a change still in flight:
// then it either sees the key's slot words (with a sequence number above
// its visible one: ignored) or zeroes (a cleared slot, see table.clear,
// which matches no key), never another key's stale words. Race builds
// store atomically (kv_race.go) so that the detector checks these paths.
func storeUnpublished(p *uint64, v uint64) { *p = v }

// clearWords zeroes s, a slot array of a table no reader may still use
// but one that re-validates its view and discards what it read.
func clearWords(s []uint64) { clear(s) }
