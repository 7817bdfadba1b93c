package buffer

import (
	"sync/atomic"
	"unsafe"

	"github.com/kvbuf/kvbuf/internal/invariants"
)

// chunkDir is the directory of a shard's arena, which holds what does not
// fit in a slot: version records (every value of a key after its first,
// and first values too long to be inline) and keys longer than a slot's 24
// inline bytes. It is a list of
// chunks of 8-byte words (no pointers, so the garbage collector never scans
// them), appended to under the shard mutex and never modified afterwards,
// except for a record's prev link (see rec0). Records are addressed by a
// 40-bit reference: chunk index (24 bits) << 16 | word offset in the chunk
// (16 bits, so a shared chunk is at most 512 KiB). A record too large for a
// shared chunk gets a chunk of its own at offset 0.
//
// Chunks are never reused: a cleared (recycled) table drops its chunks and
// numbers its next ones after the last it used, so a reference read by a
// reader still probing the table's previous life either resolves to a chunk
// of that life (immutable, still alive for that reader) or to nothing (the
// index is outside the directory the reader loaded). Either way the reader
// reads bytes that were published to it, and its view re-validation
// discards the result.
type chunkDir struct {
	base   uint64     // chunk index of c[0]
	chunks [][]uint64 // immutable once published; appended copy-on-write
}

const (
	refBits       = 40
	refMask       = 1<<refBits - 1
	refOffBits    = 16
	maxChunkIndex = 1<<(refBits-refOffBits) - 1
	minChunkWords = 128     // 1 KiB
	maxChunkWords = 1 << 16 // 512 KiB
	// ownChunkWords: a record of more words gets a chunk of its own.
	ownChunkWords = maxChunkWords / 4
)

// arenaWriter is the writer's state of a shard's arena (under the shard
// mutex).
type arenaWriter struct {
	cur       []uint64
	curIndex  uint64
	fill      int
	nextSize  int
	nextIndex uint64 // index of the next chunk, from 1 (reference 0 is nil); never reused
	bytes     int64  // chunk bytes held
}

// resolve returns the words of the chunk holding ref, from ref's offset on;
// nil if ref is nil or outside d (a reader racing a recycle).
func (d *chunkDir) resolve(ref uint64) []uint64 {
	if d == nil || ref == 0 {
		return nil
	}
	idx := ref >> refOffBits
	off := ref & (1<<refOffBits - 1)
	if idx < d.base || idx-d.base >= uint64(len(d.chunks)) {
		return nil
	}
	c := d.chunks[idx-d.base]
	if off >= uint64(len(c)) {
		return nil
	}
	return c[off:]
}

// alloc returns a reference to n zeroed words, and the words.
func (sh *shard) alloc(n int) (uint64, []uint64) {
	a := &sh.aw
	if n > ownChunkWords {
		c := make([]uint64, n)
		return sh.addChunk(c) << refOffBits, c
	}
	if a.fill+n > len(a.cur) {
		size := max(a.nextSize, minChunkWords)
		a.nextSize = min(size*2, maxChunkWords)
		c := make([]uint64, max(size, n))
		a.cur, a.curIndex, a.fill = c, sh.addChunk(c), 0
	}
	ref := a.curIndex<<refOffBits | uint64(a.fill)
	w := a.cur[a.fill : a.fill+n : a.fill+n]
	a.fill += n
	return ref, w
}

// addChunk publishes c as the next chunk of the shard's directory.
//
// The index space (2^24 chunks per shard, each at least 1 KiB, at least
// 128 KiB once the shard holds more than a few MiB) outlasts any memory: a
// table runs out of memory long before it runs out of indexes. A recycled
// table continues its numbering; the pool drops a table that has used half
// of them (table.reusable).
func (sh *shard) addChunk(c []uint64) uint64 {
	a := &sh.aw
	if a.nextIndex >= maxChunkIndex {
		panic("kvbuf: buffer: a KV table shard used 2^24 arena chunks: out of memory")
	}
	idx := a.nextIndex
	a.nextIndex++
	old := sh.dir.Load()
	d := &chunkDir{base: idx}
	if old != nil && len(old.chunks) > 0 {
		// Append to a copy of the header; the backing array may be
		// shared, but a reader of old never reads past its length.
		d.base = old.base
		d.chunks = append(old.chunks, c)
	} else {
		d.chunks = [][]uint64{c}
	}
	invariants.Check(d.base+uint64(len(d.chunks))-1 == idx, "buffer: chunk %d appended to a directory based at %d with %d chunks", idx, d.base, len(d.chunks))
	sh.dir.Store(d)
	cost := int64(len(c)) * 8
	a.bytes += cost
	sh.bytes.Add(cost)
	return idx
}

// resetArena drops the shard's chunks (a recycled table); the next chunk
// index continues after the last one used.
func (sh *shard) resetArena() {
	sh.dir.Store(nil)
	next := sh.aw.nextIndex
	sh.aw = arenaWriter{nextIndex: next}
}

// A version record is one value (or tombstone) of a key, in the arena:
//
//	word 0 (rec0): prev reference (bits 0-39) | value length (bits 40-62,
//	               recLenEscape: the length is in word 2) | tombstone (bit 63)
//	word 1:        sequence number
//	[word 2:       value length, if escaped]
//	value bytes, padded to a word
//
// A key's records form a chain from the newest (the slot's head) by prev
// links, in strictly decreasing sequence numbers. Word 0 is the only word
// that changes after publication: a change arriving with a lower sequence
// number than the head is linked in below it (its predecessor's prev is
// stored atomically, with the rest of word 0 unchanged).
const (
	recLenShift  = refBits
	recLenEscape = 1<<23 - 1
	recDel       = 1 << 63
	recHdrWords  = 2
)

// recWords is the number of words a record of a value of n bytes takes.
func recWords(n int, del bool) int {
	if del {
		return recHdrWords
	}
	w := recHdrWords + (n+7)/8
	if n >= recLenEscape {
		w++
	}
	return w
}

// newRec appends a record of v (a tombstone if del) with sequence number
// seq and prev link prev; it returns its reference.
func (sh *shard) newRec(v []byte, del bool, seq, prev uint64) uint64 {
	ref, w := sh.alloc(recWords(len(v), del))
	h := prev
	switch {
	case del:
		h |= recDel
	case len(v) >= recLenEscape:
		h |= recLenEscape << recLenShift
		w[2] = uint64(len(v))
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&w[3])), len(v)), v)
	default:
		h |= uint64(len(v)) << recLenShift
		if len(v) > 0 {
			copy(unsafe.Slice((*byte)(unsafe.Pointer(&w[2])), len(v)), v)
		}
	}
	// Arena words are never reused: the store that publishes the
	// reference (a slot head, a prev link) orders these.
	w[1], w[0] = seq, h
	return ref
}

// recHead returns word 0 and the sequence number of the record at w.
func recHead(w []uint64) (h, seq uint64, ok bool) {
	if len(w) < recHdrWords {
		return 0, 0, false
	}
	return atomic.LoadUint64(&w[0]), atomic.LoadUint64(&w[1]), true
}

// recValue returns the value bytes of the record at w with word 0 h; nil,
// false if the record does not fit in w (a reader racing a recycle).
func recValue(w []uint64, h uint64) ([]byte, bool) {
	if h&recDel != 0 {
		return nil, true
	}
	n := int(h >> recLenShift & recLenEscape)
	data := recHdrWords
	if n == recLenEscape {
		if len(w) < 3 {
			return nil, false
		}
		n = int(atomic.LoadUint64(&w[2]))
		data = 3
	}
	if n == 0 {
		return nil, true
	}
	if n < 0 || (n+7)/8 > len(w)-data {
		return nil, false
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[data])), n), true
}

// newKeyRec appends the bytes of a long key to the arena.
func (sh *shard) newKeyRec(k []byte) uint64 {
	ref, w := sh.alloc((len(k) + 7) / 8)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), len(w)*8), k)
	return ref
}

// keyBytes returns the n bytes of the key record at ref in d.
func (d *chunkDir) keyBytes(ref uint64, n int) (string, bool) {
	w := d.resolve(ref)
	if (n+7)/8 > len(w) || n <= 0 {
		return "", false
	}
	return unsafe.String((*byte)(unsafe.Pointer(&w[0])), n), true
}
