package buffer

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"weak"
)

func checkTable[K Key, V comparable](t *testing.T, tb *Table[K, V], model map[K]V) {
	t.Helper()
	if got := tb.Len(); got != len(model) {
		t.Fatalf("Len = %d, want %d", got, len(model))
	}
	for k, want := range model {
		got, ok := tb.Get(k)
		if !ok || got != want {
			t.Fatalf("Get(%v) = %v, %v; want %v", k, got, ok, want)
		}
	}
	seen := 0
	tb.Range(func(k K, v V) bool {
		seen++
		if want, ok := model[k]; !ok || want != v {
			t.Fatalf("Range saw %v=%v, model has %v (present %v)", k, v, want, ok)
		}
		return true
	})
	if seen != len(model) {
		t.Fatalf("Range saw %d entries, want %d", seen, len(model))
	}
}

func TestTableBasic(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprint("ordered=", ordered), func(t *testing.T) {
			tb := newTable[uint64, int](4, ordered)
			model := map[uint64]int{}
			if _, ok := tb.Get(1); ok {
				t.Fatal("Get on empty table found a key")
			}
			if tb.Remove(1) {
				t.Fatal("Remove on empty table reported a key")
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range 20000 {
				k := rng.Uint64N(3000)
				switch rng.IntN(4) {
				case 0:
					got := tb.Remove(k)
					_, want := model[k]
					if got != want {
						t.Fatalf("step %d: Remove(%d) = %v, want %v", i, k, got, want)
					}
					delete(model, k)
				default:
					if !tb.Set(k, i, uint64(i)) {
						t.Fatal("Set on open table returned false")
					}
					model[k] = i
				}
			}
			checkTable(t, tb, model)
			if got := tb.MaxOp(); got != 19999 && got != 19998 && got < 19990 {
				t.Fatalf("MaxOp = %d", got)
			}
			if ordered {
				var keys []uint64
				tb.Ascend(func(k uint64, v int) bool {
					if model[k] != v {
						t.Fatalf("Ascend %d=%d, want %d", k, v, model[k])
					}
					keys = append(keys, k)
					return true
				})
				want := make([]uint64, 0, len(model))
				for k := range model {
					want = append(want, k)
				}
				slices.Sort(want)
				if !slices.Equal(keys, want) {
					t.Fatalf("Ascend visited %d keys out of order or wrong (want %d)", len(keys), len(want))
				}
			}
		})
	}
}

func TestTableMaxOpExact(t *testing.T) {
	tb := NewTable[string, int](nil)
	tb.Set("a", 1, 7)
	tb.Set("b", 1, 3)
	tb.Remove("a")
	if got := tb.MaxOp(); got != 7 {
		t.Fatalf("MaxOp = %d, want 7 (removal does not lower it)", got)
	}
}

// TestTableCollisions forces every key onto one hash (and so one shard and
// one probe chain) and checks insert, overwrite, remove and tombstone reuse.
func TestTableCollisions(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		tb := newTable[string, int](8, ordered)
		tb.hashFn = func(string) uint64 { return 42 }
		model := map[string]int{}
		for round := range 5 {
			for i := range 100 {
				k := fmt.Sprint("k", i)
				tb.Set(k, i+round, 0)
				model[k] = i + round
			}
			for i := 0; i < 100; i += 3 {
				k := fmt.Sprint("k", i)
				if !tb.Remove(k) {
					t.Fatalf("Remove(%s) = false", k)
				}
				delete(model, k)
				if _, ok := tb.Get(k); ok {
					t.Fatalf("Get(%s) after Remove found it", k)
				}
			}
			checkTable(t, tb, model)
		}
		if tb.Remove("absent") {
			t.Fatal("Remove(absent) = true")
		}
	}
}

// TestTableZeroKeyVsTombstone: the tombstone marker holds the zero key and a
// zero hash; a real zero key whose hash is forced to 0 must not match it.
func TestTableZeroKeyVsTombstone(t *testing.T) {
	tb := newTable[uint64, int](1, false)
	tb.hashFn = func(uint64) uint64 { return 0 }
	tb.Set(5, 5, 0)
	tb.Remove(5) // slot 0 is now a tombstone
	if _, ok := tb.Get(0); ok {
		t.Fatal("Get(0) matched the tombstone marker")
	}
	tb.Set(0, 9, 0)
	if v, ok := tb.Get(0); !ok || v != 9 {
		t.Fatalf("Get(0) = %v, %v", v, ok)
	}
}

func TestTableKeyKinds(t *testing.T) {
	type myStr string
	type myInt int16
	s := NewTable[myStr, int](nil)
	s.Set("x", 1, 0)
	if v, ok := s.Get("x"); !ok || v != 1 {
		t.Fatal("named string key")
	}
	n := NewTable[myInt, int](nil)
	for i := range myInt(1000) {
		n.Set(-i, int(i), 0)
	}
	for i := range myInt(1000) {
		if v, ok := n.Get(-i); !ok || v != int(i) {
			t.Fatalf("int16 key %d", -i)
		}
	}
	b := NewOrderedTable[int8, int](nil)
	for _, k := range []int8{5, -3, 127, -128, 0} {
		b.Set(k, int(k), 0)
	}
	var got []int8
	b.Ascend(func(k int8, _ int) bool { got = append(got, k); return true })
	if !slices.Equal(got, []int8{-128, -3, 0, 5, 127}) {
		t.Fatalf("int8 order %v", got)
	}
}

func TestTableShardsOption(t *testing.T) {
	for _, c := range []struct{ in, want int }{
		{0, DefaultShards}, {-5, DefaultShards}, {1, 1}, {3, 4}, {8, 8}, {9, 16}, {1 << 30, maxShards},
	} {
		if got := (&Options{Shards: c.in}).shards(); got != c.want {
			t.Errorf("Shards %d -> %d, want %d", c.in, got, c.want)
		}
	}
	if got := (*Options)(nil).shards(); got != DefaultShards {
		t.Errorf("nil options -> %d shards", got)
	}
}

func TestTableLazyAllocation(t *testing.T) {
	tb := NewTable[uint64, int](&Options{Shards: 64})
	if tb.shards.Load() != nil {
		t.Fatal("shards allocated before the first insert")
	}
	tb.Set(1, 1, 0)
	n := 0
	for i, list := 0, tb.shardList(); i < len(list); i++ {
		if list[i].Load() != nil {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d shards allocated after one insert, want 1", n)
	}
}

// TestTableRemoveDropsValue checks that the table holds no reference to a
// removed value: it is collectable right after Remove returns.
func TestTableRemoveDropsValue(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		tb := newTable[uint64, *[64]byte](2, ordered)
		v := new([64]byte)
		w := weak.Make(v)
		tb.Set(1, v, 0)
		tb.Set(2, new([64]byte), 0)
		v = nil
		runtime.GC()
		if w.Value() == nil {
			t.Fatal("value collected while in the table")
		}
		tb.Remove(1)
		runtime.GC()
		runtime.GC()
		if w.Value() != nil {
			t.Fatalf("ordered=%v: removed value still reachable", ordered)
		}
	}
}

func TestTableOverwriteDropsOldValue(t *testing.T) {
	tb := NewOrderedTable[uint64, *[64]byte](nil)
	v := new([64]byte)
	w := weak.Make(v)
	tb.Set(1, v, 0)
	v = nil
	tb.Set(1, new([64]byte), 0)
	runtime.GC()
	runtime.GC()
	if w.Value() != nil {
		t.Fatal("overwritten value still reachable")
	}
}

func TestTableSeal(t *testing.T) {
	tb := NewTable[uint64, int](nil)
	tb.Set(1, 1, 0)
	ran := false
	tb.Seal(func() { ran = true })
	if !ran {
		t.Fatal("Seal did not run fn")
	}
	if tb.Set(2, 2, 0) || tb.Set(1, 5, 0) || tb.Remove(1) {
		t.Fatal("write to a sealed table succeeded")
	}
	if v, ok := tb.Get(1); !ok || v != 1 {
		t.Fatal("read of a sealed table failed")
	}
	tb.clear()
	if tb.Len() != 0 || tb.Bytes() != 0 {
		t.Fatalf("cleared table: Len %d Bytes %d", tb.Len(), tb.Bytes())
	}
	if tb.Set(3, 3, 0) {
		t.Fatal("cleared table accepted a write before unseal")
	}
	tb.unseal()
	if !tb.Set(3, 3, 0) {
		t.Fatal("unsealed table refused a write")
	}
	// Sealing an empty table blocks lazy shard allocation too.
	e := NewTable[uint64, int](nil)
	e.Seal(nil)
	if e.Set(1, 1, 0) {
		t.Fatal("write to a sealed empty table succeeded")
	}
}

func TestTableClearDropsReferences(t *testing.T) {
	tb := NewOrderedTable[uint64, *[64]byte](nil)
	ws := make([]weak.Pointer[[64]byte], 100)
	for i := range ws {
		v := new([64]byte)
		ws[i] = weak.Make(v)
		tb.Set(uint64(i), v, 0)
	}
	tb.Seal(nil)
	tb.clear()
	runtime.GC()
	runtime.GC()
	for i, w := range ws {
		if w.Value() != nil {
			t.Fatalf("value %d reachable after clear", i)
		}
	}
	if tb.capacityBytes() < 100*8 {
		t.Fatal("clear dropped the slot arrays")
	}
}

func TestTableBytes(t *testing.T) {
	tb := NewTable[string, int](nil)
	tb.Set("abc", 1, 0)
	one := tb.Bytes()
	if one < 3+int64(entryOverhead[string, int](false)) {
		t.Fatalf("Bytes = %d", one)
	}
	tb.Set("abc", 2, 0)
	if tb.Bytes() != one {
		t.Fatalf("overwrite changed Bytes %d -> %d", one, tb.Bytes())
	}
	tb.Remove("abc")
	if tb.Bytes() != 0 {
		t.Fatalf("Bytes after removal = %d", tb.Bytes())
	}
}

// TestTableConcurrent: writers own disjoint key ranges and check their own
// writes are visible at once; readers check every value they see was written
// for that key (value = key*1e6 + seq) and never goes backwards.
func TestTableConcurrent(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		tb := newTable[uint64, uint64](4, ordered)
		const writers, keys, steps = 4, 200, 3000
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 9))
				for s := range uint64(steps) {
					k := uint64(w*keys) + rng.Uint64N(keys)
					if rng.IntN(5) == 0 {
						tb.Remove(k)
						if _, ok := tb.Get(k); ok {
							t.Errorf("own remove of %d not visible", k)
						}
						continue
					}
					v := k*1e6 + s
					tb.Set(k, v, s)
					if got, ok := tb.Get(k); !ok || got != v {
						t.Errorf("own write %d=%d: Get = %d, %v", k, v, got, ok)
						return
					}
				}
			}()
		}
		var rg sync.WaitGroup
		for r := range 2 {
			rg.Add(1)
			go func() {
				defer rg.Done()
				rng := rand.New(rand.NewPCG(uint64(r), 10))
				for {
					select {
					case <-stop:
						return
					default:
					}
					k := rng.Uint64N(writers * keys)
					if v, ok := tb.Get(k); ok && v/1e6 != k {
						t.Errorf("Get(%d) = %d: a value of another key", k, v)
						return
					}
					if ordered && r == 0 && rng.IntN(200) == 0 {
						prev := int64(-1)
						tb.Ascend(func(k, v uint64) bool {
							if int64(k) <= prev || v/1e6 != k {
								t.Errorf("Ascend: %d after %d (value %d)", k, prev, v)
								return false
							}
							prev = int64(k)
							return true
						})
					}
				}
			}()
		}
		wg.Wait()
		close(stop)
		rg.Wait()
	}
}
