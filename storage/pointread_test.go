package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// TestPointReadSeesEveryChange: point-read rules P1 and P2. Point reads use
// cached iterators; a read right after a commit, an ingest, a delete, a
// range deletion, a flush or a compaction must see the store as it is then,
// never the state an iterator cached by an earlier read was created on.
// After the compaction and one more read, no table is kept alive by a
// cached iterator (P1's flush and compaction bumps).
func TestPointReadSeesEveryChange(t *testing.T) {
	s, _ := openMem(t)
	s.pit.path.iterOnly = true // the rules under test are the iterators'
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

// TestPointReadsRacingCommits races point-read rules P1 and P2 at full
// speed: writers commit ever new keys (batches, and now and then an
// ingest), range delete their keys far behind the readers, and publish
// each key once its commit's Wait returned; a flusher flushes pebble's
// memtables (small ones: a flush every few commits) and compacts now and
// then, each a bump of the epoch; readers read the keys published last
// with Get and GetAppend, whose cached iterators must never predate a
// commit they could have seen returned. This is the store's half of the
// engine's TestStressKVFirstValues (a generation released to the store
// answers there at once). It runs with every read through the iterators,
// and with every other read through DB.Get ("mixed"): a read of either
// path must never be older than a commit seen returned.
func TestPointReadsRacingCommits(t *testing.T) {
	for _, mixed := range []bool{false, true} {
		name := "iterators"
		if mixed {
			name = "mixed"
		}
		t.Run(name, func(t *testing.T) { testPointReadsRacingCommits(t, mixed) })
	}
}

func testPointReadsRacingCommits(t *testing.T, mixed bool) {
	fs := vfs.NewMem()
	s, err := Open("db", &Options{FS: fs, MemTableSize: 256 << 10})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	// The rules under test are the iterators', alone or mixed with DB.Get.
	s.pit.path.iterOnly = !mixed
	s.pit.path.alternate = mixed
	const writers, readers = 2, 4
	prefix := strings.Repeat("p", 512)
	key := func(w int, i int64) []byte { return fmt.Appendf(nil, "%sw%d/%08d", prefix, w, i) }
	var pub [writers]atomic.Int64
	var stop atomic.Bool
	var reads, ingests, flushes atomic.Int64
	var mu sync.Mutex
	var fails []string
	fail := func(format string, args ...any) {
		mu.Lock()
		fails = append(fails, fmt.Sprintf(format, args...))
		mu.Unlock()
		stop.Store(true)
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			val := make([]byte, 64)
			for i := int64(0); !stop.Load(); i++ {
				var c *Commit
				var err error
				if i%32 == 31 {
					in := s.NewIngest()
					in.Put(1, key(w, i), val)
					c, err = s.CommitIngest(in)
					ingests.Add(1)
				} else {
					b := s.NewBatch()
					if i%256 == 0 && i >= 1024 {
						b.DeleteRange(1, key(w, 0), key(w, i-1024))
					}
					b.Put(1, key(w, i), val)
					c, err = s.Commit(b)
				}
				if err == nil {
					err = c.Wait()
				}
				if err != nil {
					fail("writer %d: commit of key %d: %v", w, i, err)
					return
				}
				pub[w].Store(i + 1)
			}
		})
	}
	wg.Go(func() {
		for n := 1; !stop.Load(); n++ {
			var err error
			if n%20 == 0 {
				err = s.Compact(context.Background())
			} else {
				err = s.Flush()
			}
			if err != nil {
				fail("flush: %v", err)
				return
			}
			flushes.Add(1)
			time.Sleep(time.Millisecond)
		}
	})
	for r := range readers {
		wg.Go(func() {
			var dst []byte
			for n := 0; !stop.Load(); n++ {
				w := n % writers
				hi := pub[w].Load() // published first, read after
				for i := max(0, hi-8); i < hi; i++ {
					var err error
					if r%2 == 0 {
						_, err = s.Get(1, key(w, i))
					} else {
						dst, err = s.GetAppend(dst[:0], 1, key(w, i))
					}
					if err != nil {
						fail("reader %d: key %d of writer %d after its commit returned: %v", r, i, w, err)
						return
					}
					reads.Add(1)
				}
			}
		})
	}
	time.Sleep(time.Second)
	stop.Store(true)
	wg.Wait()
	t.Logf("%d reads, %d ingests, %d flushes and compactions", reads.Load(), ingests.Load(), flushes.Load())
	if len(fails) > 0 {
		t.Fatalf("%d failure(s); the first: %s", len(fails), fails[0])
	}
	if reads.Load() == 0 || flushes.Load() == 0 {
		t.Fatal("no read or no flush: the test raced nothing")
	}
}

// TestPointReadPathChoice: point reads through reused iterators that load
// blocks from outside the block cache (a store larger than its cache, each
// key in two levels) switch to DB.Get for pathGetSpan reads, and every read
// on either path returns the newest value; the switch closes the idle
// cached iterators and none is cached while it holds (none pins its
// version through compactions then); a store whose reads hit the cache
// stays on the iterators.
func TestPointReadPathChoice(t *testing.T) {
	const n = 4000
	val := func(round, i int) []byte {
		return []byte(fmt.Sprintf("%d-%06d-%s", round, i, strings.Repeat("v", 1000)))
	}
	s, err := Open("db", &Options{FS: vfs.NewMem(), CacheSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for round := range 2 { // loaded, then every key updated: two levels
		for lo := 0; lo < n; lo += 500 {
			b := s.NewBatch()
			for i := lo; i < lo+500; i++ {
				b.Put(1, []byte(fmt.Sprintf("k%06d", i)), val(round, i))
			}
			mustApply(t, s, b)
		}
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	read := func(s *Store, i int, want []byte) {
		t.Helper()
		got, err := s.Get(1, []byte(fmt.Sprintf("k%06d", i)))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("Get(k%06d) = %.12q, %v; want %.12q", i, got, err, want)
		}
	}
	if s.pit.path.getLeft.Load() != 0 {
		t.Fatal("DB.Get chosen before any read")
	}
	idle := func() int {
		s.pit.mu.Lock()
		defer s.pit.mu.Unlock()
		return len(s.pit.free)
	}
	// A stride through the keys: every read lands on blocks not cached.
	// Before each, two iterators are taken at once and put back: the read
	// takes one, the other stays idle, as another reader's would.
	i := 0
	for r := 0; r < 2*pathWindow && s.pit.path.getLeft.Load() == 0; r++ {
		a, ta, err := s.pit.get(s.db)
		if err != nil {
			t.Fatal(err)
		}
		b, tb, err := s.pit.get(s.db)
		if err != nil {
			t.Fatal(err)
		}
		s.pit.put(a, ta)
		s.pit.put(b, tb)
		i = (i + 997) % n
		read(s, i, val(1, i))
	}
	left := s.pit.path.getLeft.Load()
	if left == 0 {
		t.Fatalf("%d reads of blocks outside a 64 KiB cache stayed on the iterators", 2*pathWindow)
	}
	if k := idle(); k != 0 {
		t.Fatalf("%d idle cached iterators after the switch to DB.Get: they pin their version through its span", k)
	}
	for r := range 100 {
		i = (i + 997) % n
		read(s, i, val(1, i))
		if _, err := s.Get(1, []byte("absent")); !errors.Is(err, kverr.ErrNotFound) {
			t.Fatalf("Get(absent) through DB.Get: %v", err)
		}
		if got := s.pit.path.getLeft.Load(); got != left-2*int64(r+1) {
			t.Fatalf("after %d reads through DB.Get, %d left of %d", 2*(r+1), got, left)
		}
	}
	got, err := s.GetAppend([]byte("x"), 1, []byte("k000001"))
	if err != nil || !bytes.Equal(got, append([]byte("x"), val(1, 1)...)) {
		t.Fatalf("GetAppend through DB.Get = %.12q, %v", got, err)
	}
	// An iterator of a read that chose the iterators before the switch is
	// not cached when put back during it.
	it, tag, err := s.pit.get(s.db)
	if err != nil {
		t.Fatal(err)
	}
	s.pit.put(it, tag)
	if k := idle(); k != 0 {
		t.Fatalf("%d iterators cached while reads go through DB.Get", k)
	}

	// Reads of a few keys whose blocks stay cached: the iterators.
	small, _ := openMem(t)
	putKS(t, small, 1, "a", "1", "b", "2")
	if err := small.Flush(); err != nil {
		t.Fatal(err)
	}
	for range 4 * pathWindow {
		wantGetKS(t, small, 1, "a", "1")
		wantGetKS(t, small, 1, "b", "2")
	}
	if small.pit.path.getLeft.Load() != 0 {
		t.Fatal("reads of cached blocks switched to DB.Get")
	}
}
