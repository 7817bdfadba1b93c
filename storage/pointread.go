package storage

import (
	"bytes"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kvbuf/kvbuf/internal/yield"
)

// Point reads (Get, GetAppend) use cached pebble iterators instead of
// DB.Get: DB.Get builds a fresh iterator stack over every level for each
// call (the files' iterators, the level iterators, the merging iterator),
// which on a block-cached read costs about as much as the search itself;
// an iterator kept between reads and repositioned with SeekPrefixGE reuses
// all of it (BenchmarkMissRead, doc/design.md "The read tier": a miss in
// the buffer plus the store read against a plain pebble Get).
//
// An iterator reads the state of the store when it was created. The rules
// that keep a cached one from answering with an older state than DB.Get
// would (cited as "point-read rule Pn"):
//
//	P1. Every change of what the store holds is bracketed by begin and
//	    end: begin (applying up, then epoch bumped) before the change can
//	    be visible to any iterator, end (applying down) after it is
//	    visible to every new one and before anyone can learn it happened:
//	    around a batch group's apply to pebble (commit.go,
//	    startNextLocked) and around DB.Ingest (runIngest), both before the
//	    commits are settled. epoch is also bumped after every pebble flush
//	    and compaction (event listener: the contents are the same, but an
//	    iterator on the old version keeps reading, and pinning, the files
//	    they replaced). The bump comes first, not after the change: a read
//	    may see a change still being applied (its iterator made after it
//	    landed), and a later read of the same goroutine must not then take
//	    an older iterator of the same epoch (TestIngestRacesCommits: "key
//	    went back"). Mutation 121 drops the begin of a batch applied at
//	    once (TestPointReadSeesEveryChange catches it), 310 that of a group
//	    applied from the queue (TestPointReadsRacingCommits).
//	P2. A read loads epoch first, then applying, then takes an iterator
//	    tagged with that epoch or creates one and tags it with it: the
//	    iterator was created after the load, so it sees every change whose
//	    begin came before the load, i.e. every change whose commit could
//	    have been observed by the reader before it started. An iterator
//	    with another tag is closed. An iterator goes back to the cache
//	    only if applying was 0 after the read's epoch load and epoch is
//	    unchanged when it is put back: then no change was being applied
//	    at any time from its epoch's load to its return (one that began
//	    in between bumped epoch; one in flight at the load made applying
//	    non-zero), so every cached iterator of one epoch reads the same
//	    state, the state every read of that epoch may return (no test
//	    catches a cache of iterators made while a change was applied
//	    every time: TestIngestRacesCommits failed 9 of 200 runs on the
//	    order this replaced).
//	P3. An iterator is used by one read at a time (taken from the cache
//	    under mu, put back after), never after an error (closed instead),
//	    and every cached one is closed by Store.Close before pebble is.
//
// An idle cached iterator pins the version it was created on until the
// next point read through the iterators or Close: at most maxCachedIters of
// them, and none while reads go through DB.Get (below): the read that
// switches to DB.Get closes the idle ones, and put caches none while the
// switch holds.
//
// The iterator's saving is the stack's construction, which matters when
// the blocks a read needs are cached. When they are not, DB.Get is the
// better read: a merging iterator's SeekPrefixGE positions every level,
// and loads a data block in each level that holds a version of the key
// (an update flushed over a loaded record: two blocks, each read from the
// file), while DB.Get searches the levels newest first and stops at the
// first version it finds. So point reads judge themselves (pathChooser):
// of every pathWindow reads through an iterator, if more than half loaded
// a block from outside the block cache, the next pathGetSpan reads go
// through DB.Get, and then the iterators are judged again
// (doc/bench/2026-12-07-ycsbc27: YCSB C after A and B at 1M records).
// Reads through new iterators are judged as well as reused ones (a new
// one's stats also count its index blocks, which the block cache keeps):
// in a write-heavy mix a read rarely finds an iterator of the current
// epoch, and judging reused ones only would never switch it.
// DB.Get reads the store as it is then, which no cached iterator may be
// older than (rules P1-P3), so mixing the two keeps every read's
// guarantee (TestPointReadsRacingCommits and TestIngestRacesCommits run
// with every other read through DB.Get too: pathChooser.alternate).

// pointIters is the store's cache of point-read iterators and the epoch
// that says which of them may still be used (the rules above).
type pointIters struct {
	path  pathChooser
	epoch atomic.Uint64
	// applying counts the changes between begin and end (rule P1).
	applying atomic.Int64
	mu       sync.Mutex
	free     []cachedIter // under mu; closed: no more caching
	shut     bool
}

type cachedIter struct {
	it    *pebble.Iterator
	epoch uint64
}

// pathChooser decides between the cached iterators and DB.Get (see above).
// Its counters are racy by design: a judgement over slightly more or fewer
// reads than pathWindow changes nothing that matters.
type pathChooser struct {
	getLeft atomic.Int64 // reads left to go through DB.Get
	judged  atomic.Int64 // iterator reads in the current window
	missed  atomic.Int64 // of those, reads that loaded a block from outside the cache
	// iterOnly keeps every read on the iterators (tests of rules P1-P3).
	iterOnly bool
	// alternate sends every other read through DB.Get and judges none
	// (tests of rules P1-P3 on the mixed path); flips counts the reads.
	alternate bool
	flips     atomic.Uint64
}

const (
	pathWindow  = 256
	pathGetSpan = 8192
)

// useGet reports whether this read goes through DB.Get.
func (c *pathChooser) useGet() bool {
	if c.alternate {
		return c.flips.Add(1)%2 == 0
	}
	if c.getLeft.Load() <= 0 {
		return false
	}
	c.getLeft.Add(-1)
	return true
}

// judge counts one read through an iterator that loaded a block from
// outside the cache (missed) or not, and ends the window; it reports
// whether it switched the next pathGetSpan reads to DB.Get.
func (c *pathChooser) judge(missed bool) (switched bool) {
	if c.iterOnly || c.alternate {
		return false
	}
	if missed {
		c.missed.Add(1)
	}
	if c.judged.Add(1) < pathWindow {
		return false
	}
	m := c.missed.Swap(0)
	c.judged.Store(0)
	if 2*m > pathWindow {
		c.getLeft.Store(pathGetSpan)
		return true
	}
	return false
}

// maxCachedIters bounds the idle iterators kept: more than the goroutines
// that read at once gain nothing, and each pins a version.
const maxCachedIters = 16

// bump records a change of what a new iterator reads, made and visible
// already (pebble's flushes and compactions: point-read rule P1).
func (p *pointIters) bump() { p.epoch.Add(1) }

// begin is called before a change may become visible to an iterator, end
// once it is visible to every new one (point-read rule P1).
func (p *pointIters) begin() {
	p.applying.Add(1)
	p.epoch.Add(1)
}

// end: see begin.
func (p *pointIters) end() { p.applying.Add(-1) }

// get returns an iterator that reads the store as of now (point-read rule
// P2) and the tag to give back to put: the epoch, and whether the
// iterator may be cached (no change was being applied after the epoch's
// load).
func (p *pointIters) get(db *pebble.DB) (*pebble.Iterator, iterTag, error) {
	e := p.epoch.Load()
	tag := iterTag{epoch: e, clean: p.applying.Load() == 0}
	yield.Point() // stress builds: between the epoch and the iterator (rule P2)
	var stale []*pebble.Iterator
	var it *pebble.Iterator
	p.mu.Lock()
	for n := len(p.free); n > 0; n = len(p.free) {
		c := p.free[n-1]
		p.free[n-1] = cachedIter{}
		p.free = p.free[:n-1]
		if c.epoch == e {
			it = c.it
			break
		}
		stale = append(stale, c.it) // epochs only grow: it can never be used again
	}
	p.mu.Unlock()
	for _, s := range stale {
		_ = s.Close()
	}
	if it != nil {
		tag.reused = true
		return it, tag, nil
	}
	it, err := db.NewIter(nil)
	return it, tag, err
}

// iterTag is what get learnt of the state an iterator reads.
type iterTag struct {
	epoch  uint64
	clean  bool
	reused bool // taken from the cache, not new
}

// put gives back an iterator get returned, after a read that had no error
// (point-read rules P2, P3). None is cached while reads go through DB.Get:
// getLeft is loaded under mu, and dropIdle takes mu after it was stored,
// so an iterator put back by a read that began before the switch is
// either closed here or cached before dropIdle closes it.
func (p *pointIters) put(it *pebble.Iterator, tag iterTag) {
	e := tag.epoch
	if tag.clean && e == p.epoch.Load() {
		p.mu.Lock()
		if !p.shut && len(p.free) < maxCachedIters && p.path.getLeft.Load() <= 0 {
			p.free = append(p.free, cachedIter{it: it, epoch: e})
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	_ = it.Close()
}

// dropIdle closes the idle cached iterators, so that none pins its
// version while reads go through DB.Get (called after the switch to it).
func (p *pointIters) dropIdle() {
	p.mu.Lock()
	free := p.free
	p.free = nil
	p.mu.Unlock()
	for _, c := range free {
		_ = c.it.Close()
	}
}

// closeAll closes every cached iterator and stops caching (Store.Close,
// with no read running: point-read rule P3).
func (p *pointIters) closeAll() error {
	p.mu.Lock()
	free := p.free
	p.free, p.shut = nil, true
	p.mu.Unlock()
	var err error
	for _, c := range free {
		if cerr := c.it.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}

// pointGet appends the value of stored key k to dst (a copy, in a new
// slice if !appendMode); pebble.ErrNotFound if there is none.
func (s *Store) pointGet(dst, k []byte, appendMode bool) ([]byte, error) {
	if s.pit.path.useGet() {
		return s.dbGet(dst, k, appendMode)
	}
	it, e, err := s.pit.get(s.db)
	if err != nil {
		return dst, err
	}
	out := dst
	if e.reused {
		it.ResetStats()
	}
	found := it.SeekPrefixGE(k) && bytes.Equal(it.Key(), k)
	st := it.Stats().InternalStats
	if s.pit.path.judge(st.BlockBytes > st.BlockBytesInCache) {
		s.pit.dropIdle() // this read's iterator too: put caches none now
	}
	if found {
		var v []byte
		if v, err = it.ValueAndErr(); err == nil {
			if appendMode {
				out = append(out, v...)
			} else {
				out = make([]byte, len(v))
				copy(out, v)
			}
		}
	} else if err = it.Error(); err == nil {
		err = pebble.ErrNotFound
	}
	if it.Error() != nil || (err != nil && err != pebble.ErrNotFound) {
		_ = it.Close() // point-read rule P3: never reused after an error
		return dst, err
	}
	s.pit.put(it, e)
	if err != nil {
		return dst, err
	}
	return out, nil
}

// dbGet is pointGet through DB.Get (pathChooser).
func (s *Store) dbGet(dst, k []byte, appendMode bool) ([]byte, error) {
	return readValue(s.db, dst, k, appendMode)
}
