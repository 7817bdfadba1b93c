package buffer

import "math/bits"

// The read tier keeps the tables of recently flushed generations readable
// after they are durable, so that a key read again soon after its flush
// (skewed access) is answered from memory instead of by a store Get. The
// tables are already built, sorted and immutable: retaining one costs no
// copy, only the memory it already holds. The engine gives the tier its
// own budget and evicts whole generations, oldest first (kvbuf's
// target.go); this file keeps the overlay's side.
//
// Tier rules (cited as "tier rule Tn" where the code keeps them):
//
//	T1. Retain publishes one view in which the generation's tables moved
//	    from the pending list to the head of the retained list. Reads probe
//	    pending tables before retained ones, in the same newest-first order,
//	    so a reader that loads either view finds the same change for every
//	    key.
//	T2. The retained tables are a suffix of the flushed generations: every
//	    generation is retained when it is released (in order), and eviction
//	    takes the oldest first. So for any key, a retained change is the
//	    newest flushed change of that key, or a newer retained or pending
//	    table holds a newer one: the tier never shadows a later flush, a
//	    later delete or a later range delete (each of which is in a newer
//	    table until it is evicted, and evicted only after the older ones).
//	T3. Evict publishes the view without the tables, then recycles the
//	    unpinned ones, as Release does: a reader that still loads the old
//	    view after its probes finished them before any clear began.
//	T4. Point reads (Get, GetAppend, GetMany, Has) probe the retained
//	    tables after every pending table and before the store, and
//	    re-validate the view after their probes like for pending tables.
//	    Iterators and snapshots do not read the tier: the store holds
//	    everything it holds (it is a suffix of what was flushed).
//	T5. A retained table's filter (KVGen.Filter) is built from the table
//	    once it is sealed and retained (no write can reach it), holds the
//	    hash of every key of its slot arrays, and is published with one
//	    atomic store; a probe that the filter rules out still checks the
//	    table's range tombstones. clear drops the filter: the engine builds
//	    one only while the generation is in its tier (under the tier's
//	    mutex, which Evict also takes), so a filter never outlives the
//	    table's life it describes. A filter that says "maybe" costs the
//	    full probe; one that says "no" is exact (no false negatives), so a
//	    read with or without it returns the same change. Every point
//	    read (Get, GetAppend, GetMany, Has) asks it before the table.
//	T6. Retain compacts a table made for more keys than it took (an active
//	    table is sized for the last frozen table's keys, so a small
//	    generation after a large one holds slot arrays for the large one):
//	    after the view that retains it is published, each shard whose slot
//	    array is less than half full gets one sized for its keys, filled
//	    privately from the old one's log and then published with one
//	    atomic store, as growth does (publication order 3). The table is
//	    sealed, so no change lands in either array: a reader still probing
//	    the old array finds every key with the head it has in the new one.
//	    The old array is left to the garbage collector, never cleared or
//	    pooled, so a reader of it never sees it change; the table's cached
//	    key order (the flush's, which holds the old arrays) is dropped, and
//	    a pinned snapshot that iterates the table later sorts the new ones.
//	    A generation that would still be over the tier's budget compacted
//	    is not copied (the tier evicts it at once): the engine asks
//	    TierBytes of all its keyspaces first. The tier counts the
//	    memory a retained table holds (heldBytes), slot arrays reused from
//	    the pool included, which the pending account does not count.

// Retain is Release that keeps the generation's tables readable as the
// newest generation of the overlay's read tier (tier rule T1), and returns
// the memory they hold (heldBytes): no longer pending (the account is
// debited), held by the tier until Evict. With compact, tables made for
// many more keys than they hold are compacted first (tier rule T6), so the
// bytes returned may be fewer than the generation held while pending; the
// engine asks for it unless TierBytes says the tier would evict the
// generation at once anyway. Generations must be released or retained in
// order, and every one retained while the tier is in use (tier rule T2).
func (g *KVGen) Retain(compact bool) int64 { return g.kv.retain(g.g, compact) }

func (kv *KV) retain(g uint64, compact bool) int64 {
	gone, _ := kv.cutGen(g, true)
	var n int64
	for _, t := range gone {
		if compact {
			t.compact()
		}
		n += t.heldBytes()
	}
	return n
}

// TierBytes returns the memory the generation's tables hold (what Retain
// without compaction returns) and the memory they would hold compacted
// (tier rule T6: what Retain(true) returns). Call it before Retain.
func (g *KVGen) TierBytes() (held, compacted int64) {
	for _, t := range g.tables {
		h, c := t.tierBytes()
		held += h
		compacted += c
	}
	return held, compacted
}

// heldBytes is the memory t holds (see tierBytes).
func (t *table) heldBytes() int64 {
	held, _ := t.tierBytes()
	return held
}

// tierBytes returns the memory t holds, held: its bytes, and the slot
// arrays it reused from the pool, which bytes no longer counts (clear) but
// which the read tier holds as much as any other; and compacted, what it
// would hold after compact.
func (t *table) tierBytes() (held, compacted int64) {
	held = t.bytes()
	compacted = held
	if ss := t.shards.Load(); ss != nil {
		for _, sh := range ss.s {
			sh.mu.Lock()
			if a := sh.arr.Load(); a != nil {
				if a.cleared {
					held += a.bytes()
					compacted += a.bytes()
				}
				if compactable(a) {
					compacted += slotArrayBytes(groupsFor(int(a.n))) - a.bytes()
				}
			}
			sh.mu.Unlock()
		}
	}
	return held, compacted
}

// compactable reports whether a retained table's array a is less than
// half full, so that compact replaces it (a's shard mutex held).
func compactable(a *slotArray) bool { return uint64(2*groupsFor(int(a.n))) <= a.groups }

// compact gives each shard of a retained table whose slot array is less
// than half full an array sized for its keys (tier rule T6), and drops the
// table's cached key order. t must be sealed and retained.
func (t *table) compact() {
	// ordMu throughout (taken before the shard mutexes, as fullOrder
	// does): an order built while the arrays are replaced would hold the
	// old ones, and the memory with them, until the table is recycled.
	t.ordMu.Lock()
	defer t.ordMu.Unlock()
	if ss := t.shards.Load(); ss != nil {
		for _, sh := range ss.s {
			sh.mu.Lock()
			if old := sh.arr.Load(); old != nil && compactable(old) {
				arr := newSlotArray(groupsFor(int(old.n)))
				for _, i := range old.log[:old.n] {
					sw := old.load(int(i))
					arr.placePrivate(t.slotHash(&sw, sh), sw)
				}
				sh.arr.Store(arr) // tier rule T6, publication order 3: filled privately, then published
				sh.bytes.Add(arr.bytes() - old.chargedBytes())
			}
			sh.mu.Unlock()
		}
	}
	t.ord.Store(nil) // it holds the slot arrays it was sorted from
}

// evict drops the retained tables of generations up to g from the read
// tier (tier rule T3) and returns the bytes they held. Evicting a
// generation the overlay does not retain is a no-op.
func (kv *KV) evict(g uint64) int64 {
	kv.vmu.Lock()
	v := kv.view.Load()
	cut := len(v.retained)
	for cut > 0 && v.retained[cut-1].gen <= g {
		cut--
	}
	if cut == len(v.retained) {
		kv.vmu.Unlock()
		return 0
	}
	gone := v.retained[cut:]
	// Publish first, clear after (publication order 6, as Release).
	kv.view.Store(&kvView{active: v.active, sealed: v.sealed, retained: v.retained[:cut:cut]})
	kv.vmu.Unlock()
	var n int64
	for _, t := range gone {
		n += t.bytes()
		kv.pool.put(t)
	}
	return n
}

// Evict is KV.evict of the generation: it drops the generation's tables
// (and any older ones) from the overlay's read tier.
func (g *KVGen) Evict() int64 { return g.kv.evict(g.g) }

// tierFilterBitsPerKey sizes a retained table's filter: with 4 bits set
// per key in one 64-bit word, 16 bits per key let about 1 probe in 200 of
// an absent key through (BenchmarkMissRead measured the filter's gain on
// a miss: doc/design.md, "The read tier").
const tierFilterBitsPerKey = 16

// tierFilter is a blocked Bloom filter over the hashes of a retained
// table's keys: each key sets 4 bits of one 64-bit word, so a probe is one
// load (the words of a 64k-key generation, 128 KiB, stay in the CPU's
// cache where the table's 600 KiB of control words and megabytes of slots
// do not). A miss in the buffer probes every retained table; this keeps
// that probe from costing a cache miss per generation.
type tierFilter struct {
	words []uint64
	shift uint // 64 - log2(len(words)): the word is the top bits of the remixed hash
}

// tierFilterMix spreads the key hash over the filter's bits (the low bits
// of h also pick the table's control tag and group; the filter uses a
// product instead, so its positions are independent of the table's).
const tierFilterMix = 0x9e3779b97f4a7c15

func newTierFilter(keys int64) *tierFilter {
	n := uint64(1)
	for n*64 < uint64(keys)*tierFilterBitsPerKey {
		n <<= 1
	}
	return &tierFilter{words: make([]uint64, n), shift: uint(64 - bits.Len64(n-1))}
}

// at returns the word index and bit mask of hash h.
func (f *tierFilter) at(h uint64) (uint64, uint64) {
	x := h * tierFilterMix
	return x >> f.shift, 1<<(x&63) | 1<<(x>>6&63) | 1<<(x>>12&63) | 1<<(x>>18&63)
}

func (f *tierFilter) add(h uint64) {
	w, m := f.at(h)
	f.words[w] |= m
}

// mayContain reports whether a key with hash h may be in the table: false
// only if it is not.
func (f *tierFilter) mayContain(h uint64) bool {
	w, m := f.at(h)
	return f.words[w]&m == m
}

func (f *tierFilter) bytes() int64 { return int64(len(f.words)) * 8 }

// buildFilter builds t's tier filter from its slot arrays' logs (every key
// the table holds) and publishes it (tier rule T5); it returns the
// filter's bytes. t must be sealed: no write can add a key.
func (t *table) buildFilter() int64 {
	ss := t.shards.Load()
	var n int64
	if ss != nil {
		for _, sh := range ss.s {
			if a := sh.arr.Load(); a != nil {
				n += a.lockedCount(sh)
			}
		}
	}
	f := newTierFilter(n)
	if ss != nil {
		for _, sh := range ss.s {
			sh.mu.Lock()
			if a := sh.arr.Load(); a != nil {
				for _, i := range a.log[:a.n] {
					sw := a.load(int(i))
					f.add(t.slotHash(&sw, sh))
				}
			}
			sh.mu.Unlock()
		}
	}
	t.filter.Store(f) // tier rule T5: built, then published
	return f.bytes()
}

// tierGetAppend is getAppend for a retained table: the filter first (tier
// rule T5), the table only if the key may be in it.
func (t *table) tierGetAppend(dst []byte, k string, h, kw, vis uint64) ([]byte, uint8) {
	if f := t.filter.Load(); f != nil && !f.mayContain(h) {
		if t.rdel.Load() == nil {
			return dst, probeAbsent
		}
		return t.hiddenAppend(dst, len(dst), k, 0, vis, probeAbsent)
	}
	return t.getAppend(dst, k, h, kw, vis)
}

// tierPresence is what a retained table knows of pk at visible number vis
// (probeAbsent, probeValue, probeDeleted or probeRetry), for Has: the
// filter first (tier rule T5), then the table only if the key may be in
// it.
func (t *table) tierPresence(pk *probeKey, vis uint64) uint8 {
	if f := t.filter.Load(); f != nil && !f.mayContain(pk.h) {
		if sp := t.rdel.Load(); sp != nil && sp.hides(pk.k, 0, vis) {
			return probeDeleted
		}
		return probeAbsent
	}
	return t.get(pk, vis).kind
}

// Filter builds a filter of the generation's retained tables' keys, which
// lets a read of a key none of them holds skip their probes (tier rule
// T5), and returns the bytes the filters hold (the tier's memory). Call it
// only between Retain and Evict, never concurrently with Evict: the
// filter of a table evicted and recycled would describe the wrong keys.
func (g *KVGen) Filter() int64 {
	var n int64
	for _, t := range g.tables {
		n += t.buildFilter()
	}
	return n
}
