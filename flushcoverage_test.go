package kvbuf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// TestFlushCoverageG64 checks contract 2 under the pipelined flusher at its
// default depth: 64 goroutines each write a key and a bit of their own and
// call Flush, in a loop; whenever Flush returns nil, the caller's write must
// already be in the store and in the bitslice file, read directly (not
// through the pending tables, which would hide a flush that did not cover
// it). Background flushes run too, so generations with and without callers
// overlap.
func TestFlushCoverageG64(t *testing.T) {
	ctx := context.Background()
	db := openT(t, t.TempDir(), &Options{FlushInterval: 1e6, MaxPendingBytes: 1 << 20})
	kv, err := db.KV("cover")
	if err != nil {
		t.Fatal(err)
	}
	bits, err := db.Bits("cover")
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, rounds = 64, 25
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			for r := range rounds {
				key := binary.BigEndian.AppendUint32([]byte{byte(g)}, uint32(r))
				bit := uint64(g*rounds + r)
				if err := kv.Put(ctx, key, []byte("v"), 0); err != nil {
					errs <- err
					return
				}
				if err := bits.Set(ctx, bit, true, 0); err != nil {
					errs <- err
					return
				}
				if err := db.Flush(ctx); err != nil {
					errs <- err
					return
				}
				if _, err := db.store.Get(kv.id, key); err != nil {
					errs <- fmt.Errorf("goroutine %d round %d: Flush returned nil but the store has no %x: %w", g, r, key, err)
					return
				}
				if !bits.file.Get(bit) {
					errs <- fmt.Errorf("goroutine %d round %d: Flush returned nil but bit %d is not in the file", g, r, bit)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	m := db.Metrics()
	t.Logf("%d Flush calls, %d coalesced, %d generations, at most %d in flight", m.Flushes, m.Coalesced, m.Generations, m.MaxInFlight)
	if m.Generations >= m.Flushes {
		t.Errorf("%d generations for %d Flush calls: nothing was coalesced", m.Generations, m.Flushes)
	}
	if errors.Is(db.Close(), ErrClosed) {
		t.Fatal("Close reported ErrClosed")
	}
}
