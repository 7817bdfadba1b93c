package storage

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestPointReadSeesEveryChange: point-read rules P1 and P2. Point reads use
// cached iterators; a read right after a commit, an ingest, a delete, a
// range deletion, a flush or a compaction must see the store as it is then,
// never the state an iterator cached by an earlier read was created on.
// After the compaction and one more read, no table is kept alive by a
// cached iterator (P1's flush and compaction bumps).
func TestPointReadSeesEveryChange(t *testing.T) {
	s, _ := openMem(t)
	key := []byte("k")
	get := func(want string) {
		t.Helper()
		for _, appendMode := range []bool{false, true} {
			var got []byte
			var err error
			if appendMode {
				got, err = s.GetAppend([]byte("x"), 1, key)
				if err == nil {
					got = got[1:]
				}
			} else {
				got, err = s.Get(1, key)
			}
			switch {
			case want == "" && err == nil:
				t.Fatalf("Get(k) = %q after its deletion", got)
			case want != "" && (err != nil || string(got) != want):
				t.Fatalf("Get(k) = %q, %v; want %q", got, err, want)
			}
		}
	}
	get("")
	for i := range 50 {
		v := fmt.Sprintf("batch-%d", i)
		putKS(t, s, 1, "k", v)
		get(v) // cached iterator from the read before must not answer
		in := s.NewIngest()
		v = fmt.Sprintf("ingest-%d", i)
		in.Put(1, key, []byte(v))
		mustIngest(t, s, in)
		get(v)
		b := s.NewBatch()
		switch i % 3 {
		case 0:
			b.Delete(1, key)
		case 1:
			b.DeleteRange(1, []byte("a"), []byte("z"))
		default:
			b.DeleteRange(1, nil, nil)
		}
		mustApply(t, s, b)
		get("")
	}
	putKS(t, s, 1, "k", "last")
	get("last")
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	get("last")
	if err := s.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	// An idle cached iterator pins its version until the next point read
	// (pointread.go), and pebble may finish a compaction of its own after
	// Compact returned (CI once saw 2 tables kept that way). Each read
	// closes the iterators of an older epoch, so reads end every pin a
	// finished compaction left: a cached iterator that outlived its epoch
	// would keep tables alive until the deadline.
	deadline := time.Now().Add(5 * time.Second)
	for {
		get("last")
		z := s.db.Metrics().Table.ZombieCount
		if z == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d tables kept alive after the compaction: a cached iterator pins an old version", z)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
