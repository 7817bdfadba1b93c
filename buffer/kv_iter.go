package buffer

import (
	"fmt"
	"unsafe"

	"github.com/kvbuf/kvbuf/storage"
)

// cursor is one sorted source of a merge: a shard's skip list, or the store.
type cursor struct {
	head *node         // skip-list head; nil for the store cursor
	n    *node         // current node
	st   *storage.Iter // the store cursor's iterator
	prio int           // table index, newest 0; the store is len(tables)
	key  string        // current key (a store key is valid until the store moves)
	ok   bool
}

func (c *cursor) setNode(n *node) {
	c.n, c.ok = n, n != nil
	if n != nil {
		c.key = n.key()
	}
}

func (c *cursor) setStore(ok bool) {
	c.ok = ok
	if ok {
		k := c.st.Key()
		c.key = unsafe.String(unsafe.SliceData(k), len(k))
	}
}

func (c *cursor) first() {
	if c.head != nil {
		c.setNode(c.head.next0.Load())
	} else {
		c.setStore(c.st.First())
	}
}

func (c *cursor) last() {
	if c.head != nil {
		c.setNode(lastNode(c.head))
	} else {
		c.setStore(c.st.Last())
	}
}

func (c *cursor) seekGE(k string) {
	if c.head != nil {
		c.setNode(seekGE(c.head, k))
	} else {
		c.setStore(c.st.SeekGE(unsafe.Slice(unsafe.StringData(k), len(k))))
	}
}

func (c *cursor) seekLT(k string) {
	if c.head != nil {
		c.setNode(seekLT(c.head, k))
	} else {
		c.setStore(c.st.SeekLT(unsafe.Slice(unsafe.StringData(k), len(k))))
	}
}

func (c *cursor) next() {
	if c.head != nil {
		c.setNode(c.n.next0.Load())
	} else {
		c.setStore(c.st.Next())
	}
}

func (c *cursor) prev() {
	if c.head != nil {
		c.setNode(seekLT(c.head, c.key))
	} else {
		c.setStore(c.st.Prev())
	}
}

// merger walks the skip lists of one table's shards in key order (the flush
// batch builder). It sees every point, tombstones included.
type merger struct {
	curs []cursor
	h    []int
}

func (m *merger) addTable(t *table, prio int) {
	if ss := t.shards.Load(); ss != nil {
		for _, sh := range ss.s {
			m.curs = append(m.curs, cursor{head: sh.head, prio: prio})
		}
	}
}

func (m *merger) first() {
	m.h = m.h[:0]
	for i := range m.curs {
		m.curs[i].first()
		if m.curs[i].ok {
			m.h = append(m.h, i)
		}
	}
	for i := len(m.h)/2 - 1; i >= 0; i-- {
		m.down(i)
	}
}

func (m *merger) valid() bool { return len(m.h) > 0 }
func (m *merger) top() *node  { return m.curs[m.h[0]].n }

func (m *merger) next() {
	c := &m.curs[m.h[0]]
	c.next()
	if !c.ok {
		last := len(m.h) - 1
		m.h[0] = m.h[last]
		m.h = m.h[:last]
	}
	if len(m.h) > 0 {
		m.down(0)
	}
}

func (m *merger) down(i int) {
	h := m.h
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		c := l
		if r := l + 1; r < len(h) && m.curs[h[r]].key < m.curs[h[l]].key {
			c = r
		}
		if m.curs[h[c]].key >= m.curs[h[i]].key {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// Iter iterates over a keyspace in key order, forwards or backwards, merging
// pending changes (newest table wins) with the store; tombstones and range
// tombstones hide keys. It is not safe for concurrent use; Close it when
// done.
//
// What a scan concurrent with writes sees: the store side is fixed when the
// iterator is created (a pebble iterator); the pending side is read live. A
// change that completed before NewIter is seen (or a later one); a change
// made during the scan may or may not be. Each key is returned at most once
// per direction of travel. Flushes during the scan change nothing it
// returns: the tables it reads stay intact (pinned) until Close. An
// iterator over a snapshot sees exactly the snapshot.
type Iter struct {
	tables []*table // newest first; pinned by this iterator
	curs   []cursor // one per shard per table, then the store cursor
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
func (kv *KV) NewIter(lower, upper []byte) (*Iter, error) {
	if err := CheckRange(lower, upper); err != nil {
		return nil, err
	}
	if kv.st == nil {
		return nil, storage.ErrClosed
	}
	ts := kv.pinView(true)
	// The store iterator is created after the tables are pinned: a table
	// released before the pin is already in the store.
	st, err := kv.st.NewIter(kv.ks, lower, upper)
	if err != nil {
		unpin(ts)
		return nil, err
	}
	return newIter(ts, st, lower, upper, func() { unpin(ts) }), nil
}

func newIter(ts []*table, st *storage.Iter, lower, upper []byte, release func()) *Iter {
	it := &Iter{tables: ts, st: st, release: release}
	if lower != nil {
		it.lower, it.hasLower = string(lower), true
	}
	if upper != nil {
		it.upper, it.hasUpper = string(upper), true
	}
	for p, t := range ts {
		if ss := t.shards.Load(); ss != nil {
			for _, sh := range ss.s {
				it.curs = append(it.curs, cursor{head: sh.head, prio: p})
			}
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
	if c.head == nil && it.err == nil {
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
// prio, that covers k.
func (it *Iter) coveringNewer(k string, prio int) (q int, s span, ok bool) {
	for q = 0; q < prio; q++ {
		if sp := it.tables[q].rdel.Load(); sp != nil {
			if s, ok = sp.find(k); ok {
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
		if c.head != nil {
			r := c.n.val.Load()
			if r == nil {
				// A Put in progress: not in this table yet. Older
				// sources at the same key decide.
				it.step()
				continue
			}
			v, del := rec(r)
			if del {
				it.stepKey(k)
				continue
			}
			it.key, it.val = k, v
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
		if it.hasLower && c.head != nil {
			c.seekGE(it.lower)
		} else {
			c.first() // the store iterator has the bounds
		}
	})
}

// Last moves to the last visible key in range.
func (it *Iter) Last() bool {
	return it.position(-1, func(c *cursor) {
		if it.hasUpper && c.head != nil {
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
