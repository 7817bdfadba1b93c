package buffer

import "iter"

// Accessors only tests use; the engine reads the same through its account
// (pending bytes), OnesUntil and its own sequencer.

// PendingBytes returns the memory held by the overlay's pending changes.
func (kv *KV) PendingBytes() int64 {
	v := kv.view.Load()
	return viewBytes(v.active, v.sealed)
}

// PendingBytes returns the memory held by the overlay's pending changes.
func (b *Bits) PendingBytes() int64 {
	v := b.view.Load()
	return viewBytes(v.active, v.sealed)
}

// viewBytes is the bytes held by a view's pending tables.
func viewBytes[T interface{ bytes() int64 }](active T, sealed []T) int64 {
	n := active.bytes()
	for _, t := range sealed {
		n += t.bytes()
	}
	return n
}

// Ones is OnesUntil without a stop flag.
func (b *Bits) Ones(from uint64) iter.Seq[uint64] { return b.OnesUntil(from, nil) }

// Seq returns the sequencer the overlay's changes are numbered by.
func (kv *KV) Seq() *Seq { return kv.seq }
