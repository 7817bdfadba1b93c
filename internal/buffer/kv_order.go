package buffer

import (
	"math/bits"
	"slices"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/kvbuf/kvbuf/internal/invariants"
)

// order is a table's key order, produced off the write path. Writers only append each new
// key's slot to its slot array's log; an order sorts the keys of the logs
// when a reader needs it (an iterator, or the flush of a sealed table) and
// is cached in the table, immutable, for every later reader:
//
//   - A sealed table never changes: its order is built once (the first
//     iterator or the flush, whichever comes first) and reused by the flush
//     and every iterator.
//   - The active table's order covers a prefix of each log. An iterator
//     sorts the tail the order does not cover; a short tail stays private
//     to the iterator, a longer one becomes a new sorted run of the cached
//     order, merged with the previous runs whenever the last is
//     at least half as long as the one before (so a table of n keys has
//     about log2(n/minPublishedRun) runs, and each key is merged that many
//     times). The design the runs were measured against, sorting the
//     whole table again after any new key, is kept in kv_order_resort_test.go
//     (doc/design.md, "KV tables").
//   - A slot array that grows moves every key: an order built on the old
//     arrays no longer resolves, and the next reader sorts the new arrays'
//     logs (which list every key, in array order).
//
// Publication order 4 (protocol.go): a writer
// logs a new key (log entry, then log count) under the shard mutex before
// it releases the mutex, and its change is published after that (order
// 5); an iterator pins its tables and then loads its visible sequence
// number (order 7), then loads the order and reads the log counts under
// the shard mutexes. Every key with a change the iterator may see was
// logged before its change was published, so the iterator's order and
// tail hold it. An order is published whole with one atomic store, after
// it is sorted: a reader never sees a partly sorted order.
type order struct {
	keyIndex
	cover []int64     // per shard: log entries covered
	runs  [][]sortEnt // sorted runs, oldest (and longest) first
	n     int         // entries in runs
}

// keyIndex resolves the references of sorted entries: the slot arrays (and
// their shards, for long keys) they were taken from.
type keyIndex struct {
	arrs   []*slotArray
	shards []*shard
}

// sortEnt is one key of an order: its first 8 bytes (big-endian, so that
// comparing prefixes compares keys up to there) and its slot, shard <<
// entShardShift | slot index.
type sortEnt struct{ prefix, ref uint64 }

const (
	entShardShift = 48
	entSlotMask   = 1<<entShardShift - 1
	// minPublishedRun is the shortest tail an iterator sorts into the
	// cached order rather than for itself.
	minPublishedRun = 64
	// radixMin: shorter lists are sorted by comparison.
	radixMin = 256
)

func (x *keyIndex) slot(ref uint64) (*slotArray, *shard, int) {
	s := ref >> entShardShift
	return x.arrs[s], x.shards[s], int(ref & entSlotMask)
}

// words returns the slot words of ref.
func (x *keyIndex) words(ref uint64) (slotWords, *shard) {
	a, sh, i := x.slot(ref)
	return a.load(i), sh
}

// touch loads the head word of ref's slot (its cache line, for a later
// read).
func (x *keyIndex) touch(ref uint64) {
	a, _, i := x.slot(ref)
	atomic.LoadUint64(&a.s[i*slotWordsN])
}

// key returns the key of ref. The bytes are immutable while the table is
// pinned (or sealed and in a view).
func (x *keyIndex) key(ref uint64) string {
	a, sh, i := x.slot(ref)
	w0 := atomic.LoadUint64(&a.s[i*slotWordsN])
	if w0>>modeShift == modeLong {
		w1 := atomic.LoadUint64(&a.s[i*slotWordsN+1])
		k, _ := sh.dir.Load().keyBytes(w1&refMask, int(w1>>longKeyLen))
		return k
	}
	return unsafe.String((*byte)(unsafe.Pointer(&a.s[i*slotWordsN+1])), int(w0>>klenShift&lenMask))
}

// entry returns the sort entry of slot i of shard s.
func (x *keyIndex) entry(s, i int) sortEnt {
	a := x.arrs[s]
	p := a.slot(i)
	w0 := atomic.LoadUint64(&p[0])
	var prefix uint64
	if w0>>modeShift == modeLong {
		prefix = atomic.LoadUint64(&p[2])
	} else {
		// A slot key's first word is zero-padded past the key.
		prefix = bswap(atomic.LoadUint64(&p[1]))
	}
	return sortEnt{prefix: prefix, ref: uint64(s)<<entShardShift | uint64(i)}
}

func bswap(x uint64) uint64 {
	x = x>>32 | x<<32
	x = x>>16&0x0000ffff0000ffff | x<<16&0xffff0000ffff0000
	return x>>8&0x00ff00ff00ff00ff | x<<8&0xff00ff00ff00ff00
}

// cmp orders two entries by key.
func (x *keyIndex) cmp(a, b sortEnt) int {
	switch {
	case a.prefix < b.prefix:
		return -1
	case a.prefix > b.prefix:
		return 1
	}
	return strings.Compare(x.key(a.ref), x.key(b.ref))
}

// current reports whether o was built on the slot arrays of ss.
func (o *order) current(ss *shardSet) bool {
	if len(o.arrs) != len(ss.s) {
		return false
	}
	for i, sh := range ss.s {
		if sh.arr.Load() != o.arrs[i] {
			return false
		}
	}
	return true
}

// tail returns the unsorted entries of the keys logged after o's cover.
func (o *order) tail() []sortEnt {
	var out []sortEnt
	for s, a := range o.arrs {
		if a == nil {
			continue
		}
		for j, n := o.cover[s], a.lockedCount(o.shards[s]); j < n; j++ {
			out = append(out, o.entry(s, int(a.log[j])))
		}
	}
	return out
}

// orderFor returns an order of t and a sorted tail of the keys it does not
// cover (nil if none) that together hold every key t held when orderFor
// was called. The order is t's cached one, extended or rebuilt first if
// needed (see the comment at the top of this file).
func (t *table) orderFor() (*order, []sortEnt) {
	ss := t.shards.Load()
	if ss == nil {
		return nil, nil
	}
	if o := t.ord.Load(); o != nil && o.current(ss) {
		tail := o.tail()
		if len(tail) == 0 {
			return o, nil
		}
		if len(tail) < minPublishedRun {
			o.sort(tail, nil)
			return o, tail
		}
	}
	t.ordMu.Lock()
	defer t.ordMu.Unlock()
	if o := t.ord.Load(); o != nil && o.current(ss) {
		tail := o.tail()
		if len(tail) == 0 {
			return o, nil // built meanwhile
		}
		next := o.extend(tail)
		t.ord.Store(next)
		return next, nil
	}
	next := t.fullOrder(ss)
	t.ord.Store(next)
	return next, nil
}

// extend returns a new order holding o's runs and tail (unsorted entries of
// keys logged after o's cover) as one more run, merging the last runs while
// the last is at least half as long as the one before.
func (o *order) extend(tail []sortEnt) *order {
	var tmp []sortEnt
	if len(tail) >= radixMin {
		tmp = make([]sortEnt, len(tail))
	}
	tail = o.sort(tail, tmp)
	next := &order{keyIndex: o.keyIndex, cover: o.coverOf(tail), n: o.n + len(tail)}
	next.runs = append(slices.Clip(o.runs), tail)
	for r := len(next.runs); r >= 2 && len(next.runs[r-2]) <= 2*len(next.runs[r-1]); r-- {
		merged := next.merge(next.runs[r-2], next.runs[r-1])
		next.runs = append(next.runs[:r-2], merged)
	}
	return next
}

// sortedKeys returns the keys of a sealed table in order, as one run: the
// flush's order. It merges the cached order's runs into one and caches
// that.
func (t *table) sortedKeys() (*keyIndex, []sortEnt) {
	o, tail := t.orderFor()
	if o == nil {
		return nil, nil
	}
	if len(o.runs) <= 1 && tail == nil {
		if len(o.runs) == 0 {
			return &o.keyIndex, nil
		}
		return &o.keyIndex, o.runs[0]
	}
	t.ordMu.Lock()
	defer t.ordMu.Unlock()
	if cur := t.ord.Load(); cur != o {
		o = cur // compacted meanwhile (a sealed table's order changes once)
		if len(o.runs) == 1 && len(o.tail()) == 0 {
			return &o.keyIndex, o.runs[0]
		}
	}
	if tail = o.tail(); len(tail) > 0 {
		o = o.extend(tail)
	}
	if len(o.runs) == 0 {
		return &o.keyIndex, nil
	}
	all := o.runs[0]
	for _, r := range o.runs[1:] {
		all = o.merge(all, r)
	}
	next := &order{keyIndex: o.keyIndex, cover: o.cover, runs: [][]sortEnt{all}, n: len(all)}
	t.ord.Store(next)
	return &next.keyIndex, all
}

// coverOf returns o's cover extended by the log entries of tail (which are
// every entry logged after o's cover, up to some count per shard).
func (o *order) coverOf(tail []sortEnt) []int64 {
	c := slices.Clone(o.cover)
	for _, e := range tail {
		c[e.ref>>entShardShift]++
	}
	return c
}

// fullOrder sorts every key logged in the current slot arrays of ss.
//
// The entries of a sealed shard (every key logged, none to come) are
// taken in slot order, a sequential scan of its array, rather than in
// log order, where each slot is a cache miss of its own: the sort of a
// flush's generation (BenchmarkFlushSort). Both list the same slots, and
// the sort's result does not depend on the order it is given. An
// active shard's slots are taken from its log: a key placed after the
// count was read is in the array but not in the order's cover.
func (t *table) fullOrder(ss *shardSet) *order {
	o := &order{keyIndex: keyIndex{arrs: make([]*slotArray, len(ss.s)), shards: ss.s}, cover: make([]int64, len(ss.s))}
	total := int64(0)
	sealed := make([]bool, len(ss.s))
	for s, sh := range ss.s {
		if a := sh.arr.Load(); a != nil {
			o.arrs[s] = a
			sh.mu.Lock()
			o.cover[s], sealed[s] = int64(a.n), sh.sealed && !t.sortFromLog
			sh.mu.Unlock()
			total += o.cover[s]
		}
	}
	ents := make([]sortEnt, 0, total)
	for s, a := range o.arrs {
		if a == nil {
			continue
		}
		if sealed[s] {
			before := len(ents)
			ents = o.slotOrderEntries(ents, s, a)
			if int64(len(ents)-before) == o.cover[s] {
				continue
			}
			// Not one slot per logged key: cannot be in a sealed
			// shard; the log is the reference.
			invariants.Check(false, "buffer: sealed shard %d has %d full slots, %d logged", s, len(ents)-before, o.cover[s])
			ents = ents[:before]
		}
		for _, i := range a.log[:o.cover[s]] {
			ents = append(ents, o.entry(s, int(i)))
		}
	}
	if len(ents) > 0 {
		ents = o.sort(ents, make([]sortEnt, len(ents)))
		o.runs = [][]sortEnt{ents}
	}
	o.n = len(ents)
	return o
}

// slotOrderEntries appends the sort entries of every full slot of a, the
// array of shard s, in slot order.
func (x *keyIndex) slotOrderEntries(ents []sortEnt, s int, a *slotArray) []sortEnt {
	for g := range a.ctrl {
		c := atomic.LoadUint64(&a.ctrl[g])
		for m := ^matchEmpty(c) & ctrlMSB; m != 0; m &= m - 1 {
			ents = append(ents, x.entry(s, g*groupSlots+bits.TrailingZeros64(m)/8))
		}
	}
	return ents
}

// sort sorts ents by key and returns the sorted slice (ents or tmp, which,
// if not nil, must be as long as ents).
func (x *keyIndex) sort(ents, tmp []sortEnt) []sortEnt {
	if len(ents) < radixMin || tmp == nil {
		slices.SortFunc(ents, x.cmp)
		return ents
	}
	ents = radixSort(ents, tmp)
	// Keys sharing their first 8 bytes are in arrival order: sort each
	// such group by whole key.
	for i := 0; i < len(ents); {
		j := i + 1
		for j < len(ents) && ents[j].prefix == ents[i].prefix {
			j++
		}
		if j-i > 1 {
			slices.SortFunc(ents[i:j], x.cmp)
		}
		i = j
	}
	if invariants.Enabled {
		invariants.Check(slices.IsSortedFunc(ents, x.cmp), "buffer: key order not sorted")
	}
	return ents
}

// radixSort sorts a by prefix (least significant byte first, skipping the
// bytes every prefix shares) and returns the sorted slice: a or tmp.
func radixSort(a, tmp []sortEnt) []sortEnt {
	var cnt [8][256]int
	for _, e := range a {
		p := e.prefix
		for b := range 8 {
			cnt[b][byte(p>>(8*b))]++
		}
	}
	src, dst := a, tmp
	for b := range 8 {
		c := &cnt[b]
		if c[byte(a[0].prefix>>(8*b))] == len(a) {
			continue // every prefix has this byte
		}
		sum := 0
		for i, n := range c {
			c[i] = sum
			sum += n
		}
		for _, e := range src {
			d := byte(e.prefix >> (8 * b))
			dst[c[d]] = e
			c[d]++
		}
		src, dst = dst, src
	}
	return src
}

// merge merges two sorted runs into a new one.
func (x *keyIndex) merge(a, b []sortEnt) []sortEnt {
	out := make([]sortEnt, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if x.cmp(a[i], b[j]) <= 0 {
			out = append(out, a[i])
			i++
		} else {
			out = append(out, b[j])
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

// seekGE returns the index of the first entry of run with key >= k.
func (x *keyIndex) seekGE(run []sortEnt, k string) int {
	p := keyPrefix(k)
	i, _ := slices.BinarySearchFunc(run, k, func(e sortEnt, k string) int {
		switch {
		case e.prefix < p:
			return -1
		case e.prefix > p:
			return 1
		}
		return strings.Compare(x.key(e.ref), k)
	})
	return i
}
