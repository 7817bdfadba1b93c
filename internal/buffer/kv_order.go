package buffer

import (
	"math/bits"
	"runtime"
	"slices"
	"strings"
	"sync"
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
//   - A slot array that grows (or that the read tier compacts, tier rule
//     T6) moves every key: an order built on the old arrays no longer
//     resolves, and the next reader sorts the new arrays' logs (which list
//     every key, in array order).
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
	return t.orderForN(1)
}

// orderForN is orderFor, a full sort (if one is needed) run by up to
// workers goroutines (parallelSort).
func (t *table) orderForN(workers int) (*order, []sortEnt) {
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
	next := t.fullOrder(ss, workers)
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
func (t *table) sortedKeys() (*keyIndex, []sortEnt) { return t.sortedKeysN(1) }

// sortedKeysN is sortedKeys, a full sort (the first order of a sealed
// table) run by up to workers goroutines: the flush's (ingestTable).
func (t *table) sortedKeysN(workers int) (*keyIndex, []sortEnt) {
	o, tail := t.orderForN(workers)
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
	if cur := t.ord.Load(); cur != nil && cur != o {
		o = cur // compacted meanwhile (a sealed table's order changes once; nil once retained: tier rule T6)
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

// fullOrder sorts every key logged in the current slot arrays of ss, with
// up to workers goroutines (gathering the entries shard by shard, then
// parallelSort) if there are at least parallelSortMin keys per worker.
//
// The entries of a sealed shard (every key logged, none to come) are
// taken in slot order, a sequential scan of its array, rather than in
// log order, where each slot is a cache miss of its own: the sort of a
// flush's generation (BenchmarkFlushSort). Both list the same slots, and
// the sort's result does not depend on the order it is given. An
// active shard's slots are taken from its log: a key placed after the
// count was read is in the array but not in the order's cover.
func (t *table) fullOrder(ss *shardSet, workers int) *order {
	o := &order{keyIndex: keyIndex{arrs: make([]*slotArray, len(ss.s)), shards: ss.s}, cover: make([]int64, len(ss.s))}
	total := int64(0)
	sealed := make([]bool, len(ss.s))
	off := make([]int64, len(ss.s)+1) // shard s's entries: ents[off[s]:off[s+1]]
	for s, sh := range ss.s {
		if a := sh.arr.Load(); a != nil {
			o.arrs[s] = a
			sh.mu.Lock()
			o.cover[s], sealed[s] = int64(a.n), sh.sealed && !t.sortFromLog
			sh.mu.Unlock()
			total += o.cover[s]
		}
		off[s+1] = total
	}
	workers = min(workers, int(total/parallelSortMin))
	ents := make([]sortEnt, total)
	gather := func(s int) {
		a := o.arrs[s]
		if a == nil {
			return
		}
		part := ents[off[s]:off[s]:off[s+1]]
		if sealed[s] {
			if part = o.slotOrderEntries(part, s, a); int64(len(part)) == o.cover[s] {
				return
			}
			// Not one slot per logged key: cannot be in a sealed
			// shard; the log is the reference. (More slots than
			// that: append moved part elsewhere, ents is intact.)
			invariants.Check(false, "buffer: sealed shard %d has %d full slots, %d logged", s, len(part), o.cover[s])
			part = ents[off[s]:off[s]:off[s+1]]
		}
		for _, i := range a.log[:o.cover[s]] {
			part = append(part, o.entry(s, int(i)))
		}
	}
	if workers < 2 {
		for s := range o.arrs {
			gather(s)
		}
	} else {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for s := w; s < len(o.arrs); s += workers {
					gather(s)
				}
			})
		}
		wg.Wait()
	}
	if len(ents) > 0 {
		ents = o.parallelSort(ents, make([]sortEnt, len(ents)), workers)
		o.runs = [][]sortEnt{ents}
	}
	o.n = len(ents)
	return o
}

// yieldEvery is how many entries the flush's sort goroutines move between
// two yields of the processor (runtime.Gosched: a reader waiting for one
// runs first; the flusher's pacer serves the writer only): about 50µs.
const yieldEvery = 1 << 14

// parallelSortMin is the fewest keys per goroutine fullOrder sorts with:
// below it a goroutine costs more than it saves.
const parallelSortMin = 1 << 15

// parallelSort sorts ents by key with up to workers goroutines and returns
// the sorted slice (ents or tmp, as long as ents). Every prefix shares
// its bytes above some byte b (the highest that differs between two
// prefixes); the entries are cut by the value of byte b into up to
// workers groups of about equal size, each group's entries are moved
// into one range of tmp (the groups in key order: every prefix of a
// group is below every prefix of the next, and equal prefixes share a
// group), each range by the goroutine that counted them, and each group
// is sorted by its own goroutine (sort). Every goroutine yields the
// processor every yieldEvery entries. With one worker, or no byte that
// differs (all prefixes equal), it is sort. The caller publishes the
// result only after parallelSort returns, that is after every goroutine
// finished (wg.Wait): publication order 4 (protocol.go), an order is
// published whole, after it is sorted.
func (x *keyIndex) parallelSort(ents, tmp []sortEnt, workers int) []sortEnt {
	if workers < 2 || len(ents) < 2*radixMin {
		return x.sort(ents, tmp)
	}
	workers = min(workers, 256) // groups are ranges of one byte's values
	n := len(ents)
	chunk := func(w int) []sortEnt { return ents[n*w/workers : n*(w+1)/workers] }
	// Each worker counts the bytes of its chunk's prefixes.
	cnts := make([][8][256]int, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			c := &cnts[w]
			for i, e := range chunk(w) {
				p := e.prefix
				for b := range 8 {
					c[b][byte(p>>(8*b))]++
				}
				if i%yieldEvery == yieldEvery-1 {
					runtime.Gosched()
				}
			}
		})
	}
	wg.Wait()
	b := 7
	for ; b >= 0; b-- {
		v := byte(ents[0].prefix >> (8 * b))
		all := 0
		for w := range workers {
			all += cnts[w][b][v]
		}
		if all != n {
			break
		}
	}
	if b < 0 {
		return x.sort(ents, tmp) // one prefix: a comparison sort
	}
	// Groups: byte values [lo[g], lo[g+1]) with about n/workers entries.
	var total [256]int
	for w := range workers {
		for v, c := range cnts[w][b] {
			total[v] += c
		}
	}
	group := make([]uint8, 256) // byte value -> group
	bounds := []int{0}          // group g: tmp[bounds[g]:bounds[g+1]]
	sum := 0
	for v := range 256 {
		group[v] = uint8(len(bounds) - 1)
		sum += total[v]
		if sum >= n*len(bounds)/workers && len(bounds) < workers && sum < n {
			bounds = append(bounds, sum)
		}
	}
	bounds = append(bounds, n)
	groups := len(bounds) - 1
	// next[w][g]: where worker w moves its next entry of group g.
	next := make([][]int, workers)
	for w := range workers {
		next[w] = make([]int, groups)
	}
	for g := range groups {
		at := bounds[g]
		for w := range workers {
			next[w][g] = at
			for v, c := range cnts[w][b] {
				if int(group[v]) == g {
					at += c
				}
			}
		}
	}
	for w := range workers {
		wg.Go(func() {
			nx := next[w]
			for i, e := range chunk(w) {
				g := group[byte(e.prefix>>(8*b))]
				tmp[nx[g]] = e
				nx[g]++
				if i%yieldEvery == yieldEvery-1 {
					runtime.Gosched()
				}
			}
		})
	}
	wg.Wait()
	// Sort each group (in tmp, ents as its scratch); a group whose sort
	// ends in ents is copied back.
	for g := range groups {
		wg.Go(func() {
			lo, hi := bounds[g], bounds[g+1]
			if hi-lo < 2 {
				return
			}
			if r := x.sortYield(tmp[lo:hi], ents[lo:hi], runtime.Gosched); &r[0] != &tmp[lo] {
				copy(tmp[lo:hi], r)
			}
		})
	}
	wg.Wait()
	if invariants.Enabled {
		invariants.Check(slices.IsSortedFunc(tmp, x.cmp), "buffer: key order not sorted")
	}
	return tmp
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
func (x *keyIndex) sort(ents, tmp []sortEnt) []sortEnt { return x.sortYield(ents, tmp, nil) }

// sortYield is sort calling yield (if not nil) every yieldEvery entries
// of the radix sort's passes.
func (x *keyIndex) sortYield(ents, tmp []sortEnt, yield func()) []sortEnt {
	if len(ents) < radixMin || tmp == nil {
		slices.SortFunc(ents, x.cmp)
		return ents
	}
	ents = radixSort(ents, tmp, yield)
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
func radixSort(a, tmp []sortEnt, yield func()) []sortEnt {
	var cnt [8][256]int
	for lo := 0; lo < len(a); lo += yieldEvery {
		for _, e := range a[lo:min(lo+yieldEvery, len(a))] {
			p := e.prefix
			for b := range 8 {
				cnt[b][byte(p>>(8*b))]++
			}
		}
		if yield != nil {
			yield()
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
		for lo := 0; lo < len(src); lo += yieldEvery {
			for _, e := range src[lo:min(lo+yieldEvery, len(src))] {
				d := byte(e.prefix >> (8 * b))
				dst[c[d]] = e
				c[d]++
			}
			if yield != nil {
				yield()
			}
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
