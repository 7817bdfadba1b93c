package buffer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// rewriteValue is op i's value of a key in the rewrite tests: i's 8 bytes
// repeated to 1-32 bytes (so that a record is rewritten with a value of
// another length), the length a function of i; ok is false for the ops
// that delete the key instead.
func rewriteValue(i uint64) (v []byte, ok bool) {
	if i%3 == 2 {
		return nil, false
	}
	var b [40]byte
	for j := 0; j < len(b); j += 8 {
		binary.LittleEndian.PutUint64(b[j:], i)
	}
	return b[:1+i*7%32], true
}

// decodeRewrite returns the op whose value v is, if v is one.
func decodeRewrite(v []byte) (uint64, bool) {
	var b [8]byte
	copy(b[:], v)
	i := binary.LittleEndian.Uint64(b[:])
	if len(v) < 8 {
		// A short value holds only the low bytes of i: no check beyond
		// its length and its bytes against every op it could be.
		return 0, false
	}
	w, ok := rewriteValue(i)
	return i, ok && bytes.Equal(w, v)
}

// TestKVOverwritesReuseRecords: a key overwritten and deleted again and
// again between flushes keeps a bounded number of records (the record
// below a visible head is rewritten in place), while a pinned table (an
// open iterator) keeps every version, as its reader may need them.
func TestKVOverwritesReuseRecords(t *testing.T) {
	r := newKVRig(t, &Options{Shards: 1})
	write := func(k string, i uint64) {
		if v, ok := rewriteValue(i); ok {
			r.put(k, string(v))
		} else {
			r.del(k)
		}
	}
	keys := []string{"a", "b", "key-of-more-than-24-bytes-in-the-arena"}
	for i := range uint64(30) {
		for _, k := range keys {
			write(k, i)
		}
	}
	base := r.kv.PendingBytes()
	for i := uint64(30); i < 30_000; i++ {
		for _, k := range keys {
			write(k, i)
		}
	}
	if got := r.kv.PendingBytes(); got > base+4096 {
		t.Fatalf("PendingBytes grew from %d to %d over 89,910 overwrites of 3 keys: records are not reused", base, got)
	}
	for _, k := range keys {
		want, ok := rewriteValue(29_999)
		got, err := r.kv.Get([]byte(k))
		if ok && (err != nil || !bytes.Equal(got, want)) || !ok && !errors.Is(err, kverr.ErrNotFound) {
			t.Fatalf("Get(%q) = %x, %v; want %x", k, got, err, want)
		}
	}
	it, err := r.kv.NewIter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	pinned := r.kv.PendingBytes()
	for i := uint64(30_000); i < 31_000; i++ {
		write("a", i)
	}
	if got := r.kv.PendingBytes(); got < pinned+1000*16 {
		t.Fatalf("PendingBytes %d -> %d over 1,000 overwrites under an open iterator: records were rewritten under it", pinned, got)
	}
	var n int
	for ok := it.First(); ok; ok = it.Next() {
		n++
		if _, ok := decodeRewrite(it.Value()); !ok && len(it.Value()) >= 8 {
			t.Fatalf("iterator: %q = %x, not a value written", it.Key(), it.Value())
		}
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestKVReadersRacingRewrites races lock-free readers with writers that
// overwrite and delete a few keys as fast as they can, so that the record
// below each key's head is rewritten in place over and over (see
// shard.reuse): a reader whose visible number is older than the head must
// read again, and one that copies a record being rewritten must notice.
// Each key has one writer; op i of a key writes rewriteValue(i) or deletes
// it. A Get, a GetMany and every value an iterator returns must be the
// value (or absence) of an op that started before the read ended and was
// not yet superseded when it began: op j with done <= j <= started, read
// before and after. Iterators (which pin the tables and so stop rewrites
// while open) and flushes run alongside, at GOMAXPROCS well above the
// cores.
func TestKVReadersRacingRewrites(t *testing.T) {
	raceProcs(t, 16)
	r := newKVRig(t, &Options{Shards: 1})
	const writers, keysPer = 2, 3
	type keyState struct {
		key     []byte
		started atomic.Uint64 // op being written (stored before it starts)
		done    atomic.Uint64 // last op written (stored after it returned)
	}
	ks := make([]*keyState, writers*keysPer)
	for i := range ks {
		ks[i] = &keyState{key: fmt.Appendf(nil, "rw-%d", i)}
	}
	var failure firstFailure
	fail := failure.fail
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes, reads, flushes atomic.Int64
	for w := range writers {
		wg.Go(func() {
			mine := ks[w*keysPer : (w+1)*keysPer]
			for i := uint64(1); ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				for _, s := range mine {
					s.started.Store(i)
					r.bar.RLock()
					var err error
					if v, ok := rewriteValue(i); ok {
						err = r.kv.Put(s.key, v)
					} else {
						err = r.kv.Delete(s.key)
					}
					r.bar.RUnlock()
					if err != nil {
						fail("write op %d of %s: %v", i, s.key, err)
						return
					}
					s.done.Store(i)
				}
				writes.Add(1)
			}
		})
	}
	// check reports whether v (err) is the outcome of an op in [lo, hi].
	check := func(s *keyState, v []byte, err error, lo, hi uint64, what string) bool {
		switch {
		case errors.Is(err, kverr.ErrNotFound) || err == nil && v == nil:
			for j := lo; j <= hi; j++ {
				if _, ok := rewriteValue(j); !ok || j == 0 {
					return true
				}
			}
			fail("%s %s: absent, but ops %d-%d all put it", what, s.key, lo, hi)
		case err != nil:
			fail("%s %s: %v", what, s.key, err)
		default:
			j, ok := decodeRewrite(v)
			if len(v) < 8 {
				// Check the short value against every op it may be.
				for j := lo; j <= hi; j++ {
					if w, ok := rewriteValue(j); ok && bytes.Equal(w, v) {
						return true
					}
				}
				fail("%s %s = %x: not the value of an op in %d-%d", what, s.key, v, lo, hi)
				return false
			}
			if !ok || j < lo || j > hi {
				fail("%s %s = %x (op %d, well formed %v): want an op in %d-%d", what, s.key, v, j, ok, lo, hi)
				return false
			}
			return true
		}
		return false
	}
	for p := range 6 {
		wg.Go(func() {
			keys := make([][]byte, len(ks))
			vals := make([][]byte, len(ks))
			los := make([]uint64, len(ks))
			for i := range ks {
				keys[i] = ks[i].key
			}
			for n := p; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				s := ks[n%len(ks)]
				lo := s.done.Load()
				v, err := r.kv.Get(s.key)
				if !check(s, v, err, lo, s.started.Load(), "Get") {
					return
				}
				for i, s := range ks {
					los[i] = s.done.Load()
				}
				if _, err := r.kv.GetMany(keys, vals, nil); err != nil {
					fail("GetMany: %v", err)
					return
				}
				for i, s := range ks {
					if !check(s, vals[i], nil, los[i], s.started.Load(), "GetMany") {
						return
					}
				}
				reads.Add(1)
			}
		})
	}
	iterate := func() { // iterators: they pin, and so pause rewrites
		for {
			select {
			case <-stop:
				return
			default:
			}
			los := make([]uint64, len(ks))
			for i, s := range ks {
				los[i] = s.done.Load()
			}
			it, err := r.kv.NewIter(nil, nil)
			if err != nil {
				fail("NewIter: %v", err)
				return
			}
			his := make([]uint64, len(ks))
			for i, s := range ks {
				his[i] = s.started.Load()
			}
			seen := make([]bool, len(ks))
			for ok := it.First(); ok; ok = it.Next() {
				var i int
				if _, err := fmt.Sscanf(string(it.Key()), "rw-%d", &i); err != nil || i >= len(ks) {
					fail("iterator: unexpected key %q", it.Key())
					break
				}
				seen[i] = true
				if !check(ks[i], it.Value(), nil, los[i], his[i], "iterator") {
					break
				}
				time.Sleep(10 * time.Microsecond) // writers overwrite meanwhile
			}
			for i, s := range ks {
				if !seen[i] && !check(s, nil, kverr.ErrNotFound, los[i], his[i], "iterator") {
					break
				}
			}
			if err := it.Close(); err != nil {
				fail("iterator Close: %v", err)
				return
			}
		}
	}
	for range 3 {
		wg.Go(iterate)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			r.flush()
			flushes.Add(1)
		}
	}()
	finishRace(t, stop, &wg, &failure, raceDuration, func() bool {
		return writes.Load() > 20_000 && reads.Load() > 2_000 && flushes.Load() > 3
	})
	t.Logf("%d write rounds, %d read rounds, %d flushes", writes.Load(), reads.Load(), flushes.Load())
}

// TestKVRewriteDuringPointRead: a Get finds a key's head record, and
// before it copies the value two more overwrites rewrite that very record
// in place (the hook): the Get must notice (the record's number changed)
// and read again, returning the newest value, never the new bytes cut to
// the old value's length.
func TestKVRewriteDuringPointRead(t *testing.T) {
	r := newKVRig(t, &Options{Shards: 1})
	k := "key"
	r.put(k, "first value, 24 bytes ..") // inline in the slot
	r.put(k, "2nd")                      // two records: 2nd -> first
	var once sync.Once
	testHook = func(point string) {
		if point == "read-copy" {
			once.Do(func() {
				r.put(k, "third value of 30 bytes ......") // rewrites "first"'s record
				r.put(k, "4th value, 19 bytes")            // rewrites "2nd"'s record
			})
		}
	}
	defer func() { testHook = nil }()
	got, err := r.kv.Get([]byte(k))
	if err != nil || string(got) != "4th value, 19 bytes" {
		t.Fatalf("Get = %q, %v; want the newest value", got, err)
	}
}

// TestKVRewriteBeforeIteratorPins: two overwrites rewrite a key's records
// in place just before NewIter pins its tables (the hook). The iterator
// loads its visible number after the pins, so it reads the newest value;
// one loaded before them would be older than the rewritten records and
// find the key's chain cut.
func TestKVRewriteBeforeIteratorPins(t *testing.T) {
	r := newKVRig(t, &Options{Shards: 1})
	k := "key"
	r.put(k, "v1")
	r.put(k, "v2")
	var once sync.Once
	testHook = func(point string) {
		if point == "iter-pin" {
			once.Do(func() {
				r.put(k, "v3")
				r.put(k, "v4")
			})
		}
	}
	defer func() { testHook = nil }()
	it, err := r.kv.NewIter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for ok := it.First(); ok; ok = it.Next() {
		got = append(got, string(it.Key())+"="+string(it.Value()))
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != k+"=v4" {
		t.Fatalf("scan = %q, want [key=v4]", got)
	}
}
