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
//	P1. epoch is bumped after every change of what the store holds is
//	    visible to a new iterator, before anyone can learn the change
//	    happened: after a batch group is applied to pebble (commit.go,
//	    startNextLocked) and after DB.Ingest returns (runIngest), both
//	    before the commits are settled; and after every pebble flush and
//	    compaction (event listener: the contents are the same, but an
//	    iterator on the old version keeps reading, and pinning, the files
//	    they replaced). Mutation 121 drops the bump of a batch applied at
//	    once (TestPointReadSeesEveryChange catches it), 310 that of a group
//	    applied from the queue (TestPointReadsRacingCommits).
//	P2. A read loads epoch first, then takes an iterator tagged with that
//	    value or creates one and tags it with it: the iterator was created
//	    after the load, so it sees every change bumped before the load,
//	    i.e. every change whose commit could have been observed by the
//	    reader before it started. An iterator with another tag is closed.
//	P3. An iterator is used by one read at a time (taken from the cache
//	    under mu, put back after), never after an error (closed instead),
//	    and every cached one is closed by Store.Close before pebble is.
//
// An idle cached iterator pins the version it was created on until the
// next point read or Close: at most maxCachedIters of them.

// pointIters is the store's cache of point-read iterators and the epoch
// that says which of them may still be used (the rules above).
type pointIters struct {
	epoch atomic.Uint64
	mu    sync.Mutex
	free  []cachedIter // under mu; closed: no more caching
	shut  bool
}

type cachedIter struct {
	it    *pebble.Iterator
	epoch uint64
}

// maxCachedIters bounds the idle iterators kept: more than the goroutines
// that read at once gain nothing, and each pins a version.
const maxCachedIters = 16

// bump records a change of what a new iterator reads (point-read rule P1).
func (p *pointIters) bump() { p.epoch.Add(1) }

// get returns an iterator that reads the store as of now (point-read rule
// P2) and the epoch to give back to put.
func (p *pointIters) get(db *pebble.DB) (*pebble.Iterator, uint64, error) {
	e := p.epoch.Load()
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
		return it, e, nil
	}
	it, err := db.NewIter(nil)
	return it, e, err
}

// put gives back an iterator get returned, after a read that had no error
// (point-read rule P3).
func (p *pointIters) put(it *pebble.Iterator, e uint64) {
	if e == p.epoch.Load() {
		p.mu.Lock()
		if !p.shut && len(p.free) < maxCachedIters {
			p.free = append(p.free, cachedIter{it: it, epoch: e})
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	_ = it.Close()
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
	it, e, err := s.pit.get(s.db)
	if err != nil {
		return dst, err
	}
	out := dst
	if it.SeekPrefixGE(k) && bytes.Equal(it.Key(), k) {
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
