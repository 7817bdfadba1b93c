package stripe

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPadding(t *testing.T) {
	if s := unsafe.Sizeof(Counter{}); s != CacheLine {
		t.Fatalf("Counter is %d bytes, want %d", s, CacheLine)
	}
	if s := unsafe.Sizeof(rwStripe{}) % CacheLine; s != 0 {
		t.Fatalf("rwStripe size not a multiple of the cache line (rem %d)", s)
	}
}

func TestHintSpreadsGoroutines(t *testing.T) {
	const n = 64
	hints := make([]uint32, n)
	var wg sync.WaitGroup
	var start sync.WaitGroup
	start.Add(1)
	for i := range n {
		wg.Go(func() {
			start.Wait() // keep every goroutine (and its stack) alive at once
			hints[i] = Hint(4)
		})
	}
	start.Done()
	wg.Wait()
	seen := map[uint32]bool{}
	for _, h := range hints {
		if h > 15 {
			t.Fatalf("Hint(4) = %d", h)
		}
		seen[h] = true
	}
	// 64 goroutines over 16 stripes: all on a few stripes means the hash
	// ignores the bits that differ between stacks.
	if len(seen) < 8 {
		t.Fatalf("64 goroutines hit only %d of 16 stripes", len(seen))
	}
}

func TestCount(t *testing.T) {
	c := Count()
	if c < 16 || c > 256 || c&(c-1) != 0 {
		t.Fatalf("Count() = %d", c)
	}
}

func TestRWBarrierExcludes(t *testing.T) {
	b := NewRWBarrier(8)
	shared := 0
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 500 {
				m := b.RLock()
				_ = shared // readers only read
				m.RUnlock()
			}
		})
		wg.Go(func() {
			for range 100 {
				b.Lock()
				shared++
				b.Unlock()
			}
		})
	}
	wg.Wait()
	if shared != 400 {
		t.Fatalf("shared = %d, want 400", shared)
	}
	m := b.RLockAt(3)
	locked := make(chan struct{})
	go func() { b.Lock(); close(locked); b.Unlock() }()
	select {
	case <-locked:
		t.Fatal("Lock acquired while a reader held a stripe")
	default:
	}
	m.RUnlock()
	<-locked
}

// TestRWBarrierWaitFree: WaitFree returns once the stripe's holders at the
// call have left, and leaves the stripe free.
func TestRWBarrierWaitFree(t *testing.T) {
	b := NewRWBarrier(4)
	b.WaitFree(3) // no holder: at once
	m := b.RLockAt(3)
	left := make(chan struct{})
	done := make(chan struct{})
	go func() {
		b.WaitFree(3)
		select {
		case <-left:
		default:
			t.Error("WaitFree returned with a reader on the stripe")
		}
		close(done)
	}()
	time.Sleep(10 * time.Millisecond) // WaitFree is waiting (not durably blocked: no synctest)
	close(left)
	m.RUnlock()
	<-done
	if !b.Free(3) {
		t.Fatal("stripe 3 held after WaitFree")
	}
}

func TestRWBarrierFree(t *testing.T) {
	b := NewRWBarrier(4)
	if b.Stripes() != 4 {
		t.Fatalf("Stripes() = %d", b.Stripes())
	}
	m := b.RLockAt(2)
	if b.Free(2) {
		t.Fatal("Free(2) with a reader on stripe 2")
	}
	if !b.Free(1) {
		t.Fatal("Free(1) with no holder")
	}
	m.RUnlock()
	if !b.Free(2) {
		t.Fatal("Free(2) after the reader left")
	}
	// Free undoes its lock: readers and Lock go on.
	b.RLockAt(2).RUnlock()
	b.Lock()
	if b.Free(0) {
		t.Fatal("Free(0) under Lock")
	}
	b.Unlock()
}

// BenchmarkFloor prices the locked instructions a write's admission is
// made of, on one goroutine with the lines in cache (issues 25 and 26: the
// floor of a single write's fixed cost): rlock-runlock (a barrier stripe's
// shared side taken and left, what every write pays), add-pair (two
// atomic adds on a padded counter: the same two locked instructions
// without the mutex), add (one), store (one atomic store, an XCHG on
// amd64: a "release" store costs a locked instruction too in Go) and load
// (one atomic load, a plain move). Each row's ns/op is one of its steps.
func BenchmarkFloor(b *testing.B) {
	b.Run("rlock-runlock", func(b *testing.B) {
		br := NewRWBarrier(16)
		for b.Loop() {
			m := br.At(Hint(32))
			m.RLock()
			m.RUnlock()
		}
	})
	var c Counter
	b.Run("add-pair", func(b *testing.B) {
		for b.Loop() {
			c.Add(1)
			c.Add(-1)
		}
	})
	b.Run("add", func(b *testing.B) {
		for b.Loop() {
			c.Add(1)
		}
	})
	b.Run("store", func(b *testing.B) {
		i := int64(0)
		for b.Loop() {
			c.Store(i)
			i++
		}
	})
	b.Run("load", func(b *testing.B) {
		s := int64(0)
		for b.Loop() {
			s += c.Load()
		}
		floorSink = s
	})
}

var floorSink int64

// BenchmarkFloorW6Set prices the least a single bit Set of W6 can do
// (issue 26: W6's 1,000,000 random Sets of a 4,194,304-bit slice, one call
// each), in a tight loop over the same indexes with nothing else: coalesce
// (the baseline's coalescing into a dense mask and value array, plain
// stores), or (an atomic OR into a packed table of two bits per bit, the
// overlay's 1 MiB), or+word (and a load of the file's word beneath, 512
// KiB), or+word+count (and an atomic add to a set-bit count when the bit
// changes, as every Set does), and barrier+or+word+count (each inside a
// barrier stripe's shared side, what every write takes). Each row's
// ns/set is one change; doc/design.md ("One Set, setone24") quotes it
// against the engine's Set.
func BenchmarkFloorW6Set(b *testing.B) {
	const nbits, n = 4_194_304, 1_000_000
	idx := make([]uint64, n)
	x := uint64(1)
	for k := range idx {
		x ^= x << 13 // xorshift: fixed, repeatable indexes
		x ^= x >> 7
		x ^= x << 17
		idx[k] = x % nbits
	}
	table := make([]uint64, nbits/32)
	words := make([]uint64, nbits/64)
	for k := range words {
		words[k] = uint64(k) * 0x9E3779B97F4A7C15
	}
	dense := make([][2]uint64, nbits/64)
	var count Counter
	br := NewRWBarrier(16)
	rows := []struct {
		name string
		set  func(i uint64)
	}{
		{"coalesce", func(i uint64) {
			d := &dense[i>>6]
			d[0] |= 1 << (i & 63)
			d[1] ^= 1 << (i & 63)
		}},
		{"or", func(i uint64) { atomic.OrUint64(&table[i>>5], 1<<(32+i&31)|1<<(i&31)) }},
		{"or+word", func(i uint64) {
			w := atomic.LoadUint64(&words[i>>6])
			old := atomic.OrUint64(&table[i>>5], 1<<(32+i&31)|1<<(i&31))
			floorSink += int64((w ^ old) & 1)
		}},
		{"or+word+count", func(i uint64) {
			w := atomic.LoadUint64(&words[i>>6])
			if old := atomic.OrUint64(&table[i>>5], 1<<(32+i&31)|1<<(i&31)); (w^old)&1 != 0 {
				count.Add(1)
			}
		}},
		{"barrier+or+word+count", func(i uint64) {
			m := br.At(Hint(32))
			m.RLock()
			w := atomic.LoadUint64(&words[i>>6])
			if old := atomic.OrUint64(&table[i>>5], 1<<(32+i&31)|1<<(i&31)); (w^old)&1 != 0 {
				count.Add(1)
			}
			m.RUnlock()
		}},
	}
	for _, row := range rows {
		b.Run(row.name, func(b *testing.B) {
			for b.Loop() {
				clear(table)
				for _, i := range idx {
					row.set(i)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/set")
		})
	}
}

// TestRWBarrierAt: At(i) is stripe i mod stripes, the lock RLockAt(i)
// takes, and taking its shared side holds off the stripe's Lock.
func TestRWBarrierAt(t *testing.T) {
	b := NewRWBarrier(4)
	if b.At(6) != b.At(2) {
		t.Fatal("At(6) and At(2) differ with 4 stripes")
	}
	m := b.At(6)
	m.RLock()
	if b.Free(2) {
		t.Fatal("Free(2) with a reader through At(6)")
	}
	m.RUnlock()
	if !b.Free(2) {
		t.Fatal("Free(2) after the reader left")
	}
}
