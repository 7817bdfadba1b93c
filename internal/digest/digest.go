// Package digest computes a content digest of a kvbuf engine: one 128-bit
// hash over every keyspace (its name, then each key and value in key order)
// and every bitslice (its name, then its set bits in increasing order).
// Two engines with the same digest hold the same keyspaces with the same
// pairs and the same bitslices with the same set bits (up to xxh3-128
// collisions). Watermarks, store layout, pending-versus-flushed state and
// bitslice lengths do not enter it, so a live engine (read through a
// snapshot), the same engine after a flush and close (read from its files by
// Dir), and a replica that applied the same ops or installed a snapshot of
// it all have the same digest.
//
// The engine's Snapshot.Digest feeds a Hasher from a snapshot; Dir feeds one
// from an engine directory's store and bitslice files (kvtool inspect
// --digest). Both feed keyspaces sorted by name, then bitslices sorted by
// name, which the Hasher checks.
package digest

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	mbits "math/bits"

	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/zeebo/xxh3"
)

// Sum is a digest. Its String form (32 hex digits) is what kvtool inspect
// and kvraft status print.
type Sum [16]byte

// String returns the digest as 32 lowercase hex digits.
func (s Sum) String() string { return hex.EncodeToString(s[:]) }

// ErrOrder is returned by Hasher.Sum when the hasher was fed out of order:
// keyspaces or bitslices not in increasing name order, keys not increasing
// within a keyspace, bits not increasing within a bitslice, a pair before
// any keyspace, a bit before any bitslice, or a keyspace after a bitslice.
var ErrOrder = errors.New("kvbuf: digest input out of order")

// Hasher accumulates a digest. Feed it every keyspace (Keyspace, then its
// pairs with Pair, in increasing key order), in increasing name order,
// then every bitslice (Bitslice, then its set bits with Bit, increasing),
// in increasing name order, then call Sum. The zero value is not usable:
// call New. Not safe for concurrent use.
type Hasher struct {
	h   *xxh3.Hasher128
	buf []byte
	err error

	inBits   bool   // a bitslice has been started: no more keyspaces
	haveName bool   // a keyspace or bitslice is open
	name     string // the open one's name (the order check)
	haveKey  bool
	lastKey  []byte

	// The open bitslice's current word: bits are hashed a word at a time.
	word     uint64
	wordIdx  uint64
	haveWord bool
	haveBit  bool
	lastBit  uint64

	keyspaces, pairs, bitslices, ones uint64
}

// Record tags: each field is prefixed so that no two different inputs hash
// the same byte stream.
const (
	tagKeyspace = 'K'
	tagPair     = 'p'
	tagBits     = 'B'
	tagWord     = 'w'
	tagEnd      = 'E'
)

// New returns an empty Hasher.
func New() *Hasher { return &Hasher{h: xxh3.New128()} }

func (d *Hasher) fail(format string, args ...any) {
	if d.err == nil {
		d.err = kverr.Errorf("digest: "+format+": %w", append(args, ErrOrder)...)
	}
}

func (d *Hasher) bytes(p []byte) {
	d.buf = binary.AppendUvarint(d.buf, uint64(len(p)))
	d.buf = append(d.buf, p...)
}

func (d *Hasher) flushBuf() {
	_, _ = d.h.Write(d.buf) // xxh3's Write never fails
	d.buf = d.buf[:0]
}

// Keyspace starts the keyspace called name.
func (d *Hasher) Keyspace(name string) {
	switch {
	case d.inBits:
		d.fail("keyspace %q after a bitslice", name)
	case d.haveName && name <= d.name:
		d.fail("keyspace %q after %q", name, d.name)
	}
	d.haveName, d.name, d.haveKey = true, name, false
	d.keyspaces++
	d.buf = append(d.buf, tagKeyspace)
	d.bytes([]byte(name))
	d.flushBuf()
}

// Pair adds key = value to the open keyspace.
func (d *Hasher) Pair(key, value []byte) {
	switch {
	case !d.haveName || d.inBits:
		d.fail("pair %q outside a keyspace", key)
	case d.haveKey && string(key) <= string(d.lastKey):
		d.fail("key %q after %q in keyspace %q", key, d.lastKey, d.name)
	}
	d.haveKey = true
	d.lastKey = append(d.lastKey[:0], key...)
	d.pairs++
	d.buf = append(d.buf, tagPair)
	d.bytes(key)
	d.bytes(value)
	d.flushBuf()
}

// Bitslice starts the bitslice called name.
func (d *Hasher) Bitslice(name string) {
	d.endWord()
	if d.inBits && name <= d.name {
		d.fail("bitslice %q after %q", name, d.name)
	}
	d.inBits, d.haveName, d.name, d.haveBit = true, true, name, false
	d.bitslices++
	d.buf = append(d.buf, tagBits)
	d.bytes([]byte(name))
	d.flushBuf()
}

// Bit adds set bit i to the open bitslice.
func (d *Hasher) Bit(i uint64) {
	switch {
	case !d.inBits:
		d.fail("bit %d outside a bitslice", i)
	case d.haveBit && i <= d.lastBit:
		d.fail("bit %d after %d in bitslice %q", i, d.lastBit, d.name)
	}
	d.haveBit, d.lastBit = true, i
	d.ones++
	if w := i / 64; !d.haveWord || w != d.wordIdx {
		d.endWord()
		d.haveWord, d.wordIdx = true, w
	}
	d.word |= 1 << (i % 64)
}

// Word adds the set bits of word w (bits 64w to 64w+63) to the open
// bitslice, as 64 calls of Bit would; zero words may be skipped or passed.
func (d *Hasher) Word(w, bits uint64) {
	if bits == 0 {
		return
	}
	switch {
	case !d.inBits:
		d.fail("word %d outside a bitslice", w)
		return
	case d.haveBit && w*64 <= d.lastBit:
		d.fail("word %d after bit %d in bitslice %q", w, d.lastBit, d.name)
		return
	}
	d.endWord()
	d.haveWord, d.wordIdx, d.word = true, w, bits
	d.haveBit, d.lastBit = true, w*64+63
	d.ones += uint64(mbits.OnesCount64(bits))
}

// endWord hashes the current word, if any.
func (d *Hasher) endWord() {
	if !d.haveWord {
		return
	}
	d.buf = append(d.buf, tagWord)
	d.buf = binary.LittleEndian.AppendUint64(d.buf, d.wordIdx)
	d.buf = binary.LittleEndian.AppendUint64(d.buf, d.word)
	d.flushBuf()
	d.haveWord, d.word = false, 0
}

// Sum returns the digest of everything fed so far, or an error wrapping
// ErrOrder if the input was out of order. It may be called once.
func (d *Hasher) Sum() (Sum, error) {
	d.endWord()
	if d.err != nil {
		return Sum{}, d.err
	}
	d.buf = append(d.buf, tagEnd)
	for _, n := range [...]uint64{d.keyspaces, d.pairs, d.bitslices, d.ones} {
		d.buf = binary.AppendUvarint(d.buf, n)
	}
	d.flushBuf()
	return Sum(d.h.Sum128().Bytes()), nil
}

// Counts reports what has been fed: keyspaces, pairs, bitslices and set
// bits.
func (d *Hasher) Counts() (keyspaces, pairs, bitslices, ones uint64) {
	return d.keyspaces, d.pairs, d.bitslices, d.ones
}
