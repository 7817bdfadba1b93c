package buffer

import (
	"encoding/binary"
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
// except for a record's word 0 and the rewrite of a small record that left
// its key's chain (see the version record's layout below). Records are addressed by a
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

// addChunk publishes c as the next chunk of the shard's directory, before
// any record in it is referenced (publication order 2d).
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
//	word 0 (rec0): prev reference (bits 0-39) | room (bits 40-42: value
//	               words the record has room for, if it may be rewritten;
//	               see recRoom) | value length (bits 43-62, recLenEscape:
//	               the length is in word 2) | tombstone (bit 63)
//	word 1:        sequence number
//	[word 2:       value length, if escaped]
//	value bytes, padded to a word
//
// A key's records form a chain from the newest (the slot's head) by prev
// links, in strictly decreasing sequence numbers. Word 0 changes after
// publication in two ways: a change arriving with a lower sequence number
// than the head is linked in below it (its predecessor's prev is stored
// atomically, with the rest of word 0 unchanged), and a chain is cut below
// a visible head (prev set to refCut) when the record below it is rewritten
// (see shard.reuse).
//
// A small record (at most reuseMaxWords words) may be rewritten in place
// once it left its key's chain that way: the writer stores its new
// sequence number first, then the value words, then word 0, all
// atomically. A reader that may race a rewrite (a lock-free point read; an
// iterator or snapshot pins its tables, and a pinned table's records are
// never rewritten) loads word 1, then word 0 and the value words, then
// word 1 again: equal numbers mean it read one record's content (a
// rewrite always stores a number never stored there before), different
// ones that it must read again (seqlock; see recValid).
const (
	recRoomShift = refBits
	recRoomMask  = 7
	recLenShift  = refBits + 3
	recLenEscape = 1<<20 - 1
	recDel       = 1 << 63
	recHdrWords  = 2
	// refCut is the prev link of a record whose chain was cut below it:
	// a reader that needs an older change of the key read a visible
	// number from before the cut and must read again with a newer one.
	// (Chunk index 0 is never used, so refCut never resolves.)
	refCut = 1
	// reuseMaxWords bounds the records that are rewritten in place: their
	// values (at most 32 bytes) are copied by readers one atomic word at
	// a time; longer values are copied with memmove, as they are never
	// rewritten.
	reuseMaxWords = recHdrWords + 4
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
// seq and prev link prev; it returns its reference. A record added above
// the head of a key that already has a chain of records (roomy: its third
// change or later, and a rewrite in place was not possible, often because
// the record below had no room for a longer value) gets room for any value
// a rewrite may store if its own fits (reuseMaxWords words), so that a key
// whose values change size soon keeps rewriting the same two records. Any
// other record has room for its own value only: a key written twice
// between flushes, the common case, pays nothing for rewrites.
func (sh *shard) newRec(v []byte, del bool, seq, prev uint64, roomy bool) uint64 {
	words := recWords(len(v), del)
	if roomy && words <= reuseMaxWords {
		words = reuseMaxWords
	}
	ref, w := sh.alloc(words)
	h := prev
	if room := words - recHdrWords; room <= reuseMaxWords-recHdrWords {
		h |= uint64(room) << recRoomShift
	}
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
	// Fresh words, unseen by any reader: the atomic store that publishes
	// the reference (a slot head, a prev link) orders these plain stores
	// before every reader's loads (publication order 2a).
	w[1], w[0] = seq, h
	return ref
}

// rewriteRec rewrites the record at w (reuseMaxWords words at most, with
// room for v) as change seq of v (a tombstone if del) with prev link prev.
// The number is stored first: see the seqlock above. Writers only, under
// the shard mutex.
func rewriteRec(w []uint64, v []byte, del bool, seq, prev uint64) {
	room := atomic.LoadUint64(&w[0]) >> recRoomShift & recRoomMask
	atomic.StoreUint64(&w[1], seq)
	h := prev | room<<recRoomShift
	if del {
		h |= recDel
	} else {
		h |= uint64(len(v)) << recLenShift
		var b [8 * (reuseMaxWords - recHdrWords)]byte
		copy(b[:], v)
		for i := range (len(v) + 7) / 8 {
			atomic.StoreUint64(&w[recHdrWords+i], binary.LittleEndian.Uint64(b[8*i:]))
		}
	}
	atomic.StoreUint64(&w[0], h)
}

// recRoom is the number of words of a record with word 0 h that a rewrite
// may use: 0 for a record that is never rewritten (room for more than
// reuseMaxWords).
func recRoom(h uint64) int {
	if room := h >> recRoomShift & recRoomMask; room != 0 || h&recDel != 0 {
		return recHdrWords + int(room)
	}
	return 0 // a record of an empty value made with no room: not worth it
}

// recValid reports whether the record at w still holds change seq: a
// reader that loaded seq from w before reading its content checks this
// after (see the seqlock above).
func recValid(w []uint64, seq uint64) bool {
	return len(w) >= recHdrWords && atomic.LoadUint64(&w[1]) == seq
}

// appendRecValue appends the value of the record at w with word 0 h to
// dst: one atomic load per word for a value a rewrite may change under a
// lock-free reader, memmove for a longer one (never rewritten). The caller
// checks recValid afterwards. ok is false if the record does not fit in w
// (a reader racing a recycle).
func appendRecValue(dst []byte, w []uint64, h uint64) ([]byte, bool) {
	if h&recDel != 0 {
		return dst, true
	}
	n := int(h >> recLenShift & recLenEscape)
	if n == recLenEscape || n > 8*(reuseMaxWords-recHdrWords) {
		v, ok := recValue(w, h)
		return append(dst, v...), ok
	}
	nw := (n + 7) / 8
	if nw > len(w)-recHdrWords {
		return dst, false
	}
	var b [8 * (reuseMaxWords - recHdrWords)]byte
	for i := range nw {
		binary.LittleEndian.PutUint64(b[8*i:], atomic.LoadUint64(&w[recHdrWords+i]))
	}
	return append(dst, b[:n]...), true
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
