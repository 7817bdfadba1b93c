package buffer

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"
)

// DefaultShards is the shard count of a Table when Options.Shards is zero.
//
// Reads take no lock, so shards only spread writers. Measured with
// BenchmarkW3Shards (miss_churn-64, median of 3, 2-core shared machine): 1, 4,
// 8, 16 and 64 shards were within noise of each other at -cpu 1, 2 and 8
// (79-101, 108-146, 145-181 ns/op). A fixed small count bounds the cost: a
// shard (~200 bytes plus its slot array) is allocated on the first insert
// into it, never up front.
const DefaultShards = 8

// maxShards bounds Options.Shards; larger values are clamped.
const maxShards = 1 << 12

const (
	minSlots = 8  // smallest slot array
	maxLevel = 12 // skip list height: 4^12 keys per shard before it degrades
)

// entryOverhead is what PendingBytes charges per entry on top of key and value
// bytes: the entry, its share of the slot array (two slots at the load factor
// of 1/2 after a resize) and, for ordered tables, the index node.
func entryOverhead[K Key, V any](ordered bool) int64 {
	n := int64(unsafe.Sizeof(entry[K, V]{})) + 2*int64(unsafe.Sizeof(slot[K, V]{}))
	if ordered {
		n += int64(unsafe.Sizeof(node[K, V]{}))
	}
	return n
}

// entry is one immutable key/value pair. Writers never modify a published
// entry: an overwrite publishes a new one, so a reader that loaded the pointer
// sees a consistent pair without any lock.
//
// An entry does not keep its hash: the slot holding it does (see slot), and
// leaving it out keeps a KV entry with an 8-byte key and a 16-byte value in
// one 64-byte allocation (see newKVEntry).
type entry[K Key, V any] struct {
	key  K
	val  V
	node *node[K, V] // ordered tables: the key's index node
}

// slots is an open-addressing (linear probing) array of atomic pointers to
// entries. A slot goes nil -> entry -> (entry | tomb)*; it becomes nil again
// only when a released table is cleared for reuse.
type slots[K Key, V any] struct {
	mask uint64
	tomb entry[K, V] // &tomb marks a removed entry (keeps probe chains intact)
	s    []slot[K, V]
}

// slot keeps the entry's hash next to the pointer so a probe rejects other
// keys without dereferencing their entries (a cache miss each). A writer
// stores hash before ptr and changes hash only on a nil or tombstone slot; a
// reader loads ptr before hash, so a non-tombstone ptr it sees always comes
// with that entry's hash.
type slot[K Key, V any] struct {
	hash atomic.Uint64
	ptr  atomic.Pointer[entry[K, V]]
}

func newSlots[K Key, V any](n int) *slots[K, V] {
	return &slots[K, V]{mask: uint64(n - 1), s: make([]slot[K, V], n)}
}

// shard is one independently locked part of a Table. The first cache line
// holds what readers load; writer-side state lives on the next one so a
// writer taking the mutex does not invalidate the readers' line.
type shard[K Key, V any] struct {
	slots atomic.Pointer[slots[K, V]]
	head  *node[K, V] // ordered tables: skip list head (tower of maxLevel)
	_     [64 - 16]byte

	mu     sync.Mutex
	sealed bool   // under mu; set by Seal, cleared by clear
	used   int    // under mu; live entries + tombs in the current slot array
	rng    uint64 // under mu; skip list heights
	live   atomic.Int64
	bytes  atomic.Int64 // keys + values + per-entry overhead
	maxOp  atomic.Uint64
	_      [64 - 48]byte
}

// Table is a sharded hash table for pending changes, safe for concurrent use.
//
// Reads are lock-free: Get does only atomic loads (shard pointer, slot array,
// slots) and compares keys in immutable entries, so readers never write a
// shared cache line and scale with cores. Writers serialise on a per-shard
// mutex and publish new entries (and, when growing, new slot arrays) with
// atomic stores. Shard storage is allocated on the first insert into that
// shard; an empty Table is a few dozen bytes.
//
// Removing an entry replaces its slot with a tombstone marker at once, so the
// table keeps no reference to the removed key or value.
type Table[K Key, V any] struct {
	kind    keyKind
	ordered bool
	shift   uint8 // 64 - log2(shards): shard = hash >> shift
	nshards int32

	hashFn   func(K) uint64 // tests only: forced collisions
	valBytes func(V) int64  // bytes a value holds beyond the entry; nil = 0
	// mk, if set, allocates the entry Set publishes for k=v, holding the
	// table's own copy of both (under the shard lock; node is set by the
	// table). KV puts the entry, the key and a small value in one allocation
	// so a hit touches one object. nil = &entry{key: k, val: v}.
	mk       func(k K, v V) *entry[K, V]
	overhead int64 // entryOverhead, cached

	pins atomic.Int32 // iterators holding the table; a pinned table is not pooled

	mu     sync.Mutex // guards lazy shard allocation and sealing
	sealed bool
	shards atomic.Pointer[atomic.Pointer[shard[K, V]]] // first of nshards
}

// NewTable returns an empty table. Only the Shards option is used. Nothing
// but the Table header is allocated until the first insert.
func NewTable[K Key, V any](opts *Options) *Table[K, V] {
	return newTable[K, V](opts.shards(), false)
}

// NewOrderedTable is like NewTable but also keeps each shard's keys in a skip
// list so Ascend and SeekGE visit keys in order. Inserting a new key costs a
// skip list insert (O(log n)); overwrites and lookups cost the same as in an
// unordered table.
func NewOrderedTable[K Key, V any](opts *Options) *Table[K, V] {
	return newTable[K, V](opts.shards(), true)
}

func newTable[K Key, V any](nshards int, ordered bool) *Table[K, V] {
	return &Table[K, V]{
		kind:     kindOf[K](),
		ordered:  ordered,
		shift:    uint8(64 - bits.TrailingZeros(uint(nshards))),
		nshards:  int32(nshards),
		overhead: entryOverhead[K, V](ordered),
	}
}

func (t *Table[K, V]) hash(k K) uint64 {
	if t.hashFn != nil {
		return t.hashFn(k)
	}
	return hashKey(t.kind, k)
}

func (t *Table[K, V]) shardPtr(first *atomic.Pointer[shard[K, V]], h uint64) *atomic.Pointer[shard[K, V]] {
	i := uintptr(h >> t.shift)
	return (*atomic.Pointer[shard[K, V]])(unsafe.Add(unsafe.Pointer(first), i*unsafe.Sizeof(*first)))
}

func (t *Table[K, V]) shardList() []atomic.Pointer[shard[K, V]] {
	first := t.shards.Load()
	if first == nil {
		return nil
	}
	return unsafe.Slice(first, int(t.nshards))
}

// lookup returns the live entry for k, or nil. Lock-free: atomic loads only.
func (t *Table[K, V]) lookup(k K) *entry[K, V] {
	first := t.shards.Load()
	if first == nil {
		return nil
	}
	return t.lookupHash(first, k, t.hash(k))
}

// lookupHash is lookup with k's hash already computed (an overlay probing
// two tables hashes once).
func (t *Table[K, V]) lookupHash(first *atomic.Pointer[shard[K, V]], k K, h uint64) *entry[K, V] {
	sh := t.shardPtr(first, h).Load()
	if sh == nil {
		return nil
	}
	arr := sh.slots.Load()
	if arr == nil {
		return nil
	}
	tomb := &arr.tomb
	for i := h & arr.mask; ; i = (i + 1) & arr.mask {
		s := &arr.s[i]
		e := s.ptr.Load()
		if e == nil {
			return nil
		}
		if s.hash.Load() == h && e != tomb && e.key == k {
			return e
		}
	}
}

// Get returns the value stored for k. It never blocks and never allocates.
func (t *Table[K, V]) Get(k K) (v V, ok bool) {
	if e := t.lookup(k); e != nil {
		return e.val, true
	}
	return v, false
}

// Set stores v for k and raises the table's MaxOp to op. It returns false,
// storing nothing, if the table has been sealed (frozen for a flush); the
// caller then writes to the table that replaced it.
func (t *Table[K, V]) Set(k K, v V, op uint64) bool {
	h := t.hash(k)
	sh := t.writeShard(h)
	if sh == nil {
		return false
	}
	sh.mu.Lock()
	if sh.sealed {
		sh.mu.Unlock()
		return false
	}
	t.setLocked(sh, h, k, v, false)
	if op > sh.maxOp.Load() {
		sh.maxOp.Store(op)
	}
	sh.mu.Unlock()
	return true
}

// Remove deletes k and reports whether it was present. The table drops its
// references to the key and value before Remove returns. Like Set, it returns
// false without effect on a sealed table.
func (t *Table[K, V]) Remove(k K) bool {
	first := t.shards.Load()
	if first == nil {
		return false
	}
	h := t.hash(k)
	sh := t.shardPtr(first, h).Load()
	if sh == nil {
		return false
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.sealed {
		return false
	}
	arr := sh.slots.Load()
	if arr == nil {
		return false
	}
	tomb := &arr.tomb
	for i := h & arr.mask; ; i = (i + 1) & arr.mask {
		e := arr.s[i].ptr.Load()
		if e == nil {
			return false
		}
		if arr.s[i].hash.Load() == h && e != tomb && e.key == k {
			if arr.s[(i+1)&arr.mask].ptr.Load() == nil {
				// End of a probe chain: no entry lies beyond, so this slot
				// and the tombstones right before it can become empty again
				// (a reader gets the same miss either way). This keeps
				// insert/remove churn from filling the array with tombs.
				arr.s[i].ptr.Store(nil)
				sh.used--
				for j := (i - 1) & arr.mask; arr.s[j].ptr.Load() == tomb; j = (j - 1) & arr.mask {
					arr.s[j].ptr.Store(nil)
					sh.used--
				}
			} else {
				arr.s[i].ptr.Store(tomb)
			}
			sh.live.Add(-1)
			sh.bytes.Add(-t.entryBytes(e.key, e.val))
			if e.node != nil {
				t.unlink(sh, e.node)
				e.node.ent.Store(nil)
			}
			return true
		}
	}
}

func (t *Table[K, V]) entryBytes(k K, v V) int64 {
	n := t.overhead + keyBytes(t.kind, k)
	if t.valBytes != nil {
		n += t.valBytes(v)
	}
	return n
}

// writeShard returns the shard for h, allocating it (and the shard array) on
// first use; nil if the table is sealed.
func (t *Table[K, V]) writeShard(h uint64) *shard[K, V] {
	first := t.shards.Load()
	if first != nil {
		if sh := t.shardPtr(first, h).Load(); sh != nil {
			return sh
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sealed {
		return nil
	}
	return t.allocShardLocked(h)
}

// allocShardLocked returns the shard for h, creating it if needed. t.mu held.
func (t *Table[K, V]) allocShardLocked(h uint64) *shard[K, V] {
	first := t.shards.Load()
	if first == nil {
		arr := make([]atomic.Pointer[shard[K, V]], t.nshards)
		first = &arr[0]
		t.shards.Store(first)
	}
	p := t.shardPtr(first, h)
	if sh := p.Load(); sh != nil {
		return sh
	}
	sh := &shard[K, V]{rng: h | 1, sealed: t.sealed}
	if t.ordered {
		sh.head = &node[K, V]{up: make([]atomic.Pointer[node[K, V]], maxLevel-1)}
	}
	p.Store(sh)
	return sh
}

// setLocked inserts or overwrites k in sh. With merging, an existing key is
// left alone and k, v (already owned by the older table) are not copied: it
// merges an older table under a newer one. sh.mu held (or the table sealed
// by the caller).
func (t *Table[K, V]) setLocked(sh *shard[K, V], h uint64, k K, v V, merging bool) {
	arr := sh.slots.Load()
	if arr == nil {
		arr = newSlots[K, V](minSlots)
		sh.slots.Store(arr)
	}
	tomb := &arr.tomb
	at := -1
	i := h & arr.mask
	for ; ; i = (i + 1) & arr.mask {
		e := arr.s[i].ptr.Load()
		if e == nil {
			break
		}
		if e == tomb {
			if at < 0 {
				at = int(i)
			}
			continue
		}
		if arr.s[i].hash.Load() == h && e.key == k {
			if merging {
				return
			}
			ne := t.newEntry(k, v)
			ne.node = e.node
			sh.bytes.Add(t.entryBytes(e.key, v) - t.entryBytes(e.key, e.val))
			arr.s[i].ptr.Store(ne)
			if ne.node != nil {
				ne.node.ent.Store(ne)
			}
			return
		}
	}
	// A new key: everything about the entry is set before it is published.
	// Merged entries are already owned by the older table and are shared.
	var ne *entry[K, V]
	if merging {
		ne = &entry[K, V]{key: k, val: v}
	} else {
		ne = t.newEntry(k, v)
	}
	k = ne.key
	if t.ordered {
		ne.node = &node[K, V]{key: k, pfx: keyPrefix(t.kind, k)}
		ne.node.ent.Store(ne)
	}
	if at >= 0 {
		arr.s[at].hash.Store(h)
		arr.s[at].ptr.Store(ne)
	} else {
		if (sh.used+1)*4 > len(arr.s)*3 {
			arr = t.grow(sh, arr)
			i = h & arr.mask
			for arr.s[i].ptr.Load() != nil {
				i = (i + 1) & arr.mask
			}
		}
		arr.s[i].hash.Store(h)
		arr.s[i].ptr.Store(ne)
		sh.used++
	}
	sh.live.Add(1)
	sh.bytes.Add(t.entryBytes(k, v))
	if ne.node != nil {
		t.link(sh, ne.node)
	}
}

// newEntry returns an unpublished entry for k=v owned by the table.
func (t *Table[K, V]) newEntry(k K, v V) *entry[K, V] {
	if t.mk != nil {
		return t.mk(k, v)
	}
	return &entry[K, V]{key: k, val: v}
}

// grow publishes a new slot array sized for twice the live entries (dropping
// tombstones). Readers still probing the old array see a consistent, if
// older, state; the old array is left to the garbage collector, never reused.
func (t *Table[K, V]) grow(sh *shard[K, V], old *slots[K, V]) *slots[K, V] {
	n := max(minSlots, 1<<bits.Len(uint((sh.live.Load()+1)*2-1)))
	arr := newSlots[K, V](n)
	otomb := &old.tomb
	for i := range old.s {
		e := old.s[i].ptr.Load()
		if e == nil || e == otomb {
			continue
		}
		h := old.s[i].hash.Load()
		j := h & arr.mask
		for arr.s[j].ptr.Load() != nil {
			j = (j + 1) & arr.mask
		}
		arr.s[j].hash.Store(h)
		arr.s[j].ptr.Store(e)
	}
	sh.used = int(sh.live.Load())
	sh.slots.Store(arr)
	return arr
}

// Len returns the number of entries.
func (t *Table[K, V]) Len() int {
	n := int64(0)
	for i, list := 0, t.shardList(); i < len(list); i++ {
		p := &list[i]
		if sh := p.Load(); sh != nil {
			n += sh.live.Load()
		}
	}
	return int(n)
}

// Bytes returns the memory charged for the entries: key and value bytes plus
// a fixed per-entry overhead (entry, slot share, index node). A cleared,
// recycled table reports 0 although it keeps its slot arrays; that capacity is
// bounded by Options.PoolBytes instead.
func (t *Table[K, V]) Bytes() int64 {
	n := int64(0)
	for i, list := 0, t.shardList(); i < len(list); i++ {
		p := &list[i]
		if sh := p.Load(); sh != nil {
			n += sh.bytes.Load()
		}
	}
	return n
}

// MaxOp returns the highest op number passed to Set since the table was
// created or cleared.
func (t *Table[K, V]) MaxOp() uint64 {
	m := uint64(0)
	for i, list := 0, t.shardList(); i < len(list); i++ {
		p := &list[i]
		if sh := p.Load(); sh != nil {
			m = max(m, sh.maxOp.Load())
		}
	}
	return m
}

// Range calls fn for each entry, in no particular order, until fn returns
// false. It sees entries present for the whole call; entries written or
// removed concurrently may or may not be seen.
func (t *Table[K, V]) Range(fn func(K, V) bool) {
	t.rangeEntries(func(e *entry[K, V]) bool { return fn(e.key, e.val) })
}

// Seal freezes the table: it waits for in-progress writers, makes every
// later Set and Remove return false, and runs fn (if not nil) while no writer
// can enter, so fn can publish the table that replaces this one. Readers are
// never blocked.
func (t *Table[K, V]) Seal(fn func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sealed = true
	var locked []*shard[K, V]
	for i, list := 0, t.shardList(); i < len(list); i++ {
		p := &list[i]
		if sh := p.Load(); sh != nil {
			sh.mu.Lock()
			sh.sealed = true
			locked = append(locked, sh)
		}
	}
	defer func() {
		for _, sh := range locked {
			sh.mu.Unlock()
		}
	}()
	if fn != nil {
		fn()
	}
}

// mergeUnderSealed inserts every entry of older whose key t lacks: t's newer
// values win. Called from Seal's fn (t sealed, its shard locks held; shards
// created here are sealed and need no lock as writers check sealed first).
func (t *Table[K, V]) mergeUnderSealed(older *Table[K, V]) {
	for i, list := 0, older.shardList(); i < len(list); i++ {
		p := &list[i]
		osh := p.Load()
		if osh == nil {
			continue
		}
		arr := osh.slots.Load()
		if arr == nil {
			continue
		}
		tomb := &arr.tomb
		for i := range arr.s {
			e := arr.s[i].ptr.Load()
			if e == nil || e == tomb {
				continue
			}
			h := arr.s[i].hash.Load()
			first := t.shards.Load()
			var sh *shard[K, V]
			if first != nil {
				sh = t.shardPtr(first, h).Load()
			}
			if sh == nil {
				sh = t.allocShardLocked(h)
			}
			t.setLocked(sh, h, e.key, e.val, true)
		}
		if m := osh.maxOp.Load(); m > 0 {
			// Any shard will do: MaxOp is the maximum over shards.
			for i, list := 0, t.shardList(); i < len(list); i++ {
				q := &list[i]
				if sh := q.Load(); sh != nil {
					if m > sh.maxOp.Load() {
						sh.maxOp.Store(m)
					}
					break
				}
			}
		}
	}
}

// clear empties a table that no reader depends on any more (its contents are
// durable elsewhere) so it can be reused: every slot, the skip list heads,
// counters and the sealed flag are reset; slot arrays keep their capacity.
// Readers still probing it see nils (a miss: they fall through to storage,
// which holds the data) or entries of the next generation (newer values).
//
// A cleared table stays sealed: a writer that loaded its pointer before it
// was frozen must not land a write in a pooled table. unseal reopens it when
// it becomes a new generation's active table.
func (t *Table[K, V]) clear() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sealed = true
	for i, list := 0, t.shardList(); i < len(list); i++ {
		p := &list[i]
		sh := p.Load()
		if sh == nil {
			continue
		}
		sh.mu.Lock()
		if arr := sh.slots.Load(); arr != nil {
			for i := range arr.s {
				arr.s[i].ptr.Store(nil)
			}
		}
		if sh.head != nil {
			for l := range maxLevel {
				sh.head.next(l).Store(nil)
			}
		}
		sh.used = 0
		sh.live.Store(0)
		sh.bytes.Store(0)
		sh.maxOp.Store(0)
		sh.sealed = true
		sh.mu.Unlock()
	}
}

// unseal reopens a cleared table for writes once it has been published as
// the active table (not before: see KV.Freeze).
func (t *Table[K, V]) unseal() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sealed = false
	for i, list := 0, t.shardList(); i < len(list); i++ {
		if sh := list[i].Load(); sh != nil {
			sh.mu.Lock()
			sh.sealed = false
			sh.mu.Unlock()
		}
	}
}

// capacityBytes is the memory a cleared table keeps: slot arrays and shards.
func (t *Table[K, V]) capacityBytes() int64 {
	n := int64(unsafe.Sizeof(*t))
	for i, list := 0, t.shardList(); i < len(list); i++ {
		p := &list[i]
		if sh := p.Load(); sh != nil {
			n += int64(unsafe.Sizeof(*sh)) + 8
			if arr := sh.slots.Load(); arr != nil {
				n += int64(len(arr.s)) * int64(unsafe.Sizeof(slot[K, V]{}))
			}
		}
	}
	return n
}
