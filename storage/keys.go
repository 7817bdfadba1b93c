package storage

import (
	"encoding/binary"
	"math"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// KeyspaceID names one keyspace of user keys. Keyspaces share the store but
// not keys: the same user key in two keyspaces is two entries, and an
// iterator or range deletion over one never touches another. ID 0 is
// reserved: every method given it fails with kvbuf.ErrInvalidKeyspace.
type KeyspaceID uint32

// Every pebble key starts with one tag byte naming its namespace, so a user
// key can never equal a meta or system key whatever its bytes: keys with
// different tags differ in their first byte. The user namespace is last so
// that the end of the last keyspace is the one-byte key {tagUser + 1}.
const (
	tagSystem byte = 0x00 // keys owned by this package (the watermark)
	tagMeta   byte = 0x01 // Batch.SetMeta / Store.GetMeta names
	tagUser   byte = 0x02 // Batch.Put / Store.Get keys, after a KeyspaceID
)

// userPrefixLen is the length of the tag and keyspace ID in front of every
// user key.
const userPrefixLen = 1 + 4

// watermarkKey is the system key holding the persisted watermark as 8 bytes,
// big-endian.
const watermarkKey = "\x00wm"

// appendUserKey appends the stored form of a user key,
// tagUser + ks (4 bytes, big-endian) + key, to dst.
func appendUserKey(dst []byte, ks KeyspaceID, key []byte) []byte {
	dst = append(dst, tagUser)
	dst = binary.BigEndian.AppendUint32(dst, uint32(ks))
	return append(dst, key...)
}

// putUserKey writes the stored form of key into dst, which has exactly
// userPrefixLen+len(key) bytes.
func putUserKey(dst []byte, ks KeyspaceID, key []byte) {
	dst[0] = tagUser
	binary.BigEndian.PutUint32(dst[1:userPrefixLen], uint32(ks))
	copy(dst[userPrefixLen:], key)
}

// keyspaceEnd appends the smallest stored key above every key of ks to dst:
// the prefix of keyspace ks+1, or {tagUser + 1} after the last keyspace.
func keyspaceEnd(dst []byte, ks KeyspaceID) []byte {
	if ks == math.MaxUint32 {
		return append(dst, tagUser+1)
	}
	return appendUserKey(dst, ks+1, nil)
}

// appendMetaKey appends tagMeta+name to dst.
func appendMetaKey(dst []byte, name string) []byte {
	dst = append(dst, tagMeta)
	return append(dst, name...)
}

// errKeyspace is the error for keyspace ID 0.
func errKeyspace(op string) error {
	return kverr.Errorf("%s: keyspace 0: %w", op, kverr.ErrInvalidKeyspace)
}
