package buffer

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// table holds pending KV changes: the active table of a keyspace, or a sealed
// one waiting to be flushed.
//
// Invariants:
//
//  1. Readers take no lock: they load the shard set, a shard's slot array,
//     slots and nodes with atomic loads, and read only immutable bytes (keys,
//     value records).
//  2. Writers serialise on the shard mutex. A node is fully built (key,
//     first value, tower) before it is published, first into the skip list
//     (bottom level first), then into its slot (hash before pointer).
//  3. Nothing is ever removed: overwrites and deletes store a new value
//     record in the key's node. Slot arrays grow (readers of the old array
//     see a consistent, older set) but never shrink while the table is live.
//  4. Range tombstones (rdel) are older than every point in the table: they
//     are set while the table holds no point in their range, under every
//     shard lock (see KV.DeleteRange).
//  5. Once sealed (sealed set under t.mu and every shard's mu), no write
//     lands: set returns false and the writer retries on the active table the
//     sealer published before unlocking.
//  6. clear (recycling) runs only after the table left every view and while
//     no iterator or snapshot pins it; it leaves the table sealed until the
//     overlay publishes it as an active table again.
type table struct {
	shards atomic.Pointer[shardSet] // nil until the first write
	rdel   atomic.Pointer[spans]    // range tombstones; nil if none

	shift   uint8 // 64 - log2(nshards): shard = hash >> shift
	nshards int
	pins    atomic.Int32 // iterators and snapshots reading the table

	mu     sync.Mutex // guards lazy shard allocation, sealed
	sealed bool

	// gen is the flush generation that froze the table, 0 until frozen;
	// written and read under the overlay's view mutex.
	gen uint64
}

type shardSet struct{ s []*shard }

// shard is one independently locked part of a table. The first cache line
// holds what readers load; writer state lives on the next one so that a
// writer taking the mutex does not invalidate the readers' line.
type shard struct {
	slots atomic.Pointer[slotArray]
	head  *node
	_     [64 - 16]byte

	mu     sync.Mutex
	sealed bool   // under mu
	used   int    // under mu: occupied slots
	rng    uint64 // under mu: tower heights
	keys   atomic.Int64
	bytes  atomic.Int64 // nodes, towers, records, slot array
}

// slotArray is an open-addressing (linear probing) array, filled to at most
// 7/8. A slot goes from empty to {hash, node} once and is emptied again only
// by clear.
//
// filter is a blocked Bloom filter of the keys in s (one byte per slot, two
// bits of one 64-bit word per key: about 3.5% false positives at full load):
// at 7/8 a miss would probe about 23 slots (6 cache lines) before falling
// through to the store, while the filter (an eighth of the array's size,
// cache resident) rejects most misses with one load. A writer sets a key's
// bits before it publishes the slot, so a reader never sees a published key
// filtered out.
type slotArray struct {
	mask   uint64
	fmask  uint64 // filter words - 1
	s      []slot
	filter []uint64
}

// filterWord returns h's filter word index and bit mask.
func (a *slotArray) filterBits(h uint64) (uint64, uint64) {
	return (h >> 40) & a.fmask, 1<<(h&63) | 1<<(h>>6&63)
}

// mayHold reports whether h may be in the array (false: certainly not).
func (a *slotArray) mayHold(h uint64) bool {
	w, m := a.filterBits(h)
	return atomic.LoadUint64(&a.filter[w])&m == m
}

func (a *slotArray) addFilter(h uint64) {
	w, m := a.filterBits(h)
	if atomic.LoadUint64(&a.filter[w])&m != m {
		atomic.OrUint64(&a.filter[w], m)
	}
}

// slot keeps the key's hash next to its node so a probe rejects other keys
// without touching their nodes. A writer stores hash before n; a reader loads
// n before hash.
type slot struct {
	hash atomic.Uint64
	n    atomic.Pointer[node]
}

const minSlots = 8

func newTable(nshards int) *table {
	return &table{nshards: nshards, shift: uint8(64 - bits.TrailingZeros(uint(nshards)))}
}

// hashKey hashes a key for shard selection and slot probing.
func hashKey(k string) uint64 { return xxh3.HashString(k) }

// lookup returns k's node, or nil. h is hashKey(k).
func (t *table) lookup(k string, h uint64) *node {
	ss := t.shards.Load()
	if ss == nil {
		return nil
	}
	arr := ss.s[h>>t.shift].slots.Load()
	if arr == nil || !arr.mayHold(h) {
		return nil
	}
	for i := h & arr.mask; ; i = (i + 1) & arr.mask {
		s := &arr.s[i]
		n := s.n.Load()
		if n == nil {
			return nil
		}
		if s.hash.Load() == h && n.key() == k {
			return n
		}
	}
}

// covers reports whether a range tombstone of t covers k.
func (t *table) covers(k string) bool {
	sp := t.rdel.Load()
	return sp != nil && sp.covers(k)
}

// shardFor returns the shard for h, allocating the shard set on first use;
// nil if the table is sealed.
func (t *table) shardFor(h uint64) *shard {
	if ss := t.shards.Load(); ss != nil {
		return ss.s[h>>t.shift]
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sealed {
		return nil
	}
	return t.allocShardsLocked().s[h>>t.shift]
}

func (t *table) allocShardsLocked() *shardSet {
	if ss := t.shards.Load(); ss != nil {
		return ss
	}
	ss := &shardSet{s: make([]*shard, t.nshards)}
	for i := range ss.s {
		ss.s[i] = &shard{head: newHead(), rng: uint64(i)*0x9E3779B97F4A7C15 | 1, sealed: t.sealed}
	}
	t.shards.Store(ss)
	return ss
}

// set stores k = v (a tombstone if del). It returns false, storing nothing,
// once the table is sealed. added is the change in bytes held.
func (t *table) set(k []byte, h uint64, v []byte, del bool) (ok bool, added int64) {
	sh := t.shardFor(h)
	if sh == nil {
		return false, 0
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.sealed {
		return false, 0
	}
	return true, sh.setLocked(k, h, v, del)
}

// setLocked is set with sh.mu held and sh not sealed.
func (sh *shard) setLocked(k []byte, h uint64, v []byte, del bool) int64 {
	arr := sh.slots.Load()
	var added int64
	if arr == nil {
		arr = newSlotArray(minSlots)
		sh.slots.Store(arr)
		added += arr.bytes()
	}
	ks := unsafe.String(unsafe.SliceData(k), len(k))
	i := h & arr.mask
	for ; ; i = (i + 1) & arr.mask {
		s := &arr.s[i]
		n := s.n.Load()
		if n == nil {
			break
		}
		if s.hash.Load() == h && n.key() == ks {
			// Overwrite: a new immutable record, one pointer store.
			var r *byte
			if del {
				r = tombstone()
			} else {
				r, added = newRec(v)
			}
			n.val.Store(r)
			sh.bytes.Add(added)
			return added
		}
	}
	if (sh.used+1)*8 > len(arr.s)*7 {
		old := arr
		arr = sh.grow(old)
		added += arr.bytes() - old.bytes()
		i = h & arr.mask
		for arr.s[i].n.Load() != nil {
			i = (i + 1) & arr.mask
		}
	}
	n, first, cost := newNode(k, v, del, randomHeight(&sh.rng))
	added += cost
	sh.link(n)
	arr.addFilter(h)
	arr.s[i].hash.Store(h)
	arr.s[i].n.Store(n)
	n.val.Store(first) // the write's linearization point: see node
	sh.used++
	sh.keys.Add(1)
	sh.bytes.Add(added)
	return added
}

func newSlotArray(n int) *slotArray {
	nf := max(n/8, 1) // one filter byte per slot
	return &slotArray{mask: uint64(n - 1), fmask: uint64(nf - 1), s: make([]slot, n), filter: make([]uint64, nf)}
}

// bytes is the memory the array holds.
func (a *slotArray) bytes() int64 {
	return int64(len(a.s))*int64(unsafe.Sizeof(slot{})) + int64(len(a.filter))*8
}

// grow publishes a slot array twice the size. Readers still probing the old
// one see every key it held; keys inserted later are concurrent writes.
func (sh *shard) grow(old *slotArray) *slotArray {
	arr := newSlotArray(2 * len(old.s))
	for i := range old.s {
		n := old.s[i].n.Load()
		if n == nil {
			continue
		}
		h := old.s[i].hash.Load()
		j := h & arr.mask
		for arr.s[j].n.Load() != nil {
			j = (j + 1) & arr.mask
		}
		arr.addFilter(h)
		arr.s[j].hash.Store(h)
		arr.s[j].n.Store(n)
	}
	sh.slots.Store(arr)
	return arr
}

// keys returns the number of keys (points) in the table.
func (t *table) keyCount() int64 {
	ss := t.shards.Load()
	if ss == nil {
		return 0
	}
	var n int64
	for _, sh := range ss.s {
		n += sh.keys.Load()
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

// hasPointIn reports whether t holds a key k with lo <= k < hi (hi open when
// hiOpen). Every shard mutex held.
func (t *table) hasPointIn(ss *shardSet, lo, hi string, hiOpen bool) bool {
	if ss == nil {
		return false
	}
	for _, sh := range ss.s {
		if n := seekGE(sh.head, lo); n != nil && (hiOpen || n.key() < hi) {
			return true
		}
	}
	return false
}

// bytes is the memory held by the table's changes.
func (t *table) bytes() int64 {
	ss := t.shards.Load()
	if ss == nil {
		return 0
	}
	var n int64
	for _, sh := range ss.s {
		n += sh.bytes.Load()
	}
	return n
}

// capacityBytes is the memory a cleared table keeps: shards and slot arrays.
func (t *table) capacityBytes() int64 {
	n := int64(unsafe.Sizeof(*t))
	ss := t.shards.Load()
	if ss == nil {
		return n
	}
	for _, sh := range ss.s {
		n += int64(unsafe.Sizeof(*sh)) + int64(nodeHdr+16+8*(maxLevel-1))
		if arr := sh.slots.Load(); arr != nil {
			n += arr.bytes()
		}
	}
	return n
}

// clear empties a table that left every view and is not pinned, keeping its
// shards and slot arrays for reuse. It leaves the table sealed.
func (t *table) clear() {
	ss := t.lockAll()
	t.sealLocked(ss)
	t.rdel.Store(nil)
	t.gen = 0
	if ss != nil {
		for _, sh := range ss.s {
			if arr := sh.slots.Load(); arr != nil {
				for i := range arr.s {
					arr.s[i].n.Store(nil)
				}
				for i := range arr.filter {
					atomic.StoreUint64(&arr.filter[i], 0)
				}
			}
			for l := range maxLevel {
				sh.head.next(l).Store(nil)
			}
			sh.used = 0
			sh.keys.Store(0)
			// A reused slot array is not charged again: the pool's
			// capacity is bounded by Options.PoolBytes instead.
			sh.bytes.Store(0)
		}
	}
	t.unlockAll(ss)
}
