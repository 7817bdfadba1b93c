package buffer

import (
	"encoding/binary"
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/kvbuf/kvbuf/internal/invariants"
)

// table holds pending KV changes: the active table of a keyspace, or a sealed
// one waiting to be flushed. Point operations are a probe of a Swiss-style
// hash table per shard; order is produced apart from the write path (see
// order).
//
// Invariants:
//
//  1. Readers take no lock: they load the shard set, a shard's slot array,
//     control words, slot words, arena directory and record heads with
//     atomic loads, and read only bytes that were published to them and are
//     never written again (arena chunks are never reused; see chunkDir).
//     Every word a reader may load while a writer stores it is stored with
//     sync/atomic, in every build (publication order 8; the numbers are
//     those of protocol.go).
//  2. Writers serialise on the shard mutex. A new key's control byte is
//     stored (atomically) after its slot words and log entry: it publishes
//     them to every reader that loads it (see place; publication order 1);
//     the change's sequence number, published after, tells a reader
//     whether to use it. A version record is written before the slot head
//     or prev link that publishes it (an atomic store: readers follow heads
//     whatever their visible number; publication orders 2a, 2c).
//  3. Keys are never removed while the table is live: an overwrite or
//     delete adds a version (sequence-numbered) to the key, or rewrites
//     the record below a visible head in place when no reader can need it
//     (see shard.reuse; lock-free readers then read again); a range delete
//     adds a sequence-numbered range tombstone. Slot arrays grow (readers of the
//     old array see every key it held; keys inserted later are concurrent
//     writes or were published after the reader's visible sequence number)
//     and shrink only once the table is sealed and retained by the read
//     tier (tier rule T6 in kv_tier.go: the same keys and heads, published
//     as growth is).
//  4. Every change of the table has a sequence number >= base: the table
//     becomes active only while no write is in flight (Freeze, Snapshot), or
//     takes no write at all (Drop's table). A change is visible to a read
//     at visible sequence number v iff its number is <= v; of a key's
//     visible changes and the table's visible range tombstones covering it,
//     the highest number wins.
//  5. Once sealed (sealed set under t.mu and every shard's mu), no write
//     lands: set returns false and the writer retries on the active table the
//     sealer published before unlocking.
//  6. clear (recycling) runs only after the table left every view and while
//     no iterator or snapshot pins it; it leaves the table sealed until the
//     overlay publishes it as an active table again.
type table struct {
	shards atomic.Pointer[shardSet] // nil until the first write
	rdel   atomic.Pointer[spans]    // range tombstones; nil if none
	// rbytes is the memory of the range tombstones that KV.DeleteRange
	// added (spanBytes), part of bytes: without it a host deleting ranges
	// held memory that neither MaxPendingBytes nor the budget saw.
	rbytes atomic.Int64
	ord    atomic.Pointer[order] // cached key order; nil until asked for
	base   atomic.Uint64         // lowest sequence number the table may hold
	// filter is the read tier's filter of the table's keys (tier rule
	// T5): nil unless the table is retained and the engine asked for one.
	filter atomic.Pointer[tierFilter]

	smask   uint64 // nshards - 1: a key's shard is hash>>shardShift & smask
	nshards int
	seed    uint64       // the overlay's hash seed
	pins    atomic.Int32 // iterators and snapshots reading the table
	// groups is the size of a shard's first slot array (set before the
	// table is published: a table that follows a large one starts large
	// instead of growing a dozen times).
	groups int

	mu     sync.Mutex // guards lazy shard allocation, sealed, rdel changes
	sealed bool
	ordMu  sync.Mutex // serialises builds of ord

	// gen is the flush generation that froze the table, 0 until frozen;
	// written and read under the overlay's view mutex.
	gen uint64
	// flushDesign selects how ingestTable reads the slots
	// (BenchmarkIngestTo compares the designs).
	flushDesign flushDesign
	// sortFromLog makes fullOrder take a sealed shard's keys from its log,
	// as an active one's (BenchmarkFlushSort compares the designs).
	sortFromLog bool
	// flushParts, if not 0, overrides the overlay's IngestWriters for the
	// table's flush (BenchmarkIngestTo compares 1, 2 and 4).
	flushParts int
	// flushSortWorkers, if not 0, overrides the goroutines of the flush's
	// sort (else the flush's writers: IngestWriters or flushParts).
	flushSortWorkers int
}

// flushDesign is how ingestTable reads a sealed table's slots in key order.
type flushDesign uint8

const (
	flushChunked    flushDesign = iota // ingestChunk slots loaded ahead, the next chunk's touched (default)
	flushByKey                         // one slot at a time
	flushRanked                        // in slot order, into a buffer by rank
	flushNoPrefetch                    // chunked, the next chunk not touched
)

type shardSet struct{ s []*shard }

// shard is one independently locked part of a table. The first cache line
// holds what readers load; writer state lives after it so that a writer
// taking the mutex does not invalidate the readers' line.
type shard struct {
	arr atomic.Pointer[slotArray]
	dir atomic.Pointer[chunkDir]
	_   [64 - 16]byte

	mu     sync.Mutex
	sealed bool // under mu
	aw     arenaWriter
	bytes  atomic.Int64 // slot array, arena chunks
}

// slotArray is a Swiss-style open-addressing table: groups of 8 slots, each
// group with a word of 8 control bytes (0: empty; 0x80 | 7 bits of the
// key's hash: full), probed group by group in order (wrapping around) from
// the group the hash selects (see home), filled to at most 7/8. A probe
// matches the 7 hash bits of all 8 slots of a group with a few arithmetic
// operations on the control word and looks at a slot only on a match (1 in
// 128 for a key that is not there), so the control words double as the
// filter that keeps a miss from touching slots.
//
// A slot is 4 words (32 bytes; see slotWords). A key of up to 24 bytes is
// stored in the slot; so is its first value if the key's words and the
// value fit in 24 bytes together (W2's 8-byte keys and 16-byte values do),
// so that a pending hit is the control word and the slot, two cache misses
// that overlap when the key sits in its preferred slot (see freeSlot).
// Later values go to the arena. A slot goes from empty to full once and is
// emptied again only by clear.
//
// log lists the slot index of every key in insertion order (count in n):
// the keys a cached order does not cover yet are the log's tail. Both are
// written and read under the shard mutex only (lockedCount).
type slotArray struct {
	groups  uint64         // number of groups: any size, so that growth can be by half (see growGroups)
	ctrl    []uint64       // one word per group
	s       []uint64       // slots, 4 words each
	cp, sp  unsafe.Pointer // &ctrl[0], &s[0]: the read path's unchecked indexing
	log     []uint32
	n       uint64 // log entries (keys): written and read under the shard mutex only
	maxKeys int
	// cleared is set by clear (under every shard mutex) and read by
	// writers: a recycled array's key words are stored atomically (see
	// place).
	cleared bool
}

// lockedCount returns the number of keys of a, with every log entry they
// have visible to the caller (it takes the shard mutex).
func (a *slotArray) lockedCount(sh *shard) int64 {
	sh.mu.Lock()
	n := a.n
	sh.mu.Unlock()
	return int64(n)
}

// slotWords are the four words of a slot. w0, the head, is the only word that changes after the slot is
// published (an overwrite stores a new head):
//
//	mode inline (bits 63-62 = 0): the key and its only value are in w1..w3
//	    (the value after the key's words).
//	    bit 61 tombstone | bits 60-56 key length | bits 55-51 value length |
//	    bits 50-0 sequence number - table base
//	mode chain (1): the key is in w1..w3, its values in the arena.
//	    bits 60-56 key length | bits 39-0 reference of the newest record
//	mode long (2): the key is in the arena.
//	    bits 39-0 reference of the newest record;
//	    w1 = key reference | key length << 40; w2 = the key's first 8 bytes
//	    (big-endian, for sorting); w3 = the key's full hash (a probe compares
//	    it before reading the key from the arena)
type slotWords struct{ w0, w1, w2, w3 uint64 }

const (
	modeShift   = 62
	modeInline  = 0
	modeChain   = 1
	modeLong    = 2
	inlDel      = 1 << 61
	klenShift   = 56
	vlenShift   = 51
	lenMask     = 31
	relSeqMask  = 1<<51 - 1
	inlineBytes = 24 // key (and first value) bytes a slot holds
	minGroups   = 1
	groupSlots  = 8
	ctrlLSB     = 0x0101010101010101
	ctrlMSB     = 0x8080808080808080
	slotWordsN  = 4
	longKeyLen  = 40
	// shardShift: a key's shard is taken from the top 6 bits of its hash
	// (maxShards is 64), its preferred slot from the 3 below, its control
	// byte from the bottom 7 and its group from the bits above those.
	shardShift = 58
)

func newTable(nshards int, seed uint64) *table {
	return &table{nshards: nshards, seed: seed, smask: uint64(nshards - 1), groups: minGroups}
}

// groupsFor returns the smallest slot array size (in groups) that holds n
// keys at most 7/8 full.
func groupsFor(n int) int {
	return max(minGroups, (n+6)/7) // 7 keys per group of 8 slots
}

// growGroups returns the size a full array of g groups grows to: half as
// large again. Doubling would leave a grown array under half full: with
// keys held in the slots, the slot arrays are most of a table's memory, and
// a step of 1.5 keeps every array at least 58% full (7/8 / 1.5) for twice
// the copying (each key is copied about twice over the table's growth,
// instead of once).
func growGroups(g uint64) int {
	return int(g + max(g/2, 1))
}

func newSlotArray(groups int) *slotArray {
	slots := groups * groupSlots
	maxKeys := slots * 7 / 8
	a := &slotArray{
		groups:  uint64(groups),
		ctrl:    make([]uint64, groups),
		s:       make([]uint64, slots*slotWordsN),
		log:     make([]uint32, maxKeys),
		maxKeys: maxKeys,
	}
	a.cp, a.sp = unsafe.Pointer(&a.ctrl[0]), unsafe.Pointer(&a.s[0])
	adviseHuge(a.s) // random slots: huge pages spare a TLB miss each
	return a
}

// bytes is the memory the array holds.
func (a *slotArray) bytes() int64 {
	return int64(len(a.ctrl))*8 + int64(len(a.s))*8 + int64(len(a.log))*4
}

// slotArrayBytes is the memory newSlotArray(groups) holds (its bytes).
func slotArrayBytes(groups int) int64 {
	slots := int64(groups) * groupSlots
	return int64(groups)*8 + slots*slotWordsN*8 + slots*7/8*4
}

// home returns the group where the probe for a key with hash h starts:
// bits 7-38 of h scaled to the number of groups by a multiplication (a
// fast range reduction; no division, and any number of groups below 2^32,
// a terabyte of slots).
func (a *slotArray) home(h uint64) uint64 { return (h >> 7 & (1<<32 - 1)) * a.groups >> 32 }

// next returns the group a probe visits after g.
func (a *slotArray) next(g uint64) uint64 {
	if g++; g == a.groups {
		return 0
	}
	return g
}

// tag is the control byte of a key with hash h.
func tag(h uint64) uint64 { return h&0x7f | 0x80 }

// matchTag returns the control bytes of c equal to tag t, as the high bit
// of each byte; it may report a full byte above a true match (the caller
// compares keys), never an empty one.
func matchTag(c, t uint64) uint64 {
	x := c ^ ctrlLSB*t
	return (x - ctrlLSB) &^ x & ctrlMSB
}

// matchEmpty returns the empty control bytes of c.
func matchEmpty(c uint64) uint64 { return ^c & ctrlMSB }

func (a *slotArray) slot(i int) []uint64 {
	return a.s[i*slotWordsN : i*slotWordsN+slotWordsN : i*slotWordsN+slotWordsN]
}

func (a *slotArray) load(i int) slotWords {
	p := a.slot(i)
	return slotWords{atomic.LoadUint64(&p[0]), atomic.LoadUint64(&p[1]), atomic.LoadUint64(&p[2]), atomic.LoadUint64(&p[3])}
}

// find returns the slot of pk's key in a and its words, or -1.
func (a *slotArray) find(pk *probeKey, sh *shard) (int, slotWords) {
	tg := tag(pk.h)
	g := a.home(pk.h)
	ctrl, s := a.ctrl, a.s
	for step := uint64(1); ; step++ {
		c := atomic.LoadUint64(&ctrl[g])
		for m := matchTag(c, tg); m != 0; m &= m - 1 {
			i := int(g)*groupSlots + bits.TrailingZeros64(m)>>3
			p := s[i*slotWordsN : i*slotWordsN+slotWordsN : i*slotWordsN+slotWordsN]
			sw := slotWords{atomic.LoadUint64(&p[0]), atomic.LoadUint64(&p[1]), atomic.LoadUint64(&p[2]), atomic.LoadUint64(&p[3])}
			if pk.matches(&sw, sh) {
				return i, sw
			}
		}
		if matchEmpty(c) != 0 || step >= a.groups {
			return -1, slotWords{}
		}
		g = a.next(g)
	}
}

// freeSlot returns an empty slot on h's probe sequence (writers only): in
// the first group with one, the empty slot nearest (cyclically) to the
// key's preferred slot, so that most keys sit in their preferred slot and a
// read can load that slot speculatively, in parallel with the control word
// (see prefSlot).
func (a *slotArray) freeSlot(h uint64) int {
	g := a.home(h)
	pref := prefSlot(h)
	for {
		if m := matchEmpty(a.ctrl[g]); m != 0 {
			j := bits.TrailingZeros64(bits.RotateLeft64(m, -8*pref)) >> 3
			return int(g)*groupSlots + (pref+j)&(groupSlots-1)
		}
		g = a.next(g)
	}
}

// prefSlot is the slot of its first group a key with hash h takes if it is
// empty (bits the shard, group and tag do not use).
func prefSlot(h uint64) int { return int(h >> 55 & (groupSlots - 1)) }

// place stores sw in an empty slot of h's probe sequence, logs it and then
// publishes its control byte. Writers only (under the shard mutex), on a
// published array (grow fills its private one with placePrivate).
//
// Publication order 1 (protocol.go): the control
// byte is stored last, atomically, and a reader reaches a slot's key words
// (w1..w3) only through a control word it loaded with the byte set, so
// that store happens before the reader's loads of them: they are stored
// plainly, with no fence of their own (an atomic store is a locked
// exchange on amd64 that waits for every earlier store). The head word w0
// is stored atomically: a read loads a key's preferred slot's head before
// the control word (to overlap the two misses), so it may load it while it
// is stored. In a recycled array (cleared) the key words are stored
// atomically too: a reader still probing the array's previous life holds
// a control word of that life, and may load them with no store of this
// life ordered before (TestKVStaleReaderOfRecycledSlot). The log entry and
// count are read under the shard mutex only.
func (a *slotArray) place(h uint64, sw slotWords) {
	i := a.freeSlot(h)
	p := a.slot(i)
	if a.cleared {
		atomic.StoreUint64(&p[1], sw.w1)
		atomic.StoreUint64(&p[2], sw.w2)
		atomic.StoreUint64(&p[3], sw.w3)
	} else {
		p[1], p[2], p[3] = sw.w1, sw.w2, sw.w3
	}
	atomic.StoreUint64(&p[0], sw.w0)
	a.log[a.n] = uint32(i)
	a.n++
	g := i / groupSlots
	atomic.StoreUint64(&a.ctrl[g], a.ctrl[g]|tag(h)<<(8*(i%groupSlots)))
}

// placePrivate is place into an array no reader can reach yet (grow's,
// before it publishes it): plain stores, which the atomic store that
// publishes the array orders before every reader's loads (publication
// order 3).
func (a *slotArray) placePrivate(h uint64, sw slotWords) {
	i := a.freeSlot(h)
	p := a.slot(i)
	p[0], p[1], p[2], p[3] = sw.w0, sw.w1, sw.w2, sw.w3
	a.log[a.n] = uint32(i)
	a.n++
	g := i / groupSlots
	a.ctrl[g] |= tag(h) << (8 * (i % groupSlots))
}

// touch loads the first control word and the preferred slot (where a new
// key goes, see freeSlot) of a key with hash h, for a writer that will
// store them: a miss on either line is taken here, where the two overlap
// (and, for a batch's keys, overlap with the other keys'), instead of in
// place, where the store waits for the line before the next atomic store
// can start (a locked instruction waits for every earlier store, a store
// to a line not in the cache included).
func (a *slotArray) touch(h uint64) {
	g := a.home(h)
	// The values are not needed: the loads bring the lines in (atomic
	// loads are never removed as dead code).
	atomic.LoadUint64((*uint64)(unsafe.Add(a.sp, (g*groupSlots+uint64(prefSlot(h)))*slotWordsN*8)))
	atomic.LoadUint64((*uint64)(unsafe.Add(a.cp, g*8)))
}

// version is one resolved change of a key.
type version struct {
	seq    uint64
	del    bool
	inline bool   // the value is bytes [off, off+n) of the slot's w1..w3
	off, n int    //
	ext    []byte // the value, in the arena (for readers of pinned tables)
	// rec and h are the version's record and its word 0 (nil, 0 for an
	// inline version): a lock-free reader copies the value with
	// appendRecValue and checks recValid(rec, seq) afterwards, since the
	// record may be rewritten under it (see shard.reuse).
	rec []uint64
	h   uint64
}

// Outcomes of versionAt.
const (
	verNone  = iota // no change of the key at or below vis in the table
	verFound        // the newest such change
	// verRetry: the reader raced a chain cut or a record rewrite (its
	// visible number is older than a change it needs to skip), or a
	// recycle; it must read again with a fresh visible number (and view).
	verRetry
)

// versionAt returns the newest change of the slot with words sw whose
// sequence number is <= vis (verFound), verNone if there is none, verRetry
// if the reader must read again (see the constants; an iterator or the
// flush, which read pinned or sealed tables, never get it).
func (t *table) versionAt(sh *shard, sw *slotWords, vis uint64) (version, uint8) {
	if sw.w0>>modeShift == modeInline {
		seq := t.base.Load() + sw.w0&relSeqMask
		if seq > vis {
			return version{}, verNone
		}
		off, vlen := inlineValueAt(sw.w0)
		if off+vlen > inlineBytes {
			return version{}, verRetry
		}
		return version{seq: seq, del: sw.w0&inlDel != 0, inline: true, off: off, n: vlen}, verFound
	}
	return chainVersionAt(sh, sh.dir.Load(), sw.w0&refMask, vis)
}

// chainVersionAt is versionAt for the record chain from ref, with d a
// directory of sh's arena loaded after the head ref was.
//
// Publication order 2d: a record's chunk is published in the shard's
// directory (addChunk's store of sh.dir) before any reference to the record
// is stored (a slot head or a prev link), so a directory loaded after a
// reference resolves it. The head was loaded before d, but the prev links
// are loaded during the walk, after d: a change of a batch numbered below
// the head (applied out of order by a concurrent batch) is linked in below
// it, and its record may sit in a chunk added after d was loaded. Such a
// link is reloaded against a fresh directory instead of being taken for
// garbage; taken for garbage, the key had no visible change in this table
// and an older table or the store answered with a value of an earlier
// batch while the reader's other keys came from this table (a live
// GetMany or scan saw part of a batch: TestBatchesSerialOrder).
//
// Each record is read as the seqlock of the record layout says (number,
// word 0, number again before its prev link is followed); the caller
// checks the number of the record it returns after reading its content.
// A walk that reaches a cut (refCut) or a record numbered at or above the
// one it came from (rewritten since, or garbage in a recycle race) returns
// verRetry: a cut is made only below a change visible at the time, so a
// reader that reloads its visible number stops above it.
func chainVersionAt(sh *shard, d *chunkDir, ref, vis uint64) (version, uint8) {
	above := ^uint64(0)
	for ref != 0 {
		if ref == refCut {
			return version{}, verRetry
		}
		w := d.resolve(ref)
		if w == nil {
			// Within the table's life the directory only grows; a
			// reference outside the reloaded one is a reader racing
			// a recycle.
			d = sh.dir.Load()
			w = d.resolve(ref)
		}
		if len(w) < recHdrWords {
			return version{}, verRetry
		}
		seq := atomic.LoadUint64(&w[1])
		h := atomic.LoadUint64(&w[0])
		if seq >= above {
			return version{}, verRetry // chains strictly decrease
		}
		if seq <= vis {
			v, ok := recValue(w, h)
			if !ok {
				return version{}, verRetry
			}
			return version{seq: seq, del: h&recDel != 0, ext: v, rec: w, h: h}, verFound
		}
		if atomic.LoadUint64(&w[1]) != seq {
			return version{}, verRetry // rewritten while read
		}
		above = seq
		ref = h & refMask
	}
	return version{}, verNone
}

// inlineValueAt returns where an inline value starts in the slot's w1..w3
// bytes (after the key's words) and its length, from the head w0.
func inlineValueAt(w0 uint64) (off, n int) {
	return 8 * keyWords(int(w0>>klenShift&lenMask)), int(w0 >> vlenShift & lenMask)
}

// inlineValue returns the value bytes of an inline version out of the slot
// words (copied into b).
func inlineValue(b *[inlineBytes]byte, sw *slotWords, v *version) []byte {
	binary.LittleEndian.PutUint64(b[0:], sw.w1)
	binary.LittleEndian.PutUint64(b[8:], sw.w2)
	binary.LittleEndian.PutUint64(b[16:], sw.w3)
	return b[v.off : v.off+v.n]
}

// Outcomes of a probe of one table.
const (
	probeAbsent  = iota // the table knows nothing of the key: ask older ones
	probeValue          // a value
	probeDeleted        // a tombstone or a range tombstone
	probeRetry          // read again with a fresh visible number (verRetry)
)

// probeResult is what a table knows of a key at a visible sequence number.
type probeResult struct {
	kind uint8
	sw   slotWords
	v    version
}

// get returns what t knows of pk's key at visible sequence number vis.
func (t *table) get(pk *probeKey, vis uint64) probeResult {
	var r probeResult
	if vis < t.base.Load() {
		return r // the table's changes are all newer than the reader
	}
	var above uint64 // a range tombstone must be newer than this
	if ss := t.shards.Load(); ss != nil {
		sh := ss.s[pk.h>>shardShift&t.smask]
		if arr := sh.arr.Load(); arr != nil {
			if i, sw := arr.find(pk, sh); i >= 0 {
				v, st := t.versionAt(sh, &sw, vis)
				if st == verFound && v.rec != nil && !recValid(v.rec, v.seq) {
					st = verRetry // v.del may be another change's
				}
				switch st {
				case verRetry:
					r.kind = probeRetry
					return r
				case verFound:
					r.sw, r.v, above = sw, v, v.seq
					r.kind = probeValue
					if v.del {
						r.kind = probeDeleted
					}
				}
			}
		}
	}
	if sp := t.rdel.Load(); sp != nil && sp.hides(pk.k, above, vis) {
		r.kind = probeDeleted
	}
	return r
}

// getAppend is get appending a found value to dst: the point read's path.
// The common case (a key of up to 8 bytes with its value in the slot, in
// the first group probed, at its first tag match) is written out without
// bounds checks in a few dozen instructions: a short path lets the
// processor overlap the cache misses of consecutive reads. Everything else
// takes getAppendSlow.
func (t *table) getAppend(dst []byte, k string, h, kw, vis uint64) ([]byte, uint8) {
	base := t.base.Load()
	ss := t.shards.Load()
	if vis < base || ss == nil || len(k) > 8 {
		return t.getAppendSlow(dst, k, h, vis)
	}
	a := ss.s[h>>shardShift&t.smask].arr.Load()
	if a == nil {
		return t.getAppendSlow(dst, k, h, vis)
	}
	g := a.home(h) // < len(ctrl): the index is checked by construction
	// Load the key's preferred slot now: its cache miss overlaps the
	// control word's, and most keys are in it (see freeSlot).
	spec := atomic.LoadUint64((*uint64)(unsafe.Add(a.sp, (g*groupSlots+uint64(prefSlot(h)))*slotWordsN*8)))
	c := atomic.LoadUint64((*uint64)(unsafe.Add(a.cp, g*8)))
	m := matchTag(c, tag(h))
	if m == 0 {
		if matchEmpty(c) == 0 {
			return t.getAppendSlow(dst, k, h, vis) // on to the next group
		}
		if t.rdel.Load() == nil {
			return dst, probeAbsent
		}
		return t.hiddenAppend(dst, len(dst), k, 0, vis, probeAbsent)
	}
	p := unsafe.Add(a.sp, (g*groupSlots+uint64(bits.TrailingZeros64(m)>>3))*slotWordsN*8)
	w0 := atomic.LoadUint64((*uint64)(p)) | spec&0
	if w0>>modeShift != modeInline || int(w0>>klenShift&lenMask) != len(k) ||
		atomic.LoadUint64((*uint64)(unsafe.Add(p, 8))) != kw {
		return t.getAppendSlow(dst, k, h, vis) // another key, or not inline
	}
	start, kind := len(dst), uint8(probeAbsent)
	seq := base + w0&relSeqMask
	if seq <= vis {
		kind = probeDeleted
		if n := int(w0 >> vlenShift & lenMask); w0&inlDel == 0 && n <= 16 {
			w2 := atomic.LoadUint64((*uint64)(unsafe.Add(p, 16)))
			w3 := atomic.LoadUint64((*uint64)(unsafe.Add(p, 24)))
			if cap(dst)-start >= 16 {
				// Store both words into dst's spare capacity: no copy
				// call for a value of up to 16 bytes.
				d := dst[start : start+16]
				binary.LittleEndian.PutUint64(d, w2)
				binary.LittleEndian.PutUint64(d[8:], w3)
				dst = dst[:start+n]
			} else {
				var b [16]byte
				binary.LittleEndian.PutUint64(b[:], w2)
				binary.LittleEndian.PutUint64(b[8:], w3)
				dst = append(dst, b[:n]...)
			}
			kind = probeValue
		}
	} else {
		seq = 0
	}
	if t.rdel.Load() == nil {
		return dst, kind
	}
	return t.hiddenAppend(dst, start, k, seq, vis, kind)
}

// getAppendSlow is getAppend for every case.
func (t *table) getAppendSlow(dst []byte, k string, h, vis uint64) ([]byte, uint8) {
	pk := probeKeyOf(k, h)
	return t.probeAppend(dst, &pk, vis)
}

// probeAppend is getAppend with a probe key.
func (t *table) probeAppend(dst []byte, pk *probeKey, vis uint64) ([]byte, uint8) {
	base := t.base.Load()
	if vis < base {
		return dst, probeAbsent
	}
	ss := t.shards.Load()
	if ss == nil {
		return t.hiddenAppend(dst, len(dst), pk.k, 0, vis, probeAbsent)
	}
	sh := ss.s[pk.h>>shardShift&t.smask]
	a := sh.arr.Load()
	if a == nil {
		return t.hiddenAppend(dst, len(dst), pk.k, 0, vis, probeAbsent)
	}
	tg := tag(pk.h)
	g := a.home(pk.h)
	for step := uint64(1); ; step++ {
		c := atomic.LoadUint64(&a.ctrl[g])
		for m := matchTag(c, tg); m != 0; m &= m - 1 {
			i := (int(g)*groupSlots + bits.TrailingZeros64(m)>>3) * slotWordsN
			p := a.s[i : i+slotWordsN : i+slotWordsN]
			w0 := atomic.LoadUint64(&p[0])
			if testHook != nil {
				testHook("probe-slot")
			}
			if w0>>modeShift == modeInline && pk.nw == 1 {
				// The common case, a key of up to 8 bytes and its
				// value in the slot.
				if int(w0>>klenShift&lenMask) != len(pk.k) || atomic.LoadUint64(&p[1]) != pk.w[0] {
					continue
				}
				seq := base + w0&relSeqMask
				kind := uint8(probeAbsent)
				start := len(dst)
				if seq <= vis {
					kind = probeDeleted
					if n := int(w0 >> vlenShift & lenMask); w0&inlDel == 0 && n <= 2*8 {
						var b [16]byte
						binary.LittleEndian.PutUint64(b[0:], atomic.LoadUint64(&p[2]))
						binary.LittleEndian.PutUint64(b[8:], atomic.LoadUint64(&p[3]))
						dst, kind = append(dst, b[:n]...), probeValue
					}
				} else {
					seq = 0
				}
				if t.rdel.Load() == nil {
					return dst, kind
				}
				return t.hiddenAppend(dst, start, pk.k, seq, vis, kind)
			}
			sw := slotWords{w0, atomic.LoadUint64(&p[1]), atomic.LoadUint64(&p[2]), atomic.LoadUint64(&p[3])}
			if !pk.matches(&sw, sh) {
				continue
			}
			return t.slotAppend(dst, sh, &sw, pk, base, vis)
		}
		if matchEmpty(c) != 0 || step >= a.groups {
			return t.hiddenAppend(dst, len(dst), pk.k, 0, vis, probeAbsent)
		}
		g = a.next(g)
	}
}

// slotAppend is getAppend's outcome for the key of slot words sw.
func (t *table) slotAppend(dst []byte, sh *shard, sw *slotWords, pk *probeKey, base, vis uint64) ([]byte, uint8) {
	start := len(dst)
	if sw.w0>>modeShift == modeInline {
		seq := base + sw.w0&relSeqMask
		if seq > vis {
			return t.hiddenAppend(dst, start, pk.k, 0, vis, probeAbsent)
		}
		if off, vlen := inlineValueAt(sw.w0); sw.w0&inlDel == 0 && off+vlen <= inlineBytes {
			var b [inlineBytes]byte
			binary.LittleEndian.PutUint64(b[0:], sw.w1)
			binary.LittleEndian.PutUint64(b[8:], sw.w2)
			binary.LittleEndian.PutUint64(b[16:], sw.w3)
			return t.hiddenAppend(append(dst, b[off:off+vlen]...), start, pk.k, seq, vis, probeValue)
		}
		return t.hiddenAppend(dst, start, pk.k, seq, vis, probeDeleted)
	}
	v, st := t.versionAt(sh, sw, vis)
	switch st {
	case verRetry:
		return dst, probeRetry
	case verNone:
		return t.hiddenAppend(dst, start, pk.k, 0, vis, probeAbsent)
	}
	if testHook != nil {
		testHook("read-copy")
	}
	out, ok := appendRecValue(dst, v.rec, v.h)
	if !ok || !recValid(v.rec, v.seq) {
		return dst, probeRetry // rewritten while copied
	}
	if v.del {
		return t.hiddenAppend(dst, start, pk.k, v.seq, vis, probeDeleted)
	}
	return t.hiddenAppend(out, start, pk.k, v.seq, vis, probeValue)
}

// hiddenAppend returns the outcome of a point read of t (dst, kind; the
// value appended from start on) unless a range tombstone of t numbered in
// (above, vis] covers the key.
func (t *table) hiddenAppend(dst []byte, start int, k string, above, vis uint64, kind uint8) ([]byte, uint8) {
	if sp := t.rdel.Load(); sp != nil && sp.hides(k, above, vis) {
		return dst[:start], probeDeleted
	}
	return dst, kind
}

// shardFor returns the shard for h, allocating the shard set on first use;
// nil if the table is sealed.
func (t *table) shardFor(h uint64) *shard {
	if ss := t.shards.Load(); ss != nil {
		return ss.s[h>>shardShift&t.smask]
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sealed {
		return nil
	}
	return t.allocShardsLocked().s[h>>shardShift&t.smask]
}

func (t *table) allocShardsLocked() *shardSet {
	if ss := t.shards.Load(); ss != nil {
		return ss
	}
	ss := &shardSet{s: make([]*shard, t.nshards)}
	for i := range ss.s {
		ss.s[i] = &shard{sealed: t.sealed, aw: arenaWriter{nextIndex: 1}}
	}
	t.shards.Store(ss)
	return ss
}

// set records key pk = v, a tombstone if del, as change seq. It returns
// false, storing nothing, once the table is sealed. added is the change in
// bytes held.
func (t *table) set(pk *probeKey, v []byte, del bool, seq uint64, q *Seq) (ok bool, added int64) {
	sh := t.shardFor(pk.h)
	if sh == nil {
		return false, 0
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.sealed {
		return false, 0
	}
	before := sh.bytes.Load()
	if a := sh.arr.Load(); a != nil {
		a.touch(pk.h)
	}
	sh.setLocked(t, pk, v, del, seq, q)
	return true, sh.bytes.Load() - before
}

// setLocked is set with sh.mu held and sh not sealed. q is the sequencer
// the changes are numbered by (nil: none), whose visible number lets an
// overwrite rewrite a record in place (see reuse).
func (sh *shard) setLocked(t *table, pk *probeKey, v []byte, del bool, seq uint64, q *Seq) {
	base := t.base.Load()
	if invariants.Enabled {
		invariants.Check(seq >= base, "buffer: change %d written to a table based at %d", seq, base)
	}
	arr := sh.arr.Load()
	if arr == nil {
		arr = newSlotArray(t.groups)
		sh.arr.Store(arr)
		sh.bytes.Add(arr.bytes())
	}
	if i, sw := arr.find(pk, sh); i >= 0 {
		sh.overwrite(t, arr.slot(i), sw, v, del, seq, base, q)
		return
	}
	var sw slotWords
	klen := len(pk.k)
	switch {
	case pk.nw > 0 && (del || 8*pk.nw+len(v) <= inlineBytes) && seq >= base && seq-base <= relSeqMask:
		var b [inlineBytes]byte
		copy(b[8*pk.nw:], v)
		sw = slotWords{
			w0: uint64(klen)<<klenShift | uint64(len(v))<<vlenShift | (seq - base),
			w1: pk.w[0] | binary.LittleEndian.Uint64(b[0:]),
			w2: pk.w[1] | binary.LittleEndian.Uint64(b[8:]),
			w3: pk.w[2] | binary.LittleEndian.Uint64(b[16:]),
		}
		if del {
			sw.w0 |= inlDel
		}
	case pk.nw > 0:
		ref := sh.newRec(v, del, seq, 0, false)
		sw = slotWords{w0: modeChain<<modeShift | uint64(klen)<<klenShift | ref, w1: pk.w[0], w2: pk.w[1], w3: pk.w[2]}
	default:
		kb := unsafe.Slice(unsafe.StringData(pk.k), klen)
		kref := sh.newKeyRec(kb)
		ref := sh.newRec(v, del, seq, 0, false)
		sw = slotWords{w0: modeLong<<modeShift | ref, w1: kref | uint64(klen)<<longKeyLen, w2: keyPrefix(pk.k), w3: pk.h}
	}
	if int(arr.n) >= arr.maxKeys {
		arr = sh.grow(t, arr)
	}
	arr.place(pk.h, sw)
}

// overwrite adds change seq to the key of slot p (words sw). A change with a
// lower sequence number than the key's newest is linked in below it: a
// write never replaces a change with a higher number.
func (sh *shard) overwrite(t *table, p []uint64, sw slotWords, v []byte, del bool, seq, base uint64, q *Seq) {
	if sw.w0>>modeShift == modeInline {
		// Move the inline version to a record, then chain the new one
		// above or below it.
		oseq := base + sw.w0&relSeqMask
		odel := sw.w0&inlDel != 0
		klen := int(sw.w0 >> klenShift & lenMask)
		off, vlen := inlineValueAt(sw.w0)
		var b [inlineBytes]byte
		oval := inlineValue(&b, &sw, &version{off: off, n: vlen})
		var head uint64
		if seq >= oseq {
			head = sh.newRec(v, del, seq, sh.newRec(oval, odel, oseq, 0, false), false)
		} else {
			head = sh.newRec(oval, odel, oseq, sh.newRec(v, del, seq, 0, false), false)
		}
		// The key's bytes stay in w1..w3; only the head changes, after
		// the records (publication order 2a).
		atomic.StoreUint64(&p[0], modeChain<<modeShift|uint64(klen)<<klenShift|head)
		return
	}
	d := sh.dir.Load()
	head := sw.w0 & refMask
	hw := d.resolve(head)
	if hh, hseq, _ := recHead(hw); seq >= hseq {
		// The visible number is loaded here, before reuse loads the
		// table's pins, and only for an overwrite that may rewrite.
		if seq > hseq && q != nil && hseq <= q.visible.Load() && sh.reuse(t, d, hw, hh, v, del, seq, head) {
			atomic.StoreUint64(&p[0], sw.w0&^uint64(refMask)|hh&refMask)
			return
		}
		// Publication order 2a: the record (newRec), then the head.
		atomic.StoreUint64(&p[0], sw.w0&^uint64(refMask)|sh.newRec(v, del, seq, head, true))
		return
	}
	// Below the head: after the last record numbered above seq.
	x := d.resolve(head)
	for {
		xh := atomic.LoadUint64(&x[0])
		next := xh & refMask
		// A cut (refCut) is made only below a visible change, and every
		// change numbered below a visible one was applied: a change
		// linked in below the head never meets one.
		invariants.Check(next != refCut, "buffer: change %d linked in below a cut", seq)
		if next != 0 {
			if _, nseq, _ := recHead(d.resolve(next)); nseq > seq {
				x = d.resolve(next)
				continue
			}
		}
		// Publication order 2c: the record, then its predecessor's link.
		ref := sh.newRec(v, del, seq, next, false)
		atomic.StoreUint64(&x[0], xh&^uint64(refMask)|ref)
		return
	}
}

// reuse makes the record below the head (hw, word 0 hh, reference head)
// the key's new head, rewritten as change seq, and reports whether it
// could: with no iterator or snapshot pinning t, a head the caller found
// visible (so that only a reader holding an older visible number can need
// what lies below it), and a small record below it with room for the
// change. An
// overwrite then costs no memory, and a key written again and again
// between flushes keeps two records instead of a chain of them. The caller
// stores the record's reference as the slot's head.
//
// Publication order 2b, a rewrite in place (readers load without locks):
//  1. The head's prev link is cut (refCut): a reader that reaches the cut
//     read its visible number before the head became visible, and reads
//     again with a newer one, which stops at the head.
//  2. The record is rewritten (number first; see rewriteRec), its prev
//     link pointing at the old head: a reader that loaded the record's
//     reference before the cut sees its old content whole or a number
//     that tells it to read again (the seqlock of the record layout).
//  3. The caller stores the slot's head.
//
// The pin check (publication order 10) comes after the caller loaded the
// visible number: an iterator that pins t after it loads its visible
// number afterwards (NewIter pins first, order 7c), at or above the head's
// number, and never reads below the head.
func (sh *shard) reuse(t *table, d *chunkDir, hw []uint64, hh uint64, v []byte, del bool, seq, head uint64) bool {
	prev := hh & refMask
	if prev == 0 || prev == refCut || t.pins.Load() != 0 {
		return false
	}
	rw := d.resolve(prev)
	need := recWords(len(v), del)
	if len(rw) < recHdrWords || need > recRoom(atomic.LoadUint64(&rw[0])) {
		return false
	}
	atomic.StoreUint64(&hw[0], hh&^uint64(refMask)|refCut)
	rewriteRec(rw, v, del, seq, head)
	return true
}

// keyPrefix returns the first 8 bytes of k as a big-endian number (zero
// padded): comparing prefixes orders keys by their first 8 bytes.
func keyPrefix(k string) uint64 {
	if len(k) >= 8 {
		return binary.BigEndian.Uint64(unsafe.Slice(unsafe.StringData(k), 8))
	}
	var b [8]byte
	copy(b[:], k)
	return binary.BigEndian.Uint64(b[:])
}

// grow publishes a slot array half as large again (growGroups), filled
// privately first (publication order 3). Readers still probing the old one
// see every key it held, each with the head it had when the new array was
// published; every later change goes to the new one (and was published
// after any reader of the old array loaded its visible sequence number,
// since that reader loaded the array after it).
func (sh *shard) grow(t *table, old *slotArray) *slotArray {
	arr := newSlotArray(growGroups(old.groups))
	for g, c := range old.ctrl {
		for m := ^matchEmpty(c) & ctrlMSB; m != 0; m &= m - 1 {
			sw := old.load(g*groupSlots + bits.TrailingZeros64(m)/8)
			arr.placePrivate(t.slotHash(&sw, sh), sw)
		}
	}
	sh.arr.Store(arr) // publication order 3: filled privately, then published
	sh.bytes.Add(arr.bytes() - old.chargedBytes())
	return arr
}

// chargedBytes is the memory of a that its shard's bytes count: none for
// an array reused from the pool (clear stopped charging it; the pool's
// bound covered it), so that an array replacing it is charged in full.
func (a *slotArray) chargedBytes() int64 {
	if a.cleared {
		return 0
	}
	return a.bytes()
}

// slotHash returns the hash of the key in sw (the writer's, under sh.mu).
func (t *table) slotHash(sw *slotWords, sh *shard) uint64 {
	if sw.w0>>modeShift == modeLong {
		return sw.w3
	}
	var b [inlineBytes]byte
	binary.LittleEndian.PutUint64(b[0:], sw.w1)
	binary.LittleEndian.PutUint64(b[8:], sw.w2)
	binary.LittleEndian.PutUint64(b[16:], sw.w3)
	return hashBytes(b[:sw.w0>>klenShift&lenMask], t.seed)
}

// keyCount returns the number of keys (points) in the table.
func (t *table) keyCount() int64 {
	return t.sumShards(func(sh *shard) int64 {
		if a := sh.arr.Load(); a != nil {
			return a.lockedCount(sh)
		}
		return 0
	})
}

// sumShards adds up f over the table's shards (0 before the first write).
func (t *table) sumShards(f func(*shard) int64) int64 {
	ss := t.shards.Load()
	if ss == nil {
		return 0
	}
	var n int64
	for _, sh := range ss.s {
		n += f(sh)
	}
	return n
}

// empty reports whether the table holds no change at all.
func (t *table) empty() bool { return t.rdel.Load() == nil && t.keyCount() == 0 }

// lockAll takes t.mu and every shard mutex, so that no write is in progress
// or can start; unlockAll releases them.
func (t *table) lockAll() *shardSet {
	t.mu.Lock()
	ss := t.shards.Load()
	if ss != nil {
		for _, sh := range ss.s {
			sh.mu.Lock()
		}
	}
	return ss
}

func (t *table) unlockAll(ss *shardSet) {
	if ss != nil {
		for _, sh := range ss.s {
			sh.mu.Unlock()
		}
	}
	t.mu.Unlock()
}

// sealLocked marks the table sealed; t.mu and every shard mutex held.
func (t *table) sealLocked(ss *shardSet) {
	t.sealed = true
	if ss != nil {
		for _, sh := range ss.s {
			sh.sealed = true
		}
	}
}

// seal stops every later write to t.
func (t *table) seal() {
	ss := t.lockAll()
	t.sealLocked(ss)
	t.unlockAll(ss)
}

// unseal reopens a recycled table for writes once it is the published active
// table (not before: a writer holding a stale pointer to it must retry).
func (t *table) unseal() {
	ss := t.lockAll()
	t.sealed = false
	if ss != nil {
		for _, sh := range ss.s {
			sh.sealed = false
		}
	}
	t.unlockAll(ss)
}

// bytes is the memory held by the table's changes.
func (t *table) bytes() int64 {
	return t.rbytes.Load() + t.sumShards(func(sh *shard) int64 { return sh.bytes.Load() })
}

// capacityBytes is the memory a cleared table keeps: shards and slot arrays.
func (t *table) capacityBytes() int64 {
	n := int64(unsafe.Sizeof(*t))
	ss := t.shards.Load()
	if ss == nil {
		return n
	}
	for _, sh := range ss.s {
		n += int64(unsafe.Sizeof(*sh))
		if arr := sh.arr.Load(); arr != nil {
			n += arr.bytes()
		}
	}
	return n
}

// reusable reports whether the table may be cleared and kept: false once
// its arenas are close to running out of chunk indexes.
func (t *table) reusable() bool {
	if ss := t.shards.Load(); ss != nil {
		for _, sh := range ss.s {
			sh.mu.Lock()
			next := sh.aw.nextIndex
			sh.mu.Unlock()
			if next > maxChunkIndex/2 {
				return false
			}
		}
	}
	return true
}

// clear empties a table that left every view and is not pinned, keeping its
// shards and slot arrays for reuse (arena chunks go to the garbage
// collector). It leaves the table sealed.
func (t *table) clear() {
	ss := t.lockAll()
	t.sealLocked(ss)
	t.rdel.Store(nil)
	t.rbytes.Store(0)
	t.ord.Store(nil)
	t.filter.Store(nil) // tier rule T5: a filter is for one life of the table
	t.gen = 0
	if ss != nil {
		for _, sh := range ss.s {
			if arr := sh.arr.Load(); arr != nil {
				// Publication order 6: the control words only,
				// atomically (a reader of the previous life may
				// still load them). A slot's words are left: the
				// next life stores a key's words before its control
				// byte (order 1), so a reader that sees the byte
				// sees them, never a previous life's, and stores
				// them atomically (cleared), since a reader of the
				// previous life may load them without the byte.
				for g := range arr.ctrl {
					atomic.StoreUint64(&arr.ctrl[g], 0)
				}
				arr.n = 0
				arr.cleared = true
			}
			sh.resetArena()
			// A reused slot array is not charged again: the pool's
			// capacity is bounded by Options.PoolBytes instead.
			sh.bytes.Store(0)
		}
	}
	t.unlockAll(ss)
}
