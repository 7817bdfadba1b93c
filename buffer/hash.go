package buffer

import (
	"encoding/binary"
	"reflect"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// Key is the set of key types a Table accepts: strings (hashed with xxh3) and
// integers (hashed with the murmur3 64-bit finalizer, a full-avalanche mixer).
// Byte-slice keys are stored as strings; see KV.
type Key interface {
	~string | ~int | ~int8 | ~int16 | ~int32 | ~int64 |
		~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr
}

// keyKind selects the hash and comparison code for a Key type once, at
// construction, so the hot path is a predictable switch and not an indirect
// call.
type keyKind uint8

const (
	kindString keyKind = iota
	kindInt8
	kindInt16
	kindInt32
	kindInt64
	kindUint8
	kindUint16
	kindUint32
	kindUint64
)

func kindOf[K Key]() keyKind {
	var zero K
	t := reflect.TypeOf(zero)
	switch t.Kind() {
	case reflect.String:
		return kindString
	case reflect.Int8:
		return kindInt8
	case reflect.Int16:
		return kindInt16
	case reflect.Int32:
		return kindInt32
	case reflect.Int, reflect.Int64:
		if t.Size() == 4 {
			return kindInt32
		}
		return kindInt64
	case reflect.Uint8:
		return kindUint8
	case reflect.Uint16:
		return kindUint16
	case reflect.Uint32:
		return kindUint32
	default: // Uint, Uint64, Uintptr
		if t.Size() == 4 {
			return kindUint32
		}
		return kindUint64
	}
}

// mix64 is the murmur3 fmix64 finalizer: every input bit affects every output
// bit, so sequential integer keys spread over shards (top bits) and slots
// (bottom bits) alike.
func mix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// hashKey hashes k according to kind.
func hashKey[K Key](kind keyKind, k K) uint64 {
	p := unsafe.Pointer(&k)
	switch kind {
	case kindString:
		return xxh3.HashString(*(*string)(p))
	case kindInt8, kindUint8:
		return mix64(uint64(*(*uint8)(p)))
	case kindInt16, kindUint16:
		return mix64(uint64(*(*uint16)(p)))
	case kindInt32, kindUint32:
		return mix64(uint64(*(*uint32)(p)))
	default:
		return mix64(*(*uint64)(p))
	}
}

// keyBytes is the memory a key holds beyond the entry itself.
func keyBytes[K Key](kind keyKind, k K) int64 {
	if kind == kindString {
		return int64(len(*(*string)(unsafe.Pointer(&k))))
	}
	return 0
}

// keyPrefix is the order-preserving 8-byte prefix of a string key (its first
// 8 bytes, big-endian, zero-padded); 0 for integer keys, which compare
// without indirection anyway. keyPrefix(a) < keyPrefix(b) implies a < b.
func keyPrefix[K Key](kind keyKind, k K) uint64 {
	if kind != kindString {
		return 0
	}
	s := *(*string)(unsafe.Pointer(&k))
	if len(s) >= 8 {
		return binary.BigEndian.Uint64(unsafe.Slice(unsafe.StringData(s), 8))
	}
	var p uint64
	for i := 0; i < len(s); i++ {
		p |= uint64(s[i]) << (56 - 8*i)
	}
	return p
}
