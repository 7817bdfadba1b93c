package bitslice

import (
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// W1 sizes (doc/workloads.md).
const (
	w1Bits    = 4_194_304
	w1Sets    = 1_000_000
	w1Lookups = 1_000_000
)

// w1File builds the W1 setup: a 4,194,304-bit file with 1,000,000 seeded
// random Sets, synced, and 1,000,000 pre-generated lookup indexes.
func w1File(b *testing.B) (*File, []uint64) {
	b.Helper()
	f, err := Create(filepath.Join(b.TempDir(), "w1.bits"), w1Bits)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	rng := rand.New(rand.NewPCG(1, 2))
	for range w1Sets {
		if err := f.Set(rng.Uint64N(w1Bits), rng.IntN(2) == 1); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	lookups := make([]uint64, w1Lookups)
	for k := range lookups {
		lookups[k] = rng.Uint64N(w1Bits)
	}
	return f, lookups
}

var sink bool

// BenchmarkW1 is the raw floor of W1: one op is one Get over the flushed
// slice with nothing pending.
func BenchmarkW1(b *testing.B) {
	f, lookups := w1File(b)
	b.Run("lookup-without-pending-changes/raw", func(b *testing.B) {
		b.ReportAllocs()
		var hit bool
		k := 0
		for b.Loop() {
			hit = hit != f.Get(lookups[k])
			if k++; k == len(lookups) {
				k = 0
			}
		}
		sink = hit
	})
}

// BenchmarkSet is the raw write floor on the W1 slice: one op is one Set.
func BenchmarkSet(b *testing.B) {
	f, lookups := w1File(b)
	b.Run("W1-size/raw", func(b *testing.B) {
		b.ReportAllocs()
		k := 0
		for b.Loop() {
			if err := f.Set(lookups[k], k&1 == 0); err != nil {
				b.Fatal(err)
			}
			if k++; k == len(lookups) {
				k = 0
			}
		}
	})
}

// BenchmarkSync: one op is one Sync that persists a new watermark, after
// dirtying n random bits (the msync cost grows with the dirty pages).
func BenchmarkSync(b *testing.B) {
	f, lookups := w1File(b)
	for _, dirty := range []int{0, 1000} {
		b.Run("dirty-"+itoa(dirty), func(b *testing.B) {
			b.ReportAllocs()
			k := 0
			for b.Loop() {
				for range dirty {
					_ = f.Set(lookups[k], true)
					if k++; k == len(lookups) {
						k = 0
					}
				}
				f.SetWatermark(f.Watermark() + 1)
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGrow: one op is one Grow by step bits (allocate, fsync, zero,
// msync, header write; plus a remap each time the reservation doubles).
func BenchmarkGrow(b *testing.B) {
	for _, step := range []uint64{64, 1 << 16} {
		b.Run("step-"+itoa(int(step)), func(b *testing.B) {
			b.ReportAllocs()
			f, err := Create(filepath.Join(b.TempDir(), "g.bits"), 0)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			for b.Loop() {
				if err := f.Grow(f.Len() + step); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkW6 is the bitslice floor of W6: 1,000,000 random bit changes
// applied directly to the mapped slice (as sorted word changes) and synced.
// One op is one round of 1M changes.
func BenchmarkW6(b *testing.B) {
	f, err := Create(filepath.Join(b.TempDir(), "w6.bits"), w1Bits)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	byWord := map[uint64]*WordChange{}
	for range 1_000_000 {
		i := rng.Uint64N(w1Bits)
		c := byWord[i>>6]
		if c == nil {
			c = &WordChange{Word: i >> 6}
			byWord[i>>6] = c
		}
		bit := uint64(1) << (i & 63)
		c.Mask |= bit
		if rng.IntN(2) == 1 {
			c.Bits |= bit
		} else {
			c.Bits &^= bit
		}
	}
	changes := make([]WordChange, 0, len(byWord))
	for _, c := range byWord {
		changes = append(changes, *c)
	}
	slices.SortFunc(changes, func(x, y WordChange) int { return int(x.Word) - int(y.Word) })
	b.Run("flush-bits-1m/direct-apply+msync", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := f.ApplyWords(changes); err != nil {
				b.Fatal(err)
			}
			f.SetWatermark(f.Watermark() + 1)
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			// Flip the changes so the next round dirties every page again.
			for k := range changes {
				changes[k].Bits = ^changes[k].Bits
			}
		}
	})
}

// Read-path designs compared on the same mapped words:
//
//   - atomic-view: File.Get — atomic pointer to an immutable view,
//     superseded mappings kept while a view of them is reachable (what the
//     package ships);
//   - rwmutex: a sync.RWMutex read lock around every read, Grow/Close taking
//     the write lock;
//   - reader-count: one shared atomic counter entered and left around every
//     read, Close waiting for it to drain.
type rwmutexReader struct {
	mu    sync.RWMutex
	words []uint64
	nbits uint64
}

func (r *rwmutexReader) Get(i uint64) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if i >= r.nbits {
		return false
	}
	return atomic.LoadUint64(&r.words[i>>6])>>(i&63)&1 != 0
}

type readerCountReader struct {
	readers atomic.Int64
	closed  atomic.Bool
	words   []uint64
	nbits   uint64
}

func (r *readerCountReader) Get(i uint64) bool {
	r.readers.Add(1)
	defer r.readers.Add(-1)
	if r.closed.Load() || i >= r.nbits {
		return false
	}
	return atomic.LoadUint64(&r.words[i>>6])>>(i&63)&1 != 0
}

// BenchmarkReadPath: one op is one Get. Run with -cpu 1,2,8: every
// goroutine does its own lookups over the W1 slice.
func BenchmarkReadPath(b *testing.B) {
	f, lookups := w1File(b)
	v := f.cur.Load()
	rw := &rwmutexReader{words: v.words, nbits: v.nbits}
	rc := &readerCountReader{words: v.words, nbits: v.nbits}
	for _, d := range []struct {
		name string
		get  func(uint64) bool
	}{
		{"atomic-view", f.Get},
		{"rwmutex", rw.Get},
		{"reader-count", rc.Get},
	} {
		b.Run(d.name, func(b *testing.B) {
			b.ReportAllocs()
			var start atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				k := int(start.Add(200_003)) % len(lookups)
				hit := false
				for pb.Next() {
					hit = hit != d.get(lookups[k])
					if k++; k == len(lookups) {
						k = 0
					}
				}
				if hit {
					sink = hit
				}
			})
		})
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}
