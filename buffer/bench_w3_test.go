package buffer

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/puzpuzpuz/xsync/v4"
)

// W3: contended table scenarios. Run with -cpu 1,2,8; each goroutine has a
// private (slot, ticket) counter and the loop touches no shared atomic.
//
//	go test ./buffer -run '^$' -bench 'BenchmarkW3' -cpu 1,2,8 -count 5

type w3Map interface {
	get(k uint64) bool
	set(k uint64)
	del(k uint64)
}

type w3Table struct{ t *Table[uint64, uint64] }

func (m w3Table) get(k uint64) bool { _, ok := m.t.Get(k); return ok }
func (m w3Table) set(k uint64)      { m.t.Set(k, k, 0) }
func (m w3Table) del(k uint64)      { m.t.Remove(k) }

type w3Mutex struct {
	mu sync.Mutex
	m  map[uint64]uint64
}

func (m *w3Mutex) get(k uint64) bool { m.mu.Lock(); _, ok := m.m[k]; m.mu.Unlock(); return ok }
func (m *w3Mutex) set(k uint64)      { m.mu.Lock(); m.m[k] = k; m.mu.Unlock() }
func (m *w3Mutex) del(k uint64)      { m.mu.Lock(); delete(m.m, k); m.mu.Unlock() }

type w3RWMutex struct {
	mu sync.RWMutex
	m  map[uint64]uint64
}

func (m *w3RWMutex) get(k uint64) bool { m.mu.RLock(); _, ok := m.m[k]; m.mu.RUnlock(); return ok }
func (m *w3RWMutex) set(k uint64)      { m.mu.Lock(); m.m[k] = k; m.mu.Unlock() }
func (m *w3RWMutex) del(k uint64)      { m.mu.Lock(); delete(m.m, k); m.mu.Unlock() }

type w3SyncMap struct{ m sync.Map }

func (m *w3SyncMap) get(k uint64) bool { _, ok := m.m.Load(k); return ok }
func (m *w3SyncMap) set(k uint64)      { m.m.Store(k, k) }
func (m *w3SyncMap) del(k uint64)      { m.m.Delete(k) }

type w3XSync struct{ m *xsync.Map[uint64, uint64] }

func (m w3XSync) get(k uint64) bool { _, ok := m.m.Load(k); return ok }
func (m w3XSync) set(k uint64)      { m.m.Store(k, k) }
func (m w3XSync) del(k uint64)      { m.m.Delete(k) }

var w3Impls = []struct {
	name string
	new  func() w3Map
}{
	{"kvbuf", func() w3Map { return w3Table{NewTable[uint64, uint64](nil)} }},
	{"mutex+map", func() w3Map { return &w3Mutex{m: map[uint64]uint64{}} }},
	{"rwmutex+map", func() w3Map { return &w3RWMutex{m: map[uint64]uint64{}} }},
	{"sync.Map", func() w3Map { return &w3SyncMap{} }},
	{"xsync.Map", func() w3Map { return w3XSync{xsync.NewMap[uint64, uint64]()} }},
}

func BenchmarkW3(b *testing.B) {
	type scenario struct {
		name string
		n    uint64
		step func(m w3Map, slot, ticket uint64, n uint64) bool
	}
	hit := func(m w3Map, slot, ticket, n uint64) bool { return m.get((slot + ticket) % n) }
	churn := func(m w3Map, slot, ticket, n uint64) bool {
		k := n + slot*65536 + ticket%65536
		m.set(k)
		m.del(k)
		return true
	}
	scenarios := []scenario{
		{"hit_same_key", 1, func(m w3Map, _, _, _ uint64) bool { return m.get(0) }},
		{"hit_disjoint-64", 64, hit},
		{"hit_disjoint-1024", 1024, hit},
		{"miss_churn-64", 64, churn},
		{"mixed-64", 64, func(m w3Map, slot, ticket, n uint64) bool {
			if ticket&1 == 0 {
				return hit(m, slot, ticket, n)
			}
			return churn(m, slot, ticket, n)
		}},
	}
	for _, sc := range scenarios {
		for _, impl := range w3Impls {
			b.Run(sc.name+"/"+impl.name, func(b *testing.B) {
				m := impl.new()
				for k := range sc.n {
					m.set(k)
				}
				var slots atomic.Uint64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					slot := slots.Add(1) - 1
					ticket := uint64(0)
					miss := 0
					for pb.Next() {
						if !sc.step(m, slot, ticket, sc.n) {
							miss++
						}
						ticket++
					}
					if miss > 0 {
						b.Errorf("%d lookups missed a present key", miss)
					}
				})
			})
		}
	}
	b.Run("construct", benchConstruct)
}

var sinkAny any

func benchConstruct(b *testing.B) {
	ctors := []struct {
		name string
		new  func(withOne bool) any
	}{
		{"kvbuf", func(one bool) any {
			t := NewTable[uint64, uint64](nil)
			if one {
				t.Set(1, 1, 0)
			}
			return t
		}},
		{"mutex+map", func(one bool) any {
			m := &w3Mutex{m: map[uint64]uint64{}}
			if one {
				m.set(1)
			}
			return m
		}},
		{"rwmutex+map", func(one bool) any {
			m := &w3RWMutex{m: map[uint64]uint64{}}
			if one {
				m.set(1)
			}
			return m
		}},
		{"sync.Map", func(one bool) any {
			m := &w3SyncMap{}
			if one {
				m.set(1)
			}
			return m
		}},
		{"xsync.Map", func(one bool) any {
			m := w3XSync{xsync.NewMap[uint64, uint64]()}
			if one {
				m.set(1)
			}
			return m.m
		}},
	}
	for _, c := range ctors {
		for _, variant := range []string{"empty", "capacity-1"} {
			one := variant == "capacity-1"
			b.Run(variant+"/"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					sinkAny = c.new(one)
				}
			})
		}
		// 1,000 small (one-entry) instances alive: retained heap per instance.
		b.Run("alive-1000/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			keep := make([]any, 1000)
			var per float64
			for b.Loop() {
				runtime.GC()
				var m0, m1 runtime.MemStats
				runtime.ReadMemStats(&m0)
				for i := range keep {
					keep[i] = c.new(true)
				}
				runtime.GC()
				runtime.ReadMemStats(&m1)
				per = float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc)) / float64(len(keep))
				clear(keep)
			}
			b.ReportMetric(per, "B/instance")
		})
	}
}

func TestW3ScenariosCheck(t *testing.T) {
	// The benchmark's step functions report misses; make sure every
	// implementation finds preloaded keys and forgets churned ones.
	for _, impl := range w3Impls {
		m := impl.new()
		for k := range uint64(64) {
			m.set(k)
		}
		for k := range uint64(64) {
			if !m.get(k) {
				t.Fatalf("%s: preloaded %d missing", impl.name, k)
			}
		}
		m.set(100)
		m.del(100)
		if m.get(100) {
			t.Fatalf("%s: churned key present", impl.name)
		}
	}
	_ = fmt.Sprint()
}

// BenchmarkW3Shards measures the shard count (DefaultShards) on the write-
// heavy W3 rows; reads take no lock, so only writers can gain from shards.
//
//	go test ./buffer -run '^$' -bench 'BenchmarkW3Shards' -cpu 1,2,8 -count 5
func BenchmarkW3Shards(b *testing.B) {
	for _, n := range []int{1, 4, 8, 16, 64} {
		b.Run(fmt.Sprintf("miss_churn-64/shards-%d", n), func(b *testing.B) {
			m := w3Table{NewTable[uint64, uint64](&Options{Shards: n})}
			for k := range uint64(64) {
				m.set(k)
			}
			var slots atomic.Uint64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				slot := slots.Add(1) - 1
				for ticket := uint64(0); pb.Next(); ticket++ {
					k := 64 + slot*65536 + ticket%65536
					m.set(k)
					m.del(k)
				}
			})
		})
	}
}
