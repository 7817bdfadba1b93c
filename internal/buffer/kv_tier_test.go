package buffer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// retainOldest writes the oldest queued generation and retains it with its
// filters (what the engine's tier does: Retain, then Filter while the
// generation is in the tier).
func (r *kvRig) retainOldest() *KVGen {
	r.t.Helper()
	if !r.write(false) {
		r.t.Fatal("nothing to retain")
	}
	g := r.queue[0]
	r.queue = r.queue[1:]
	if n := g.Retain(true); n < 0 {
		r.t.Fatalf("Retain returned %d bytes", n)
	}
	if n := g.Filter(); n <= 0 {
		r.t.Fatalf("Filter returned %d bytes", n)
	}
	return g
}

// slotModeKey returns key i of a set that takes every slot mode in turn:
// 8 bytes, short, inline up to 24 bytes, long (in the arena).
func slotModeKey(i int) string {
	switch i % 4 {
	case 0:
		return fmt.Sprintf("k%07d", i) // 8 bytes
	case 1:
		return fmt.Sprintf("s%d", i)
	case 2:
		return fmt.Sprintf("inline-key-%012d", i) // 23 bytes
	default:
		return fmt.Sprintf("a-long-key-that-lives-in-the-arena-%d", i)
	}
}

// TestTierFilter: tier rule T5. A retained table's filter holds every key of
// the table (keys of every slot mode: 8 bytes, short, inline up to 24 bytes,
// long), rules out most absent keys, and a read of a key the filter rules
// out still sees the table's range tombstones: a range deletion in a newer
// retained generation hides the older generation's value of a key it does
// not hold (without the check the older tier table answers with the
// deleted value).
func TestTierFilter(t *testing.T) {
	r := newKVRig(t, nil)
	var keys []string
	for i := range 3000 {
		k := slotModeKey(i)
		keys = append(keys, k)
		r.put(k, "v1-"+k)
	}
	r.put("rd-b", "old")
	r.freeze()
	g1 := r.retainOldest()
	if len(g1.tables) == 0 {
		t.Fatal("generation without tables")
	}
	for _, tb := range g1.tables {
		f := tb.filter.Load()
		if f == nil {
			t.Fatal("retained table without a filter after Filter")
		}
		for _, k := range append(keys, "rd-b") {
			h, _ := keyHash(k, tb.seed)
			if !f.mayContain(h) {
				t.Fatalf("filter rules out %q, which the table holds", k)
			}
		}
		fp := 0
		const absent = 100000
		for i := range absent {
			h, _ := keyHash(fmt.Sprintf("absent-%d", i), tb.seed)
			if f.mayContain(h) {
				fp++
			}
		}
		if fp > absent/50 {
			t.Fatalf("filter lets %d of %d absent keys through", fp, absent)
		}
	}
	// A newer generation with only a range deletion over rd-b (its filter
	// rules rd-b out) and the store's copy overwritten behind the buffer's
	// back, so that only the tier can answer.
	r.delRange(ptr("rd-a"), ptr("rd-c"))
	r.freeze()
	r.retainOldest()
	b := r.st.NewBatch()
	b.Put(1, []byte("rd-b"), []byte("store"))
	if c, err := r.st.Commit(b); err != nil || c.Wait() != nil {
		t.Fatal(err)
	}
	if v, err := r.kv.Get([]byte("rd-b")); !errors.Is(err, kverr.ErrNotFound) {
		t.Fatalf("Get(rd-b) = %q, %v; want the newer retained range deletion to hide it", v, err)
	}
	v, err := r.kv.GetAppend(nil, []byte(keys[2]))
	if err != nil || string(v) != "v1-"+keys[2] {
		t.Fatalf("Get(%q) = %q, %v", keys[2], v, err)
	}
	if has, err := r.kv.Has([]byte("rd-b")); has || err != nil {
		t.Fatalf("Has(rd-b) = %v, %v; want the newer retained range deletion to hide it", has, err)
	}
	// Has and GetMany ask the filter too: with keys[2] and keys[3]
	// changed in the store behind the buffer's back, the tier answers
	// while its filters say "maybe"; filters that rule everything out
	// send the reads to the store.
	b = r.st.NewBatch()
	b.Put(1, []byte(keys[2]), []byte("store"))
	b.Delete(1, []byte(keys[3]))
	if c, err := r.st.Commit(b); err != nil || c.Wait() != nil {
		t.Fatal(err)
	}
	many := [][]byte{[]byte("rd-b"), []byte(keys[2]), []byte(keys[3]), []byte("absent")}
	check := func(when, v2 string, has3 bool) {
		t.Helper()
		vals := make([][]byte, len(many))
		if _, err := r.kv.GetMany(many, vals, nil); err != nil {
			t.Fatal(err)
		}
		want3 := ""
		if has3 {
			want3 = "v1-" + keys[3]
		}
		if vals[0] != nil || string(vals[1]) != v2 || string(vals[2]) != want3 || vals[3] != nil {
			t.Errorf("%s: GetMany = %q, want [nil %q %q nil]", when, vals, v2, want3)
		}
		if has, err := r.kv.Has([]byte(keys[3])); has != has3 || err != nil {
			t.Errorf("%s: Has(%q) = %v, %v; want %v", when, keys[3], has, err, has3)
		}
		if has, err := r.kv.Has([]byte("rd-b")); has || err != nil {
			t.Errorf("%s: Has(rd-b) = %v, %v", when, has, err)
		}
	}
	check("filters built", "v1-"+keys[2], true)
	for _, tb := range g1.tables {
		tb.filter.Store(newTierFilter(1)) // no bit set: rules every key out
	}
	check("filters ruling out every key", "store", false)
	// Evicting recycles the tables: the filter goes with the table's life.
	g1.Evict()
	for _, tb := range g1.tables {
		if tb.filter.Load() != nil && tb.keyCount() == 0 {
			t.Fatal("a cleared table kept its filter")
		}
	}
}

func ptr(s string) *string { return &s }

// TestTierCompact: tier rule T6. A generation frozen after one with many
// more keys has slot arrays sized for those (the next active table is sized
// for the last one's keys); Retain compacts them to its own keys, so the
// bytes it returns are a fraction of those it held while pending, and the
// keys of every slot mode, overwritten values, deletions and a range
// deletion read the same from the smaller array. Readers race the
// compaction at GOMAXPROCS 8 and check every key on every pass (with the
// store's copies changed behind the buffer's back, only the table can
// answer): under -race, an array published before it is filled (mutation
// 643) is a reported race, and a reader that loads it misses keys. A
// snapshot pinned before the compaction iterates the same changes after
// it. A table whose arrays its keys fill is left as it is, and so is one
// the tier would evict at once (compacted, still over its budget).
func TestTierCompact(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	// One shard: its array's compaction (thousands of keys placed) is long
	// enough for the readers to meet it on every run.
	r := newKVRig(t, &Options{Shards: 1})
	for i := range 40000 {
		r.put(fmt.Sprintf("big-%06d", i), "b")
	}
	r.put("rd-b", "in the store")
	r.flush()

	want := map[string]string{} // key -> value; "" for a deleted key
	var keys []string
	for i := range 4000 {
		k := slotModeKey(i)
		keys = append(keys, k)
		r.put(k, "v1-"+k)
		want[k] = "v1-" + k
		switch {
		case i%7 == 0:
			r.del(k)
			want[k] = ""
		case i%5 == 0:
			r.put(k, "v2-"+k) // a chain of two values
			want[k] = "v2-" + k
		}
	}
	r.delRange(ptr("rd-a"), ptr("rd-c"))
	keys = append(keys, "rd-b")
	want["rd-b"] = ""

	r.bar.Lock()
	snap := r.kv.Snapshot()
	r.bar.Unlock()
	defer snap.Close()
	sst, err := r.st.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer sst.Close()
	snap.SetStore(sst)

	r.freeze()
	g := r.queue[0]
	var pending, arrays int64 // the generation's bytes, and its slot arrays'
	for _, tb := range g.tables {
		pending += tb.bytes()
		for _, sh := range tb.shards.Load().s {
			arrays += sh.arr.Load().bytes()
		}
	}
	if !r.write(false) {
		t.Fatal("nothing written")
	}
	r.queue = r.queue[1:]
	b := r.st.NewBatch()
	for _, k := range keys {
		b.Put(1, []byte(k), []byte("store"))
	}
	if c, err := r.st.Commit(b); err != nil || c.Wait() != nil {
		t.Fatal(err)
	}

	check := func(k string, v []byte, err error) error {
		switch w := want[k]; {
		case w == "" && !errors.Is(err, kverr.ErrNotFound):
			return fmt.Errorf("Get(%q) = %q, %v; want not found", k, v, err)
		case w != "" && (err != nil || string(v) != w):
			return fmt.Errorf("Get(%q) = %q, %v; want %q", k, v, err, w)
		}
		return nil
	}
	stop := make(chan struct{})
	var passes [4]atomic.Int64
	errc := make(chan error, len(passes))
	for w := range passes {
		many := make([][]byte, len(keys))
		for i, k := range keys {
			many[i] = []byte(k)
		}
		vals := make([][]byte, len(many))
		go func() {
			var buf []byte
			for {
				for _, k := range keys {
					var err error
					buf, err = r.kv.GetAppend(buf[:0], []byte(k))
					if err := check(k, buf, err); err != nil {
						errc <- err
						return
					}
					if has, err := r.kv.Has([]byte(k)); err != nil || has != (want[k] != "") {
						errc <- fmt.Errorf("Has(%q) = %v, %v", k, has, err)
						return
					}
					if w == 0 { // the pinned snapshot reads the same table
						v, err := snap.Get([]byte(k))
						if err := check(k, v, err); err != nil {
							errc <- fmt.Errorf("snapshot: %w", err)
							return
						}
					}
				}
				if _, err := r.kv.GetMany(many, vals, nil); err != nil {
					errc <- err
					return
				}
				for i, k := range many {
					if vals[i] == nil && want[string(k)] == "" {
						continue // deleted: GetMany leaves it nil
					}
					if err := check(string(k), vals[i], nil); err != nil {
						errc <- fmt.Errorf("GetMany: %w", err)
						return
					}
				}
				passes[w].Add(1)
				select {
				case <-stop:
					errc <- nil
					return
				default:
				}
			}
		}()
	}
	var at [len(passes)]int64
	for w := range passes {
		at[w] = passes[w].Load()
	}
	// The snapshot's iterators, over everything (the store's 40000 older
	// keys beneath the table's): one opened and stepped a third of the way
	// before the compaction, finished after it, and one opened after.
	all := map[string]string{}
	for i := range 40000 {
		all[fmt.Sprintf("big-%06d", i)] = "b"
	}
	for k, v := range want {
		if v != "" {
			all[k] = v
		}
	}
	early, err := snap.NewIter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	step := func(it *Iter, ok bool) bool {
		seen[string(it.Key())] = string(it.Value())
		return it.Next()
	}
	ok := early.First()
	for i := 0; ok && i < len(all)/3; i++ {
		ok = step(early, ok)
	}
	_, estimate := g.TierBytes()
	retained := g.Retain(true)
	for w := range passes { // every reader makes two whole passes after it
		for passes[w].Load() < at[w]+2 && len(errc) == 0 {
			runtime.Gosched()
		}
	}
	close(stop)
	for range passes {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	g.Filter()

	if retained <= 0 || retained*4 > pending {
		t.Errorf("Retain returned %d bytes, pending held %d: want under a quarter", retained, pending)
	}
	var now, compacted int64
	for _, tb := range g.tables {
		now += tb.heldBytes()
		if tb.ord.Load() != nil {
			t.Error("a compacted table kept the order of its old arrays")
		}
		for _, sh := range tb.shards.Load().s {
			if a := sh.arr.Load(); a != nil && a.groups != uint64(groupsFor(int(a.n))) {
				t.Errorf("a shard of %d keys kept %d groups", a.n, a.groups)
			}
			compacted += sh.arr.Load().bytes()
		}
	}
	if now != retained || retained != pending-arrays+compacted || retained != estimate {
		t.Errorf("the tables hold %d bytes, Retain returned %d, want %d (%d pending, arrays of %d bytes for %d; estimated %d)",
			now, retained, pending-arrays+compacted, pending, arrays, compacted, estimate)
	}
	for _, k := range keys {
		v, err := r.kv.Get([]byte(k))
		if err := check(k, v, err); err != nil {
			t.Fatal(err)
		}
	}

	// The snapshot pinned before reads the same changes through its
	// iterators (the late one sorts the new arrays) and its point reads.
	for ok {
		ok = step(early, ok)
	}
	if err := early.Close(); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(seen, all) {
		t.Fatalf("the iterator stepped across the compaction saw %d keys, want %d (or other values)", len(seen), len(all))
	}
	late, err := snap.NewIter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	clear(seen)
	for ok := late.First(); ok; {
		ok = step(late, ok)
	}
	if err := late.Close(); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(seen, all) {
		t.Fatalf("the iterator opened after the compaction saw %d keys, want %d (or other values)", len(seen), len(all))
	}
	for _, k := range keys {
		v, err := snap.Get([]byte(k))
		if err := check(k, v, err); err != nil {
			t.Fatalf("snapshot: %v", err)
		}
	}

	// A generation as large as the arrays it was given is kept as it is.
	for i := range 40000 {
		r.put(fmt.Sprintf("big-%06d", i), "c")
	}
	r.freeze()
	g2 := r.queue[0]
	arrs := map[*shard]*slotArray{}
	for _, tb := range g2.tables {
		for _, sh := range tb.shards.Load().s {
			arrs[sh] = sh.arr.Load()
		}
	}
	if g2 == g || !r.write(false) {
		t.Fatal("no generation of 40000 keys to retain")
	}
	r.queue = r.queue[1:]
	g2.Retain(true)
	if len(arrs) == 0 {
		t.Fatal("no slot arrays")
	}
	for sh, a := range arrs {
		if sh.arr.Load() != a {
			t.Fatalf("a full shard's array (%d keys, %d groups) was replaced", a.n, a.groups)
		}
	}

	// A small generation after that one, which the tier would evict at
	// once (over the budget even compacted), is not copied.
	for i := range 100 {
		r.put(fmt.Sprintf("late-%03d", i), "x")
	}
	r.freeze()
	g3 := r.queue[0]
	var pending3 int64
	clear(arrs)
	for _, tb := range g3.tables {
		pending3 += tb.bytes()
		if _, c := tb.tierBytes(); c*4 > tb.bytes() {
			t.Fatalf("a 100-key table after a 40000-key one would compact to %d of %d bytes", c, tb.bytes())
		}
		for _, sh := range tb.shards.Load().s {
			arrs[sh] = sh.arr.Load()
		}
	}
	if !r.write(false) {
		t.Fatal("nothing written")
	}
	r.queue = r.queue[1:]
	if n := g3.Retain(false); n != pending3 {
		t.Fatalf("Retain over the budget returned %d bytes, want the %d pending", n, pending3)
	}
	for sh, a := range arrs {
		if sh.arr.Load() != a {
			t.Fatal("a generation over the tier's budget was compacted")
		}
	}
}

// TestTierCountsPooledArrays: a table reused from the pool holds slot
// arrays its bytes no longer count (the pool's bound covered them), but the
// read tier holds them like any other: Retain returns them in the bytes the
// tier is charged (heldBytes), and TierBytes foretells it. Retain used
// to return the table's bytes alone, so a tier of pooled tables held more
// than its budget said.
func TestTierCountsPooledArrays(t *testing.T) {
	if !poolEnabled {
		t.Skip("pooling compiled out (kvbuf_nopool)")
	}
	r := newKVRig(t, &Options{Shards: 1, PoolBytes: 64 << 20})
	gen := func(from int) *KVGen {
		for i := range 1000 {
			r.put(fmt.Sprintf("k%07d", from+i), "v")
		}
		r.freeze()
		g := r.queue[0]
		if !r.write(false) {
			t.Fatal("nothing written")
		}
		r.queue = r.queue[1:]
		return g
	}
	gen(0).Release() // its table goes to the pool ...
	g2 := gen(1000)  // ... and comes back as the active table g2's freeze made
	g2.Release()
	g3 := gen(2000)
	a := g3.tables[0].shards.Load().s[0].arr.Load()
	if !a.cleared {
		t.Fatal("generation 3's table is not the pooled one")
	}
	_, est := g3.TierBytes()
	n := g3.Retain(true)
	if n < a.bytes() || n != est {
		t.Fatalf("Retain of a pooled table returned %d bytes (foretold %d); its slot array alone holds %d", n, est, a.bytes())
	}
}

// BenchmarkTierCompact measures what tier rule T6 adds to a release: a
// generation of 64k W6 keys (8-byte keys, 16-byte values) in a table sized
// for 1M (the next active table after a 1M-key generation), retained
// with compaction and without, in rotating order within each op, and the
// filter built afterwards (tier rule T5, which every retained generation
// pays). Metrics: ns per key of each and the compaction's bytes saved per
// key. No store: KVGen.Retain needs none.
func BenchmarkTierCompact(b *testing.B) {
	const small, large = 1 << 16, 1 << 20
	kv, err := NewKV(nil, 1, nil, &Options{PoolBytes: -1})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	val := make([]byte, 16)
	var g uint64
	oversized := func() *KVGen {
		kv.view.Load().active.groups = groupsFor(large / kv.opt.shards) // as newActive after a 1M-key generation
		for range small {
			if err := kv.Put(binary.BigEndian.AppendUint64(nil, rng.Uint64()), val); err != nil {
				b.Fatal(err)
			}
		}
		g++
		return kv.Freeze(g)
	}
	var compactNs, keepNs, filterNs, saved int64
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		gens := [2]*KVGen{oversized(), oversized()}
		b.StartTimer()
		for j := range 2 {
			d := (i + j) % 2
			before := gens[d].tables[0].bytes()
			t0 := time.Now()
			n := gens[d].Retain(d == 0)
			el := time.Since(t0).Nanoseconds()
			if d == 0 {
				compactNs += el
				saved += before - n
				t0 = time.Now()
				gens[d].Filter()
				filterNs += time.Since(t0).Nanoseconds()
			} else {
				keepNs += el
			}
		}
		b.StopTimer()
		gens[0].Evict()
		gens[1].Evict()
		b.StartTimer()
	}
	per := float64(b.N) * small
	b.ReportMetric(float64(compactNs)/per, "retain-compact-ns/key")
	b.ReportMetric(float64(keepNs)/per, "retain-ns/key")
	b.ReportMetric(float64(filterNs)/per, "filter-ns/key")
	b.ReportMetric(float64(saved)/per, "bytes-saved/key")
}
