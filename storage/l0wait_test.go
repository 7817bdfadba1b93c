package storage

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/internal/testutil"
)

// ingestOverlapping ingests n tables over the same keys, each an L0
// sublevel of its own.
func ingestOverlapping(t *testing.T, s *Store, n int) {
	t.Helper()
	for i := range n {
		in := s.NewIngest()
		in.SetWatermark(uint64(i + 1))
		in.Put(ks1, []byte("a"), []byte(fmt.Sprint(i)))
		in.Put(ks1, []byte("z"), []byte(fmt.Sprint(i)))
		mustIngest(t, s, in)
	}
}

func TestWaitL0(t *testing.T) {
	// Holds the creation of pebble's own first table in db (a
	// compaction's or a flush's output; not the ingester's).
	mem := vfs.NewMem()
	hfs := testutil.NewHoldFS(mem, func(name string) bool {
		return mem.PathDir(name) == "db" && strings.HasSuffix(name, ".sst")
	}, true)
	s, err := Open("db", &Options{FS: hfs, L0CompactionThreshold: 2, L0StopWritesThreshold: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { hfs.Unhold(); _ = s.Close() }()
	// The first table goes to the bottom level, the second to L0, where
	// one sublevel reaches the compaction threshold: pebble compacts it,
	// and its output's creation is held. The third is a second sublevel:
	// L0 is at the stop threshold with a compaction in progress.
	ingestOverlapping(t, s, 3)
	<-hfs.Held
	if st, err := s.LSM(); err != nil || st.L0Sublevels != 2 || st.BackgroundJobs != 1 {
		t.Fatalf("LSM() = %+v, %v; want 2 L0 sublevels and a compaction", st, err)
	}
	var released bool // set before the release, read by the waiter after it returns
	var mu sync.Mutex
	blocked := make(chan struct{}, 1)
	type result struct {
		waited   bool
		released bool
		err      error
	}
	done := make(chan result, 1)
	go func() {
		w, err := s.WaitL0(context.Background(), func() { blocked <- struct{}{} })
		mu.Lock()
		defer mu.Unlock()
		done <- result{w > 0, released, err}
	}()
	select {
	case <-blocked:
	case r := <-done:
		st, _ := s.LSM()
		t.Fatalf("WaitL0 returned %+v with L0 at the stop threshold and a compaction in progress (%+v)", r, st)
	}
	mu.Lock()
	released = true
	mu.Unlock()
	hfs.Unhold()
	r := <-done
	if r.err != nil || !r.waited || !r.released {
		t.Fatalf("WaitL0 = %+v, want a wait ended by the compaction", r)
	}
	st, err := s.LSM()
	if err != nil || st.L0Sublevels >= 2 {
		t.Fatalf("after WaitL0: LSM() = %+v, %v; want L0 below 2 sublevels", st, err)
	}
}

// TestWaitL0Returns: WaitL0 returns at once below the threshold, and at
// the threshold when nothing compacts (automatic compactions off), and
// reports a closed store.
func TestWaitL0Returns(t *testing.T) {
	s, err := Open("db", &Options{FS: vfs.NewMem(), L0StopWritesThreshold: 4, noAutoCompactions: true})
	if err != nil {
		t.Fatal(err)
	}
	for n := range 2 {
		if n == 1 {
			ingestOverlapping(t, s, 5)
			if st, _ := s.LSM(); st.L0Sublevels < 4 {
				t.Fatalf("L0 sublevels %d after 5 overlapping ingests, want at least 4", st.L0Sublevels)
			}
		}
		if w, err := s.WaitL0(context.Background(), nil); w != 0 || err != nil {
			t.Fatalf("WaitL0 = %v, %v; want no wait", w, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitL0(context.Background(), nil); !errors.Is(err, kverr.ErrClosed) {
		t.Fatalf("WaitL0 after Close = %v, want ErrClosed", err)
	}
}
