package buffer

import (
	"errors"
	"fmt"
	"testing"

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
	if n := g.Retain(); n < 0 {
		r.t.Fatalf("Retain returned %d bytes", n)
	}
	if n := g.Filter(); n <= 0 {
		r.t.Fatalf("Filter returned %d bytes", n)
	}
	return g
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
		var k string
		switch i % 4 {
		case 0:
			k = fmt.Sprintf("k%07d", i) // 8 bytes
		case 1:
			k = fmt.Sprintf("s%d", i)
		case 2:
			k = fmt.Sprintf("inline-key-%012d", i) // 23 bytes
		default:
			k = fmt.Sprintf("a-long-key-that-lives-in-the-arena-%d", i)
		}
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
