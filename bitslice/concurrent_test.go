package bitslice

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// Readers, writers, Grow, Sync and finally Close all at once. Run under
// -race: the mapped words are only touched through sync/atomic.
func TestConcurrentReadWriteGrowClose(t *testing.T) {
	const (
		writers  = 4
		perWrite = 2000
		start    = 64 * writers
	)
	f := create(t, start)
	var stop atomic.Bool
	var readers, others sync.WaitGroup
	for r := range 4 {
		readers.Go(func() {
			var i uint64
			for !stop.Load() {
				n := f.Len()
				_ = f.Get(i % (n + 64)) // includes indexes past Len
				_ = f.Word(i % (n/64 + 2))
				if i%512 == 0 {
					_ = f.CountOnes()
				}
				i += uint64(r) + 1
			}
		})
	}
	// Writer w owns bits w, w+writers, w+2*writers, ...; it sets them one
	// by one or in sorted batches as the file grows under it.
	for w := range writers {
		others.Go(func() {
			for k := uint64(0); k < perWrite; k++ {
				i := uint64(w) + k*writers
				for i >= f.Len() { // wait for the grower
					if stop.Load() {
						return
					}
				}
				var err error
				if k%2 == 0 {
					err = f.Set(i, true)
				} else {
					err = f.ApplyWords([]WordChange{{Word: i >> 6, Mask: 1 << (i & 63), Bits: 1 << (i & 63)}})
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	others.Go(func() {
		for n := uint64(start); n < writers*perWrite; n += 1500 {
			if err := f.Grow(n + 1500); err != nil {
				t.Error(err)
				return
			}
		}
	})
	others.Go(func() {
		for k := uint64(1); k < 20; k++ {
			f.SetWatermark(k)
			if err := f.Sync(); err != nil {
				t.Error(err)
				return
			}
		}
	})
	others.Wait()
	if n := f.CountOnes(); n != writers*perWrite {
		t.Errorf("%d bits set, want %d", n, writers*perWrite)
	}
	// Close while the readers are still going: they must see an empty file,
	// never fault.
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if f.Get(0) {
		t.Error("Get after Close returned true")
	}
	stop.Store(true)
	readers.Wait()

	g, err := Open(f.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.CountOnes() != writers*perWrite || g.Watermark() != 19 {
		t.Fatalf("reopened: %d bits, watermark %d", g.CountOnes(), g.Watermark())
	}
}

// Close waits for in-flight writes: nothing lands in the file after it.
func TestConcurrentSetAndClose(t *testing.T) {
	for range 20 {
		f, err := Create(filepath.Join(t.TempDir(), "c.bits"), 1<<12)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var wrote atomic.Uint64
		for w := range 4 {
			wg.Go(func() {
				for i := uint64(w); i < 1<<12; i += 4 {
					err := f.Set(i, true)
					if errors.Is(err, kverr.ErrClosed) {
						return
					}
					if err != nil {
						t.Error(err)
						return
					}
					wrote.Add(1)
				}
			})
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		after := wrote.Load()
		info, err := ReadInfo(f.Path())
		if err != nil {
			t.Fatal(err)
		}
		if info.Ones != after {
			t.Fatalf("file holds %d set bits, %d Sets succeeded", info.Ones, after)
		}
		os.Remove(f.Path())
	}
}
