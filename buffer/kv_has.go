package buffer

import (
	"unsafe"

	"github.com/kvbuf/kvbuf/storage"
)

// hasReader is a kvReader that can answer presence without copying a value
// (storage.Store and storage.Snapshot).
type hasReader interface {
	Has(ks storage.KeyspaceID, key []byte) (bool, error)
}

// Has reports whether key is present: the newest pending change, else the
// store. Nothing is copied (a pending value is not read, a stored one is
// released by the store unread). Errors: ErrEmptyKey, ErrKeyTooLarge, the
// store's errors.
func (kv *KV) Has(key []byte) (bool, error) {
	if err := kv.checkKey(key); err != nil {
		return false, err
	}
	if has, known := pendingHas(kv.lookup(key)); known {
		return has, nil
	}
	if kv.st == nil {
		return false, storage.ErrClosed
	}
	return readerHas(kv.st, kv.ks, key)
}

// Has is KV.Has as of the snapshot. After Close it returns
// storage.ErrClosed.
func (s *KVSnapshot) Has(key []byte) (bool, error) {
	if err := s.kv.checkKey(key); err != nil {
		return false, err
	}
	st := s.reader()
	if st == nil {
		return false, storage.ErrClosed
	}
	k := unsafe.String(unsafe.SliceData(key), len(key))
	if has, known := pendingHas(s.v.find(k, hashKey(k))); known {
		return has, nil
	}
	return readerHas(st, s.kv.ks, key)
}

// pendingHas answers Has from a key's newest pending record r (nil: none)
// and whether a range tombstone hides the key; known is false when only
// the store can answer.
func pendingHas(r *byte, hidden bool) (has, known bool) {
	if r != nil {
		_, del := rec(r)
		return !del, true
	}
	return false, hidden
}

// readerHas asks st for key without copying its value when st can.
func readerHas(st kvReader, ks storage.KeyspaceID, key []byte) (bool, error) {
	if h, ok := st.(hasReader); ok {
		return h.Has(ks, key)
	}
	_, err := st.Get(ks, key)
	if isNotFound(err) {
		return false, nil
	}
	return err == nil, err
}
