package buffer

import (
	"github.com/kvbuf/kvbuf/storage"

	"github.com/kvbuf/kvbuf/internal/kverr"
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
	if has, known := kv.pendingPresence(key); known {
		return has, nil
	}
	if kv.st == nil {
		return false, kverr.ErrClosed
	}
	return readerHas(kv.st, kv.ks, key)
}

// Has is KV.Has as of the snapshot. After Close it returns
// kverr.ErrClosed.
func (s *KVSnapshot) Has(key []byte) (bool, error) {
	if err := s.kv.checkKey(key); err != nil {
		return false, err
	}
	st := s.reader()
	if st == nil {
		return false, kverr.ErrClosed
	}
	if has, known := s.pendingPresence(key); known {
		return has, nil
	}
	return readerHas(st, s.kv.ks, key)
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
