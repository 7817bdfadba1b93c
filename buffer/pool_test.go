package buffer

import (
	"context"
	"fmt"
	"testing"
)

func filledTable(n int) *kvTable {
	kv := NewKV(nil, nil)
	t := kv.newTable()
	for i := range n {
		t.Set(fmt.Sprint("k", i), valOf([]byte("v")), 1)
	}
	t.Seal(nil)
	return t
}

func TestPoolBounds(t *testing.T) {
	small := filledTable(10)
	p := newTablePool[string, kvVal](small.capacityBytes())
	if !p.put(small) {
		t.Fatal("table within the bound was not kept")
	}
	if small.Len() != 0 || small.Bytes() != 0 || small.MaxOp() != 0 {
		t.Fatal("pooled table not cleared")
	}
	if small.Set("x", kvVal{}, 1) {
		t.Fatal("pooled table accepts writes (must stay sealed)")
	}
	if p.put(filledTable(10)) {
		t.Fatal("pool exceeded its byte bound")
	}
	if got := p.get(0); got != small {
		t.Fatal("get did not return the pooled table")
	}
	if p.get(0) != nil {
		t.Fatal("get from an empty pool returned a table")
	}
	pinned := filledTable(10)
	pinned.pins.Add(1)
	if p.put(pinned) || pinned.Len() == 0 {
		t.Fatal("a pinned table was pooled or cleared")
	}
	off := newTablePool[string, kvVal](0)
	if off.put(filledTable(1)) || off.get(0) != nil {
		t.Fatal("disabled pool kept a table")
	}
	// Depth per class.
	big := newTablePool[string, kvVal](1 << 30)
	for i := range poolDepth + 1 {
		kept := big.put(filledTable(10))
		if want := i < poolDepth; kept != want {
			t.Fatalf("put %d kept=%v, want %v", i, kept, want)
		}
	}
	// Closest class first.
	large := filledTable(5000)
	lc := large.capacityBytes()
	big.put(large)
	if got := big.get(lc); got != large {
		t.Fatal("get(large) did not return the large table")
	}
}

func TestPoolOptions(t *testing.T) {
	if (&Options{PoolBytes: -1}).poolBytes() != 0 {
		t.Fatal("negative PoolBytes must disable the pool")
	}
	if poolEnabled && (*Options)(nil).poolBytes() != defaultPoolBytes {
		t.Fatal("default PoolBytes")
	}
	if poolEnabled && (&Options{PoolBytes: 5}).poolBytes() != 5 {
		t.Fatal("explicit PoolBytes")
	}
}

// TestKVSteadyCyclesReuseTables: with the pool, the table released by one
// flush becomes a later generation's active table; without it, every
// generation starts fresh.
func TestKVSteadyCyclesReuseTables(t *testing.T) {
	s := openStore(t)
	for _, pool := range []int64{0, -1} {
		kv := NewKV(s, &Options{PoolBytes: pool})
		seen := map[*kvTable]bool{}
		reused := 0
		for c := range 6 {
			if seen[kv.active.Load()] {
				reused++
			}
			seen[kv.active.Load()] = true
			for i := range 100 {
				kv.Put(fmt.Appendf(nil, "k%d", i), []byte("v"), uint64(c+1))
			}
			kv.Freeze()
			if err := kv.Apply(context.Background(), uint64(c+1)); err != nil {
				t.Fatal(err)
			}
			kv.Release()
		}
		if want := poolEnabled && pool == 0; (reused > 0) != want {
			t.Fatalf("PoolBytes %d: %d generations reused a table", pool, reused)
		}
	}
}

// BenchmarkPoolCycle is one generation of a table's life (10,000 new keys,
// seal, release) with a recycled table against a fresh one each time: what
// pooling saves, and what a pool miss costs (the fresh row).
//
//	go test ./buffer -run '^$' -bench 'BenchmarkPoolCycle' -count 5
func BenchmarkPoolCycle(b *testing.B) {
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = fmt.Sprint("key-", i)
	}
	val := valOf(make([]byte, 16))
	kv := NewKV(nil, nil)
	for _, pooled := range []bool{true, false} {
		name := "fresh"
		if pooled {
			name = "pooled"
		}
		b.Run(name, func(b *testing.B) {
			p := newTablePool[string, kvVal](1 << 30)
			b.ReportAllocs()
			for b.Loop() {
				t := p.get(0)
				if t == nil || !pooled {
					t = kv.newTable()
				} else {
					t.unseal()
				}
				for _, k := range keys {
					t.Set(k, val, 1)
				}
				t.Seal(nil)
				if pooled {
					p.put(t)
				}
			}
		})
	}
}
