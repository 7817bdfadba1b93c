package kvbuf

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestBitsGetClosedOnceCloseSeen: Bits.Get reports Close from the
// overlay's view, not from the engine's closing flag (B12), so DB.Close
// must mark every bitslice closed before it stores the flag and before it
// closes the files. Readers spin on two bitslices whose every bit is 1
// (half of them pending, so that the final flush takes a while) while Close
// runs: a Get after a read of the same goroutine returned ErrClosed must
// return ErrClosed too (mutation 460: the marks after the final flush),
// and a Get that returns no error must return 1, never a zero the file
// does not hold (mutation 610: the file's Close zeroes its mappings under
// the views).
func TestBitsGetClosedOnceCloseSeen(t *testing.T) {
	ctx := context.Background()
	const nbits = 1 << 22
	rounds := 4
	if testing.Short() {
		rounds = 2
	}
	for round := range rounds {
		db, err := Open(t.TempDir(), &Options{FlushInterval: -1, MaxPendingBytes: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		var bs [2]*Bits
		for k, name := range []string{"a", "b"} {
			if bs[k], err = db.Bits(name); err != nil {
				t.Fatal(err)
			}
			if err := bs[k].SetRange(ctx, 0, nbits, true, 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(uint64(round), 7))
		idx := make([]uint64, 1<<18)
		vals := make([]bool, len(idx))
		for j := range idx {
			idx[j], vals[j] = rng.Uint64N(nbits), true
		}
		for _, b := range bs {
			if err := b.SetMany(ctx, idx, vals, 0); err != nil {
				t.Fatal(err)
			}
		}

		var closed atomic.Bool // Close returned
		var started sync.WaitGroup
		var readers sync.WaitGroup
		var fail atomic.Pointer[string]
		failf := func(msg string) { fail.CompareAndSwap(nil, &msg) }
		for r := range 2 {
			started.Add(1)
			readers.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(round), uint64(r)))
				first := true
				for after := 0; after < 1000; {
					if first {
						started.Done()
						first = false
					}
					if closed.Load() {
						after++
					}
					_, lerr := bs[r].Len()
					for _, b := range bs {
						i := rng.Uint64N(nbits)
						v, err := b.Get(i)
						switch {
						case err == nil && !v:
							failf("Get of a set bit returned 0 and no error while Close ran")
						case err != nil && !errors.Is(err, ErrClosed):
							failf("Get: " + err.Error())
						case errors.Is(lerr, ErrClosed) && err == nil:
							failf("Get returned no error after Len returned ErrClosed")
						}
					}
					if fail.Load() != nil {
						return
					}
				}
			})
		}
		started.Wait()
		time.Sleep(time.Millisecond)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		closed.Store(true)
		readers.Wait()
		if msg := fail.Load(); msg != nil {
			t.Fatalf("round %d: %s", round, *msg)
		}
		for _, b := range bs {
			if _, err := b.Get(0); !errors.Is(err, ErrClosed) {
				t.Fatalf("round %d: Get after Close: %v", round, err)
			}
		}
	}
}

// TestBitsCloseReleasesMappings: DB.Close leaves no mapping of a bitslice
// file behind once the garbage collector has run, though the host keeps
// the bitslice's handle: the file's Close leaves its mappings in place for
// the reads that loaded a view before it, and the overlay lets go of them
// (DropFile, B12; mutation 612 does not). The handle then reports
// ErrClosed.
func TestBitsCloseReleasesMappings(t *testing.T) {
	if _, err := os.ReadFile("/proc/self/maps"); err != nil {
		t.Skip("no /proc/self/maps")
	}
	ctx := context.Background()
	db, err := Open(t.TempDir(), &Options{FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := db.Bits("kept")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetRange(ctx, 0, 1<<16, true, 0); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := b.Get(100); !v || err != nil {
		t.Fatalf("Get(100) = %v, %v; want true, nil", v, err)
	}
	path := db.dir.BitsPath("kept")
	mapped := func() bool {
		maps, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Contains(maps, []byte(path))
	}
	if !mapped() {
		t.Fatalf("%s not mapped while the engine is open", path)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100 && mapped(); i++ {
		runtime.GC()
		runtime.Gosched()
	}
	if mapped() {
		t.Fatalf("%s still mapped after Close, with only the bitslice's handle kept", path)
	}
	if _, err := b.Get(100); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v, want ErrClosed", err)
	}
}
