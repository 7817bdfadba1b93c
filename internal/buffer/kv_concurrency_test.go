package buffer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// The publication orders of the KV table (see kv_table.go, kv_order.go,
// kv_seq.go), each raced by readers at GOMAXPROCS well above the core
// count: a slot array growing under lock-free readers, an order being
// sorted and extended under iterators, a batch's changes applied under
// readers that must see all of them or none.

// TestKVReadersRacingGrowth: a writer puts keys 0, 1, 2, ... into a table
// of one shard (so that its slot array grows every few thousand keys) and
// records each key once Put returned; readers Get keys already recorded,
// and GetMany runs of them, and must find every one with its value: a
// reader that loaded the old array must find every key it held, one that
// loaded the new array every key copied into it; PendingKeys never counts
// more keys than were written. A flush every 50ms starts a new table
// (recycled: pooling is on) that grows again.
func TestKVReadersRacingGrowth(t *testing.T) {
	raceProcs(t, 16)
	r := newKVRig(t, &Options{Shards: 1})
	key := func(i uint64) []byte { return binary.BigEndian.AppendUint64([]byte("g"), i) }
	var done atomic.Uint64 // keys [0, done) are written
	var failure firstFailure
	fail := failure.fail
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads, growths atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		last := time.Now()
		for i := uint64(0); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			r.put(string(key(i)), string(key(i)))
			done.Store(i + 1)
			if time.Since(last) > 50*time.Millisecond {
				r.flush()
				last = time.Now()
			}
			if i&(i-1) == 0 {
				growths.Add(1)
			}
		}
	}()
	for p := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keys := make([][]byte, 16)
			vals := make([][]byte, 16)
			for n := uint64(p); ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				d := done.Load()
				if d == 0 {
					runtime.Gosched()
					continue
				}
				// The newest keys: the ones a grown array moved last.
				i := d - 1 - n%min(d, 4096)
				got, err := r.kv.Get(key(i))
				if err != nil || !bytes.Equal(got, key(i)) {
					fail("Get(key %d) = %x, %v after %d keys written", i, got, err, d)
					return
				}
				for j := range keys {
					keys[j] = key((i + uint64(j)*97) % d)
				}
				if _, err := r.kv.GetMany(keys, vals, nil); err != nil {
					fail("GetMany: %v", err)
					return
				}
				for j := range keys {
					if !bytes.Equal(vals[j], keys[j]) {
						fail("GetMany: key %x = %x after %d keys written", keys[j], vals[j], d)
						return
					}
				}
				// Every key is written once, so the tables hold at
				// most the keys whose Put began: those done and the
				// writer's current one. (The count is read under the
				// shard mutex, publication order 1: a lock-free load
				// races the writer's.)
				if n, d := r.kv.PendingKeys(), done.Load(); n > int64(d)+1 {
					fail("PendingKeys = %d with %d keys written", n, d)
					return
				}
				reads.Add(1)
			}
		}()
	}
	want := uint64(100_000)
	if raceEnabled {
		want = 20_000
	}
	finishRace(t, stop, &wg, &failure, raceDuration, func() bool { return done.Load() > want })
	t.Logf("%d keys written, %d reads", done.Load(), reads.Load())
}

// TestKVIteratorsRacingSort: goroutines keep opening iterators while a
// writer adds keys and, every few thousand, freezes the active table: each
// frozen table is sorted by whichever iterator (or flush) gets to it first
// while other iterators want it, and the active table's cached order is
// extended, or rebuilt after a growth, under iterators reading it. Every
// scan must be strictly increasing and hold every key written before
// NewIter.
func TestKVIteratorsRacingSort(t *testing.T) {
	raceProcs(t, 16)
	for round := range 3 {
		r := newKVRig(t, &Options{Shards: 1 << round})
		key := func(i uint64) []byte { return binary.BigEndian.AppendUint64([]byte("s"), i*2654435761%(1<<40)) }
		total, every := uint64(150_000), uint64(15_000)
		if raceEnabled {
			total, every = 12_000, 1_200
		}
		var done atomic.Uint64
		var failure firstFailure
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var scans, frozen atomic.Int64
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(0); i < total; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r.put(string(key(i)), "y")
				done.Store(i + 1)
				if (i+1)%every == 0 && r.freeze() {
					frozen.Add(1)
					if len(r.queue) > 4 {
						r.write(false)
						r.release()
					}
				}
			}
		}()
		for p := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					if (n+p)%3 == 0 {
						runtime.Gosched()
					}
					want := done.Load()
					it, err := r.kv.NewIter(nil, nil)
					if err != nil {
						panic(err)
					}
					var prev []byte
					n := uint64(0)
					for ok := it.First(); ok; ok = it.Next() {
						if prev != nil && bytes.Compare(prev, it.Key()) >= 0 {
							msg := fmt.Sprintf("scan out of order: %x after %x", it.Key(), prev)
							failure.CompareAndSwap(nil, &msg)
						}
						prev = append(prev[:0], it.Key()...)
						n++
					}
					it.Close()
					if n < want {
						msg := fmt.Sprintf("scan found %d keys, %d were written before NewIter", n, want)
						failure.CompareAndSwap(nil, &msg)
					}
					if failure.Load() != nil {
						return
					}
					scans.Add(1)
				}
			}()
		}
		runFor(raceDuration, func() bool { return done.Load() == total || failure.Load() != nil })
		close(stop)
		wg.Wait()
		if msg := failure.Load(); msg != nil {
			t.Fatalf("round %d: %s", round, *msg)
		}
		t.Logf("round %d: %d scans, %d keys, %d tables frozen", round, scans.Load(), done.Load(), frozen.Load())
		r.flush()
	}
}

// TestKVBatchesAtomic is TestBatchesNeverPartlyVisible of the engine on the
// overlay alone: writers apply batches (one sequence range each, through
// ApplyAt) that set a.w and b.w to the batch number and key f.w.<n mod
// 1000> to it; readers check GetMany(a.w, b.w) equal, a scan's a.w == b.w
// == the largest value of the f.w keys, and the shared keys' batches: writers also write all of the
// 16 keys s.* with one value, and every reader state holds one value in
// all of them. A flush loop runs and iterators pin old tables.
func TestKVBatchesAtomic(t *testing.T) {
	raceProcs(t, 16)
	r := newKVRig(t, &Options{Shards: 4})
	const writers = 3
	shared := make([][]byte, 16)
	for i := range shared {
		shared[i] = fmt.Appendf(nil, "s.%02d", i)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failure firstFailure
	fail := failure.fail
	var flushes, reads, scans atomic.Int64
	wg.Add(1)
	go kvFlushLoop(r, stop, &wg, &flushes)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 1; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				v := []byte(fmt.Sprint(n))
				sv := fmt.Appendf(nil, "%d.%d", w, n)
				cs := []Change{
					{Kind: ChangePut, Key: fmt.Appendf(nil, "a.%d", w), Value: v},
					{Kind: ChangePut, Key: fmt.Appendf(nil, "f.%d.%03d", w, n%1000), Value: v},
					{Kind: ChangePut, Key: fmt.Appendf(nil, "b.%d", w), Value: v},
				}
				for _, k := range shared {
					cs = append(cs, Change{Kind: ChangePut, Key: k, Value: sv})
				}
				r.bar.RLock()
				seqs := r.kv.Seq().Reserve(len(cs))
				// Half the batches go key by key, half at once.
				var err error
				if n%2 == 0 {
					err = r.kv.ApplyAt(seqs.Take(len(cs)), cs)
				} else {
					for _, c := range cs {
						if err == nil {
							err = r.kv.putAt(seqs.Next(), c.Key, c.Value)
						}
					}
				}
				seqs.Publish()
				r.bar.RUnlock()
				if err != nil {
					panic(err)
				}
			}
		}()
	}
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vals := make([][]byte, len(shared))
			for n := p; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if n%8 == 0 {
					if err := checkAtomicScan(r.kv, writers, len(shared)); err != nil {
						fail("%v", err)
						return
					}
					scans.Add(1)
					continue
				}
				w := n % writers
				if _, err := r.kv.GetMany([][]byte{fmt.Appendf(nil, "a.%d", w), fmt.Appendf(nil, "b.%d", w)}, vals, nil); err != nil {
					fail("GetMany: %v", err)
					return
				}
				if !bytes.Equal(vals[0], vals[1]) {
					fail("GetMany(a.%d, b.%d) = %q, %q", w, w, vals[0], vals[1])
					return
				}
				if _, err := r.kv.GetMany(shared, vals, nil); err != nil {
					fail("GetMany: %v", err)
					return
				}
				for i := range vals {
					if !bytes.Equal(vals[i], vals[0]) {
						fail("GetMany of the shared keys: %s = %q, %s = %q", shared[i], vals[i], shared[0], vals[0])
						return
					}
				}
				reads.Add(1)
			}
		}()
	}
	finishRace(t, stop, &wg, &failure, raceDuration, func() bool { return flushes.Load() >= 10 && scans.Load() >= 10 })
	t.Logf("%d flushes, %d reads, %d scans", flushes.Load(), reads.Load(), scans.Load())
}

// checkAtomicScan scans kv and checks TestKVBatchesAtomic's invariants.
func checkAtomicScan(kv *KV, writers, shared int) error {
	it, err := kv.NewIter(nil, nil)
	if err != nil {
		return err
	}
	defer it.Close()
	a, b, f := make([]string, writers), make([]string, writers), make([]int, writers)
	var sv []string
	for ok := it.First(); ok; ok = it.Next() {
		k, v := string(it.Key()), string(it.Value())
		var w, n int
		switch k[0] {
		case 'a':
			fmt.Sscanf(k, "a.%d", &w)
			a[w] = v
		case 'b':
			fmt.Sscanf(k, "b.%d", &w)
			b[w] = v
		case 'f':
			fmt.Sscanf(k, "f.%d.", &w)
			fmt.Sscan(v, &n)
			f[w] = max(f[w], n)
		case 's':
			sv = append(sv, v)
		}
	}
	for w := range writers {
		if a[w] != b[w] || a[w] != fmt.Sprint(f[w]) && !(a[w] == "" && f[w] == 0) {
			return fmt.Errorf("scan: writer %d: a = %q, b = %q, newest fresh key %d", w, a[w], b[w], f[w])
		}
	}
	if len(sv) != 0 && len(sv) != shared {
		return fmt.Errorf("scan: %d of the %d shared keys", len(sv), shared)
	}
	for _, v := range sv {
		if v != sv[0] {
			return fmt.Errorf("scan: shared keys hold %q and %q", sv[0], v)
		}
	}
	return it.Error()
}

// TestKVReadersRacingRecycle is the setting of the earlier design's stale
// reads: a released table recycled (cleared, pooled) under a reader while
// an older released one stays intact (pinned), so that a read that probes
// the cleared table and goes on believes the older one. The writer makes
// rounds of eight generations: the first and the second set every key (to
// the generation number), the others a filler key; it writes and releases
// a round's eight generations together, oldest first, with the first
// pinned by an iterator it opened when that generation was the active
// table. The second is then the first one the pool takes and clears while
// the first stays intact. Readers Get and GetMany the keys and require
// each key's value never to go back (a read probes the newer tables of the
// round first, so it spends time between loading the view and reaching the
// second).
func TestKVReadersRacingRecycle(t *testing.T) {
	raceProcs(t, 32)
	r := newKVRig(t, &Options{Shards: 2})
	const nkeys = 4
	keys := make([][]byte, nkeys)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "r%d", i)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failure firstFailure
	fail := failure.fail
	var releases, reads atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		var pin *Iter
		for g := 0; ; g++ {
			select {
			case <-stop:
				if pin != nil {
					pin.Close()
				}
				return
			default:
			}
			switch g % 8 {
			case 0:
				// The first generation of a round: pin its table.
				if pin != nil {
					pin.Close()
				}
				var err error
				if pin, err = r.kv.NewIter(nil, nil); err != nil {
					panic(err)
				}
				fallthrough
			case 1:
				for _, k := range keys {
					r.put(string(k), fmt.Sprintf("%09d", g))
				}
			default:
				r.put(fmt.Sprintf("filler%d", g%64), "x")
			}
			r.freeze()
			if g%8 == 7 {
				for len(r.queue) > 0 {
					r.write(false)
					r.release()
					releases.Add(1)
				}
			}
		}
	}()
	for range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last [nkeys]string
			vals := make([][]byte, nkeys)
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if n%4 == 0 {
					if _, err := r.kv.GetMany(keys, vals, nil); err != nil {
						fail("GetMany: %v", err)
						return
					}
					for i, v := range vals {
						if string(v) < last[i] {
							fail("GetMany: key %d = %q after %q", i, v, last[i])
							return
						}
						last[i] = string(v)
					}
					continue
				}
				i := n % nkeys
				v, err := r.kv.Get(keys[i])
				if err != nil && !errors.Is(err, kverr.ErrNotFound) {
					fail("Get: %v", err)
					return
				}
				if string(v) < last[i] {
					fail("Get(key %d) = %q after %q: a stale read", i, v, last[i])
					return
				}
				last[i] = string(v)
				reads.Add(1)
			}
		}()
	}
	finishRace(t, stop, &wg, &failure, 2*raceDuration, func() bool { return releases.Load() >= 300 })
	t.Logf("%d releases, %d reads", releases.Load(), reads.Load())
}

// TestKVIteratorsRacingFlushes: iterators racing writes, growth, sealing
// and flushes keep the documented semantics (an iterator reads its
// keyspace as of NewIter, across the pending tables and the store). A
// writer applies batches (one sequence range each) that add 1-64 new keys
// k.<i> (in an order unrelated to key order, so that the active table's
// order is extended and rebuilt) and set key "last" to the highest i
// written (then, past a limit, a batch deletes every k.* key with a range
// tombstone and starts again from k.<0>); a flush loop freezes, writes and releases generations (pausing
// now and then, so that some tables grow large); iterators pause halfway
// through their scan, so that flushes release the tables they pinned.
// Every scan, forward or backward, must be strictly ordered and hold
// exactly k.<0> .. k.<last>: a key more or less is a scan that is not one
// instant.
func TestKVIteratorsRacingFlushes(t *testing.T) {
	raceProcs(t, 16)
	r := newKVRig(t, &Options{Shards: 2})
	key := func(i uint64) []byte { return binary.BigEndian.AppendUint64([]byte("k."), i*2654435761%(1<<32)) }
	limit := uint64(100_000) // keys k.* of an epoch: each scan reads all of them twice
	if raceEnabled {
		limit = 10_000
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failure firstFailure
	fail := failure.fail
	// written: the batches up to it are published (stored after Publish);
	// publishing: the batch up to it may be (stored before Publish). A
	// writer preempted between the two has published a batch that written
	// does not show yet, so a reader's upper bound is publishing.
	var written, publishing, flushes, scans atomic.Uint64
	wg.Add(2)
	go func() {
		defer wg.Done()
		var cs []Change
		var epoch, next uint64
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			cs = cs[:0]
			if next >= limit {
				// A new epoch: the same batch deletes every k.* key and
				// starts again from k.<0>.
				cs = append(cs, Change{Kind: ChangeDeleteRange, Key: []byte("k."), Value: []byte("k/")})
				epoch, next = epoch+1, 0
			}
			for range 1 + n%64 {
				cs = append(cs, Change{Kind: ChangePut, Key: key(next), Value: binary.BigEndian.AppendUint64(nil, next)})
				next++
			}
			cs = append(cs, Change{Kind: ChangePut, Key: []byte("last"), Value: binary.BigEndian.AppendUint64(nil, epoch<<32|(next-1))})
			r.bar.RLock()
			seqs := r.kv.Seq().Reserve(len(cs))
			err := r.kv.ApplyAt(seqs.Take(len(cs)), cs)
			publishing.Store(epoch<<32 | next)
			seqs.Publish()
			r.bar.RUnlock()
			if err != nil {
				panic(err)
			}
			written.Store(epoch<<32 | next)
		}
	}()
	go func() {
		defer wg.Done()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			if n%8 == 0 {
				time.Sleep(time.Millisecond) // let the active table grow
			}
			if !r.freeze() {
				continue
			}
			r.write(false)
			r.release()
			flushes.Add(1)
		}
	}()
	for p := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			type kv struct{ k, v []byte }
			var fwd, bwd []kv
			for n := p; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				before := written.Load()
				it, err := r.kv.NewIter(nil, nil)
				if err != nil {
					fail("NewIter: %v", err)
					return
				}
				after := publishing.Load()
				fwd, bwd = fwd[:0], bwd[:0]
				i := 0
				for ok := it.First(); ok; ok = it.Next() {
					fwd = append(fwd, kv{bytes.Clone(it.Key()), bytes.Clone(it.Value())})
					if i++; i == 200 {
						runtime.Gosched() // a flush may release what this iterator pinned
					}
				}
				for ok := it.Last(); ok; ok = it.Prev() {
					bwd = append(bwd, kv{bytes.Clone(it.Key()), bytes.Clone(it.Value())})
				}
				if err := it.Close(); err != nil {
					fail("Close: %v", err)
					return
				}
				if len(fwd) != len(bwd) {
					fail("forward scan %d keys, backward %d", len(fwd), len(bwd))
					return
				}
				var last uint64
				found := false
				for j, e := range fwd {
					if b := bwd[len(bwd)-1-j]; !bytes.Equal(e.k, b.k) || !bytes.Equal(e.v, b.v) {
						fail("forward scan's key %d is %q=%q, backward scan's %q=%q", j, e.k, e.v, b.k, b.v)
						return
					}
					if j > 0 && bytes.Compare(fwd[j-1].k, e.k) >= 0 {
						fail("scan out of order: %q after %q", e.k, fwd[j-1].k)
						return
					}
					if string(e.k) == "last" {
						last, found = binary.BigEndian.Uint64(e.v), true
					}
				}
				if !found {
					if before > 0 || len(fwd) > 0 {
						fail("scan without key last holds %d keys; %d were written before NewIter", len(fwd), before)
						return
					}
					continue
				}
				// The scan holds last+1 keys k.* and key last, no more, no
				// fewer; and last is between what was written before and
				// after NewIter.
				if uint64(len(fwd)) != last%(1<<32)+2 || last+1 < before || last+1 > after {
					fail("scan holds %d keys, last = %#x; %#x written before NewIter, at most %#x published after it", len(fwd), last, before, after)
					return
				}
				last %= 1 << 32
				for _, e := range fwd {
					if e.k[0] != 'k' {
						continue
					}
					if i := binary.BigEndian.Uint64(e.v); i > last || !bytes.Equal(e.k, key(i)) {
						fail("scan holds %q = %d, last = %d", e.k, i, last)
						return
					}
				}
				scans.Add(1)
			}
		}()
	}
	finishRace(t, stop, &wg, &failure, raceDuration, func() bool { return flushes.Load() >= 10 && scans.Load() >= 20 || failure.Load() != nil })
	if flushes.Load() == 0 || scans.Load() == 0 {
		t.Fatalf("%d flushes, %d scans: nothing raced", flushes.Load(), scans.Load())
	}
	t.Logf("%d epochs, %d flushes, %d scans", written.Load()>>32+1, flushes.Load(), scans.Load())
}

// TestKVStaleReaderOfRecycledSlot: a Get of a 16-byte key (the general
// probe path) loads its slot's head word and stops there (the hook sleeps,
// in a synctest bubble, so that nothing orders what happens meanwhile
// before the rest of its probe); the table is then released, recycled as
// the active table, and the same key written into the same slot; then the
// Get goes on and loads the slot's key words. Those loads race the new
// write unless it stored the words atomically: no edge orders the write
// before them (the reader loaded no word of the new life). With -race,
// a plain store there fails the test; in any build the Get must answer
// with the new value after it re-validates its view.
func TestKVStaleReaderOfRecycledSlot(t *testing.T) {
	if !poolEnabled {
		t.Skip("pooling compiled out (kvbuf_nopool): no table is recycled")
	}
	synctest.Test(t, func(t *testing.T) {
		kv, err := NewKV(nil, 1, nil, &Options{Shards: 1})
		if err != nil {
			t.Fatal(err)
		}
		key := []byte("stale-reader-key") // 16 bytes: probeAppend's path
		put := func(k, v string) {
			if err := kv.Put([]byte(k), []byte(v)); err != nil {
				t.Fatal(err)
			}
		}
		put(string(key), "a")
		paused := make(chan struct{})
		pauses := 0 // the reader's alone
		testHook = func(point string) {
			if point == "probe-slot" && pauses == 0 {
				pauses++
				close(paused)
				time.Sleep(time.Second)
			}
		}
		defer func() { testHook = nil }()
		type result struct {
			v   []byte
			err error
		}
		done := make(chan result)
		go func() {
			v, err := kv.Get(key)
			done <- result{v, err}
		}()
		<-paused
		first := kv.view.Load().active
		kv.Freeze(1).Release() // first is cleared into the pool
		put("other", "x")
		kv.Freeze(2) // the next active table is first, recycled
		if kv.view.Load().active != first {
			t.Fatal("the released table was not recycled as the active one")
		}
		put(string(key), "b")
		r := <-done
		if r.err != nil || string(r.v) != "b" {
			t.Fatalf("Get = %q, %v; want \"b\"", r.v, r.err)
		}
	})
}

// TestKVReleaseClearsAfterPublishing: Release publishes the view without
// the released tables before the pool clears any of them (publication
// order 6). A generation can hold several tables (a snapshot seals the
// active one): here the older holds key=old and the newer key=new.
// A Get made just after the pool cleared the newer table must not find
// the older one still in the published view (which would answer "old");
// it must see the view without both and read "new" from the store.
func TestKVReleaseClearsAfterPublishing(t *testing.T) {
	if !poolEnabled {
		t.Skip("pooling compiled out (kvbuf_nopool): no table is cleared")
	}
	r := newKVRig(t, &Options{Shards: 1})
	r.put("key", "old")
	r.kv.Snapshot().Close() // seals the table holding key=old
	r.put("key", "new")
	r.freeze()
	if n := len(r.queue[0].tables); n != 2 {
		t.Fatalf("the generation holds %d tables, want 2", n)
	}
	r.write(false)
	var got []string
	testHook = func(point string) {
		if point == "pool-clear" {
			v, err := r.kv.Get([]byte("key"))
			got = append(got, fmt.Sprintf("%q %v", v, err))
		}
	}
	defer func() { testHook = nil }()
	r.release()
	testHook = nil
	if len(got) == 0 {
		t.Fatal("the pool cleared no table")
	}
	for i, g := range got {
		if g != `"new" <nil>` {
			t.Errorf("Get after the pool's clear %d = %s, want \"new\"", i, g)
		}
	}
}
