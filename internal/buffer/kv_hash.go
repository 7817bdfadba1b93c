package buffer

import (
	"encoding/binary"
	"math/bits"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// hashKey hashes a key for shard selection, group selection and the
// control byte (see keyHash).
func hashKey(k string, seed uint64) uint64 {
	return hashBytes(unsafe.Slice(unsafe.StringData(k), len(k)), seed)
}

// wyhash's default secret.
const (
	wyp0 = 0xa0761d6478bd642f
	wyp1 = 0xe7037ed1a0b428db
)

// hashBytes hashes a key. seed is the overlay's (random, so that no fixed
// key set makes probes long). A key of up to 16 bytes, the common case, is
// read as two (overlapping) words mixed by two 64x64->128-bit multiplies
// (the structure of wyhash's short-input path): a few instructions where
// xxh3's general entry point costs several times that. Longer keys take
// xxh3.
func hashBytes(p []byte, seed uint64) uint64 {
	n := len(p)
	var a, b uint64
	switch {
	case n > 16:
		return xxh3.HashSeed(p, seed)
	case n >= 8:
		a, b = binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[n-8:])
	case n >= 4:
		a, b = uint64(binary.LittleEndian.Uint32(p)), uint64(binary.LittleEndian.Uint32(p[n-4:]))
	case n > 0:
		a = uint64(p[0])<<16 | uint64(p[n>>1])<<8 | uint64(p[n-1])
	}
	return mixWords(a, b, n, seed)
}

func mixWords(a, b uint64, n int, seed uint64) uint64 {
	hi, lo := bits.Mul64(a^wyp1, b^seed)
	hi, lo = bits.Mul64(lo^wyp0^uint64(n), hi^wyp1)
	return hi ^ lo
}

// keyHash returns k's hash and, for a key of up to 8 bytes, its slot word
// (the point read's fast path compares it with the slot's; it passes both
// in registers). The hot read paths write its 8-byte case out (see
// KV.GetAppend): a function with a call in it is not inlined.
func keyHash(k string, seed uint64) (h, w uint64) {
	if len(k) == 8 {
		a := binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(k), 8))
		return mixWords(a, a, 8, seed), a
	}
	return keyHashSlow(k, seed)
}

func keyHashSlow(k string, seed uint64) (h, w uint64) {
	pk := probeKeyOf(k, 0)
	return hashKey(k, seed), pk.w[0]
}

// probeKey is a key prepared for probing: its hash and, for a key short
// enough to live in a slot, its bytes as the slot holds them (nw words,
// the last zero-padded).
type probeKey struct {
	k  string
	h  uint64
	nw int // slot words of the key; 0 if it is longer than inlineBytes
	w  [3]uint64
}

func makeProbeKey(k string, seed uint64) probeKey {
	return probeKeyOf(k, hashKey(k, seed))
}

// probeKeyOf returns the probe key of k with hash h.
func probeKeyOf(k string, h uint64) probeKey {
	pk := probeKey{k: k, h: h}
	n := len(k)
	if n > inlineBytes {
		return pk
	}
	p := unsafe.Slice(unsafe.StringData(k), n)
	pk.nw = keyWords(n)
	switch {
	case n >= 8:
		pk.w[0] = binary.LittleEndian.Uint64(p)
		if n >= 16 {
			pk.w[1] = binary.LittleEndian.Uint64(p[8:])
		}
		if n == inlineBytes {
			pk.w[2] = binary.LittleEndian.Uint64(p[16:])
		} else if r := n & 7; r != 0 {
			// The last 8 bytes, shifted down to the partial word.
			pk.w[n>>3] = binary.LittleEndian.Uint64(p[n-8:]) >> (8 * (8 - r))
		}
	case n > 0:
		var w [8]byte
		copy(w[:], p)
		pk.w[0] = binary.LittleEndian.Uint64(w[:])
	}
	return pk
}

// keyWords is the number of slot words a key of n <= inlineBytes bytes
// takes; an inline value starts after them.
func keyWords(n int) int { return (n + 7) >> 3 }

// matches reports whether slot words sw hold pk's key.
func (pk *probeKey) matches(sw *slotWords, sh *shard) bool {
	if sw.w0>>modeShift == modeLong {
		return pk.nw == 0 && pk.longMatches(sw, sh)
	}
	if int(sw.w0>>klenShift&lenMask) != len(pk.k) {
		return false
	}
	switch pk.nw {
	case 1:
		return sw.w1 == pk.w[0]
	case 2:
		return sw.w1 == pk.w[0] && sw.w2 == pk.w[1]
	}
	return sw.w1 == pk.w[0] && sw.w2 == pk.w[1] && sw.w3 == pk.w[2]
}

func (pk *probeKey) longMatches(sw *slotWords, sh *shard) bool {
	if sw.w3 != pk.h || int(sw.w1>>longKeyLen) != len(pk.k) {
		return false
	}
	k, ok := sh.dir.Load().keyBytes(sw.w1&refMask, len(pk.k))
	return ok && k == pk.k
}
