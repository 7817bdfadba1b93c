package buffer

import (
	"fmt"
	"unsafe"

	"github.com/kvbuf/kvbuf/internal/invariants"
	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/storage"
)

// cursor is one sorted source of a merge: a sorted run of a table's keys, or
// the store.
type cursor struct {
	x    *keyIndex     // resolves the run's entries; nil for the store cursor
	run  []sortEnt     // the table's run
	i    int           // current entry of run
	st   *storage.Iter // the store cursor's iterator
	prio int           // table index, newest 0; the store is len(tables)
	key  string        // current key (a store key is valid until the store moves)
	ok   bool
}

func (c *cursor) setRun(i int) {
	c.i = i
	c.ok = i >= 0 && i < len(c.run)
	if c.ok {
		c.key = c.x.key(c.run[i].ref)
		// Keys in order are slots in no order: touch the slot a few keys
		// ahead so that its cache miss overlaps this key's work.
		if j := i + iterAhead; j < len(c.run) {
			c.x.touch(c.run[j].ref)
		}
	}
}

// iterAhead is how many keys ahead of its position a run cursor loads the
// slot of the key it will reach.
const iterAhead = 8

func (c *cursor) setStore(ok bool) {
	c.ok = ok
	if ok {
		// The store iterator's own copy (valid until it moves). nil: the
		// store closed the iterator since it moved (Store.Close); the
		// cursor ends, and Error reports it.
		k := c.st.Key()
		c.ok = k != nil
		c.key = unsafe.String(unsafe.SliceData(k), len(k))
	}
}

func (c *cursor) first() {
	if c.x != nil {
		c.setRun(0)
	} else {
		c.setStore(c.st.First())
	}
}

func (c *cursor) last() {
	if c.x != nil {
		c.setRun(len(c.run) - 1)
	} else {
		c.setStore(c.st.Last())
	}
}

func (c *cursor) seekGE(k string) {
	if c.x != nil {
		c.setRun(c.x.seekGE(c.run, k))
	} else {
		c.setStore(c.st.SeekGE(unsafe.Slice(unsafe.StringData(k), len(k))))
	}
}

func (c *cursor) seekLT(k string) {
	if c.x != nil {
		c.setRun(c.x.seekGE(c.run, k) - 1)
	} else {
		c.setStore(c.st.SeekLT(unsafe.Slice(unsafe.StringData(k), len(k))))
	}
}

func (c *cursor) next() {
	if c.x != nil {
		c.setRun(c.i + 1)
	} else {
		c.setStore(c.st.Next())
	}
}

func (c *cursor) prev() {
	if c.x != nil {
		c.setRun(c.i - 1)
	} else {
		c.setStore(c.st.Prev())
	}
}

// Iter iterates over a keyspace in key order, forwards or backwards, merging
// pending changes (newest wins) with the store; tombstones and range
// tombstones hide keys. It is not safe for concurrent use; Close it when
// done.
//
// An iterator reads the keyspace as of NewIter: the pending changes
// published by then (at the visible sequence number it loads) over the
// store as it was then (a pebble iterator). Writes, batches and flushes
// after NewIter change nothing it returns: it ignores later changes, and
// the tables it reads stay intact (pinned) until Close. It never returns
// part of a batch. An iterator over a snapshot sees exactly the snapshot.
type Iter struct {
	tables []*table // newest first; pinned by this iterator
	vis    uint64   // the visible sequence number it reads at
	curs   []cursor // the tables' runs, then the store cursor
	h      []int    // heap of the valid cursors' indexes
	dir    int      // +1 forward, -1 backward, 0 unpositioned
	st     *storage.Iter

	lower, upper       string
	hasLower, hasUpper bool

	key     string
	val     []byte
	keyBuf  []byte
	valid   bool
	err     error
	closed  bool
	release func()
}

// NewIter returns an iterator over keys k with lower <= k < upper (nil =
// open on that side). It is unpositioned: call First, Last, SeekGE or
// SeekLT. Errors: ErrBadRange if lower > upper, the store's errors.
//
// The first iterator over tables that nobody sorted yet sorts them (a
// radix sort of the keys' first 8 bytes); later ones reuse that order and
// sort only the keys written since (see order).
func (kv *KV) NewIter(lower, upper []byte) (*Iter, error) {
	if err := CheckRange(lower, upper); err != nil {
		return nil, err
	}
	if kv.st == nil {
		return nil, kverr.ErrClosed
	}
	// Under vmu no table is frozen or released: the store iterator
	// holds every change of a table released before the pin, and none
	// numbered above vis (a table is sealed, so frozen and written,
	// only after its changes were published).
	//
	// The pins come before the visible number (publication order 7c): a
	// writer rewrites a record in place only in an unpinned table and
	// only below a change visible before it checked the pins (see
	// shard.reuse), so a number loaded after the pin is never older than
	// a change the iterator would have to skip.
	kv.vmu.Lock()
	v := kv.view.Load()
	ts := make([]*table, 0, len(v.sealed)+1)
	ts = append(append(ts, v.active), v.sealed...)
	if testHook != nil {
		testHook("iter-pin")
	}
	pinTables(ts)           // publication order 10: under vmu
	vis := kv.seq.Visible() // publication order 7c: after the pins
	st, err := kv.st.NewIter(kv.ks, lower, upper)
	kv.vmu.Unlock()
	if err != nil {
		unpinTables(ts)
		return nil, err
	}
	return newIter(ts, vis, kv.orderOf, st, lower, upper, func() { unpinTables(ts) }), nil
}

// newIter makes an iterator over the tables ts (newest first) and st. Each
// table's key order comes from table.orderFor, or from orderOf if not nil
// (a test hook: KV.orderOf).
func newIter(ts []*table, vis uint64, orderOf func(*table) (*order, []sortEnt), st *storage.Iter, lower, upper []byte, release func()) *Iter {
	it := &Iter{tables: ts, vis: vis, st: st, release: release}
	if lower != nil {
		it.lower, it.hasLower = string(lower), true
	}
	if upper != nil {
		it.upper, it.hasUpper = string(upper), true
	}
	for p, t := range ts {
		var o *order
		var tail []sortEnt
		if orderOf != nil {
			o, tail = orderOf(t)
		} else {
			o, tail = t.orderFor()
		}
		if o == nil {
			continue
		}
		for _, r := range o.runs {
			it.curs = append(it.curs, cursor{x: &o.keyIndex, run: r, prio: p})
		}
		if len(tail) > 0 {
			it.curs = append(it.curs, cursor{x: &o.keyIndex, run: tail, prio: p})
		}
	}
	it.curs = append(it.curs, cursor{st: st, prio: len(ts)})
	it.h = make([]int, 0, len(it.curs))
	return it
}

// less orders heap entries: by key in the direction of travel, then newest
// table first.
func (it *Iter) less(a, b int) bool {
	ca, cb := &it.curs[a], &it.curs[b]
	if ca.key != cb.key {
		return (ca.key < cb.key) == (it.dir > 0)
	}
	return ca.prio < cb.prio
}

func (it *Iter) down(i int) {
	h := it.h
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		c := l
		if r := l + 1; r < len(h) && it.less(h[r], h[l]) {
			c = r
		}
		if !it.less(h[c], h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

func (it *Iter) heapify() {
	it.h = it.h[:0]
	for i := range it.curs {
		if it.curs[i].ok {
			it.h = append(it.h, i)
		}
	}
	for i := len(it.h)/2 - 1; i >= 0; i-- {
		it.down(i)
	}
}

// step moves the top cursor one key in the direction of travel.
func (it *Iter) step() {
	c := &it.curs[it.h[0]]
	if it.dir > 0 {
		c.next()
	} else {
		c.prev()
	}
	if !c.ok {
		it.storeEnded(c)
		last := len(it.h) - 1
		it.h[0] = it.h[last]
		it.h = it.h[:last]
	}
	if len(it.h) > 0 {
		it.down(0)
	}
}

// storeEnded records the store iterator's error when its cursor runs out.
func (it *Iter) storeEnded(c *cursor) {
	if c.x == nil && it.err == nil {
		it.err = c.st.Error()
	}
}

// stepKey moves every cursor at key k past it.
func (it *Iter) stepKey(k string) {
	for len(it.h) > 0 && it.curs[it.h[0]].key == k {
		it.step()
	}
}

// coveringNewer returns the newest range tombstone, of a table newer than
// prio, that covers k and is visible to the iterator.
func (it *Iter) coveringNewer(k string, prio int) (q int, s span, ok bool) {
	for q = 0; q < prio; q++ {
		if sp := it.tables[q].rdel.Load(); sp != nil {
			if s, ok = sp.find(k, 0, it.vis); ok {
				return q, s, true
			}
		}
	}
	return 0, span{}, false
}

// skipSpan moves every cursor older than table q that is inside s out of s,
// in the direction of travel.
func (it *Iter) skipSpan(q int, s span) {
	for i := range it.curs {
		c := &it.curs[i]
		if !c.ok || c.prio <= q || c.key < s.lo || !s.endsAfter(c.key) {
			continue
		}
		switch {
		case it.dir < 0:
			c.seekLT(s.lo)
		case s.open:
			c.ok = false
		default:
			c.seekGE(s.hi)
		}
		if !c.ok {
			it.storeEnded(c)
		}
	}
	it.heapify()
}

// settle positions the iterator at the first visible key at or after the
// cursors' positions in the direction of travel.
func (it *Iter) settle() bool {
	for len(it.h) > 0 && it.err == nil {
		c := &it.curs[it.h[0]]
		k := c.key
		if it.dir > 0 && it.hasUpper && k >= it.upper || it.dir < 0 && it.hasLower && k < it.lower {
			break
		}
		if q, s, ok := it.coveringNewer(k, c.prio); ok {
			it.skipSpan(q, s)
			continue
		}
		if c.x != nil {
			t := it.tables[c.prio]
			sw, sh := c.x.words(c.run[c.i].ref)
			// Pinned tables: no record is rewritten under the
			// iterator, and its visible number was loaded after the
			// pin, above every cut (verRetry does not happen).
			v, st := t.versionAt(sh, &sw, it.vis)
			invariants.Check(st != verRetry, "buffer: an iterator raced a record rewrite")
			if st != verFound {
				// No change of this table the iterator may see
				// (written after NewIter): older sources decide.
				it.step()
				continue
			}
			if v.del || t.rdel.Load().hides(k, v.seq, it.vis) {
				it.stepKey(k)
				continue
			}
			it.key, it.val = k, v.ext
			if v.inline && v.n > 0 {
				// The slot's bytes: immutable while the table is pinned.
				a, _, i := c.x.slot(c.run[c.i].ref)
				p := unsafe.Pointer(&a.s[i*slotWordsN+1])
				it.val = unsafe.Slice((*byte)(unsafe.Add(p, v.off)), v.n)
			}
		} else {
			// The store's key is only valid until the store iterator moves,
			// and moving it is exactly what the next step does: keep a copy.
			it.keyBuf = append(it.keyBuf[:0], k...)
			it.key = unsafe.String(unsafe.SliceData(it.keyBuf), len(it.keyBuf))
			it.val = c.st.Value()
			if err := c.st.Error(); err != nil {
				it.err = err
				break
			}
		}
		it.valid = true
		return true
	}
	it.valid = false
	return false
}

func (it *Iter) position(dir int, place func(c *cursor)) bool {
	if it.closed {
		return false
	}
	it.dir, it.valid = dir, false
	for i := range it.curs {
		place(&it.curs[i])
		if !it.curs[i].ok {
			it.storeEnded(&it.curs[i])
		}
	}
	it.heapify()
	return it.settle()
}

// First moves to the first visible key in range and reports whether there is
// one.
func (it *Iter) First() bool {
	return it.position(+1, func(c *cursor) {
		if it.hasLower && c.x != nil {
			c.seekGE(it.lower)
		} else {
			c.first() // the store iterator has the bounds
		}
	})
}

// Last moves to the last visible key in range.
func (it *Iter) Last() bool {
	return it.position(-1, func(c *cursor) {
		if it.hasUpper && c.x != nil {
			c.seekLT(it.upper)
		} else {
			c.last()
		}
	})
}

// SeekGE moves to the first visible key >= key (and in range).
func (it *Iter) SeekGE(key []byte) bool {
	k := string(key)
	if it.hasLower && k < it.lower {
		k = it.lower
	}
	return it.position(+1, func(c *cursor) { c.seekGE(k) })
}

// SeekLT moves to the last visible key < key (and in range).
func (it *Iter) SeekLT(key []byte) bool {
	k := string(key)
	if it.hasUpper && k > it.upper {
		k = it.upper
	}
	return it.position(-1, func(c *cursor) { c.seekLT(k) })
}

// Next moves to the next visible key and reports whether there is one. At the
// end (or unpositioned) it returns false.
func (it *Iter) Next() bool {
	if it.closed || !it.valid {
		return false
	}
	if it.dir < 0 {
		k := it.saveKey()
		return it.position(+1, func(c *cursor) {
			c.seekGE(k)
			if c.ok && c.key == k {
				c.next()
			}
		})
	}
	it.stepKey(it.key)
	return it.settle()
}

// Prev moves to the previous visible key.
func (it *Iter) Prev() bool {
	if it.closed || !it.valid {
		return false
	}
	if it.dir > 0 {
		k := it.saveKey()
		return it.position(-1, func(c *cursor) { c.seekLT(k) })
	}
	it.stepKey(it.key)
	return it.settle()
}

// saveKey returns a copy of the current key that outlives every cursor
// move.
func (it *Iter) saveKey() string { return string(it.key) }

// Valid reports whether the iterator is positioned at a key.
func (it *Iter) Valid() bool { return it.valid && !it.closed }

// Key returns the current key, or nil when not positioned. It is valid until
// the next positioning call; copy it to keep it. Do not modify it.
func (it *Iter) Key() []byte {
	if !it.Valid() {
		return nil
	}
	return unsafe.Slice(unsafe.StringData(it.key), len(it.key))
}

// Value returns the current value, or nil when not positioned. It is valid
// until the next positioning call; copy it to keep it. Do not modify it.
func (it *Iter) Value() []byte {
	if !it.Valid() {
		return nil
	}
	return it.val
}

// Error returns the error that stopped the iteration, if any.
func (it *Iter) Error() error { return it.err }

// Close releases the iterator and lets the tables it read be recycled. It is
// idempotent and returns the error that stopped the iteration, or the store
// iterator's close error.
func (it *Iter) Close() error {
	if it.closed {
		return it.err
	}
	it.closed, it.valid = true, false
	if it.release != nil {
		it.release()
	}
	if err := it.st.Close(); err != nil && it.err == nil {
		it.err = fmt.Errorf("close iterator: %w", err)
	}
	return it.err
}
