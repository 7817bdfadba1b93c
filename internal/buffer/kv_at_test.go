package buffer

// The single-change forms of ApplyAt, for tests that place one change of a
// batch at a time (the engine applies a batch's changes with ApplyAt).

// putAt is Put as change seq of a batch: seq must come from a SeqRange of
// kv.Seq() that is not yet published, and the change is visible once the
// range is. Errors as Put.
func (kv *KV) putAt(seq uint64, key, value []byte) error {
	if err := kv.CheckPut(key, value); err != nil {
		return err
	}
	return kv.write(seq, key, value, false)
}

// deleteAt is Delete as change seq of a batch (see putAt).
func (kv *KV) deleteAt(seq uint64, key []byte) error {
	if err := kv.checkKey(key); err != nil {
		return err
	}
	return kv.write(seq, key, nil, true)
}

// deleteRangeAt is DeleteRange as change seq of a batch (see putAt).
func (kv *KV) deleteRangeAt(seq uint64, lower, upper []byte) error {
	if err := CheckRange(lower, upper); err != nil {
		return err
	}
	return kv.deleteRange(seq, lower, upper)
}
