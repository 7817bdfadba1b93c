package storage

// Every pebble key starts with one tag byte naming its namespace, so a user
// key can never equal a meta or system key whatever its bytes: keys with
// different tags differ in their first byte. The user namespace is last so
// that an unbounded user iterator is the range [tagUser, tagUser+1).
const (
	tagSystem byte = 0x00 // keys owned by this package (the watermark)
	tagMeta   byte = 0x01 // Batch.SetMeta / Store.GetMeta names
	tagUser   byte = 0x02 // Batch.Put / Store.Get keys
)

// watermarkKey is the system key holding the persisted watermark as 8 bytes,
// big-endian.
const watermarkKey = "\x00wm"

// appendKey appends tag+key to dst.
func appendKey(dst []byte, tag byte, key []byte) []byte {
	dst = append(dst, tag)
	return append(dst, key...)
}

// appendMetaKey appends tagMeta+name to dst.
func appendMetaKey(dst []byte, name string) []byte {
	dst = append(dst, tagMeta)
	return append(dst, name...)
}
