package dochost

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kvbuf/kvbuf"
)

var ctx = context.Background()

// body is the deterministic body of a put of document id as op.
func body(id, op uint64) []byte { return fmt.Appendf(nil, "doc %d written by op %d", id, op) }

// wantState checks s against want (id -> body; absent: deleted or never
// put) for ids below n.
func wantState(t *testing.T, s *Store, want map[uint64][]byte, deleted map[uint64]bool, n uint64) {
	t.Helper()
	for id := range n {
		got, ok, err := s.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		w, wok := want[id]
		if ok != wok || string(got) != string(w) {
			t.Fatalf("document %d = %q (present %v), want %q (present %v)", id, got, ok, w, wok)
		}
		d, err := s.Deleted(id)
		if err != nil || d != deleted[id] {
			t.Fatalf("document %d deleted = %v, %v; want %v", id, d, err, deleted[id])
		}
	}
}

// Concurrent writers end their ops in any order; every acknowledged write
// is there after a clean reopen; the watermark then covers every op; the
// log was compacted on the way (woken by WaitWatermark); the reopen replays
// only what the watermark does not cover.
func TestConcurrentWritersAndReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, &Options{CompactAbove: 200, Engine: &kvbuf.Options{FlushInterval: 2e6}})
	if err != nil {
		t.Fatal(err)
	}
	const writers, perWriter, ids = 6, 300, 50
	type ack struct {
		op, id uint64
		del    bool
	}
	acks := make([][]ack, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for range perWriter {
				id := rng.Uint64N(ids)
				var op uint64
				var err error
				del := rng.IntN(4) == 0
				if del {
					op, err = s.Delete(ctx, id)
				} else {
					// The body names the op, known only once it is
					// numbered: write a placeholder, then the real
					// body as a second op.
					op, err = s.Put(ctx, id, []byte("x"))
				}
				if err != nil {
					t.Error(err)
					return
				}
				acks[w] = append(acks[w], ack{op, id, del})
			}
		})
	}
	wg.Wait()
	m := s.DB().Metrics()
	if m.OpenOps != 0 || m.HighestOp != writers*perWriter {
		t.Fatalf("OpenOps %d HighestOp %d, want 0 and %d", m.OpenOps, m.HighestOp, writers*perWriter)
	}
	// The final state: for each id, the op with the highest number wins.
	last := map[uint64]ack{}
	for _, as := range acks {
		for _, a := range as {
			if a.op > last[a.id].op {
				last[a.id] = a
			}
		}
	}
	want, deleted := map[uint64][]byte{}, map[uint64]bool{}
	for id, a := range last {
		if a.del {
			deleted[id] = true
		} else {
			want[id] = []byte("x")
		}
	}
	wantState(t, s, want, deleted, ids)
	if s.Compactions() == 0 {
		t.Error("the log was never compacted")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if wm := s.DB().Watermark(); wm != writers*perWriter {
		t.Fatalf("watermark %d after a clean close, want %d", wm, writers*perWriter)
	}
	if s.Replayed != s.Skipped {
		t.Fatalf("replayed %d log records, %d skipped: after a clean close the watermark covers the whole log", s.Replayed, s.Skipped)
	}
	wantState(t, s, want, deleted, ids)
	if _, err := os.Stat(filepath.Join(dir, "oplog")); err != nil {
		t.Fatal(err)
	}
}
