package storage

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvbuf/kvbuf/internal/invariants"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

func TestPutGetDelete(t *testing.T) {
	s, _ := openMem(t)
	wantNotFound(t, s, "a")
	put(t, s, "a", "1", "b", "2")
	wantGet(t, s, "a", "1")
	wantGet(t, s, "b", "2")

	b := s.NewBatch()
	b.Delete(ks1, []byte("a"))
	b.Put(ks1, []byte("b"), []byte("22"))
	if b.Len() != 2 {
		t.Fatalf("Len = %d, want 2", b.Len())
	}
	mustApply(t, s, b)
	if b.Len() != 0 {
		t.Fatalf("Len after Apply = %d, want 0", b.Len())
	}
	wantNotFound(t, s, "a")
	wantGet(t, s, "b", "22")
}

func TestGetReturnsCopy(t *testing.T) {
	s, _ := openMem(t)
	put(t, s, "k", "value")
	v, err := s.Get(ks1, []byte("k"))
	if err != nil {
		t.Fatal(err)
	}
	v[0] = 'X'
	wantGet(t, s, "k", "value")
}

func TestGetAppend(t *testing.T) {
	s, _ := openMem(t)
	put(t, s, "k", "value")
	dst := make([]byte, 3, 64)
	copy(dst, "abc")
	got, err := s.GetAppend(dst, ks1, []byte("k"))
	if err != nil || string(got) != "abcvalue" {
		t.Fatalf("GetAppend = %q, %v; want abcvalue", got, err)
	}
	if &got[0] != &dst[0] {
		t.Fatal("GetAppend reallocated although dst had capacity")
	}
	got, err = s.GetAppend(dst, ks1, []byte("missing"))
	if !errors.Is(err, kverr.ErrNotFound) || string(got) != "abc" {
		t.Fatalf("GetAppend(missing) = %q, %v; want abc, ErrNotFound", got, err)
	}
	if raceEnabled || invariants.Enabled {
		// Race builds drop pooled items at random; the invariants tag
		// turns on pebble's own invariants too, whose assertion
		// iterators allocate on every seek.
		return
	}
	key := []byte("k")
	if n := testing.AllocsPerRun(100, func() { _, _ = s.GetAppend(dst[:0], ks1, key) }); n != 0 {
		t.Fatalf("GetAppend allocates %v times per call, want 0", n)
	}
}

func TestBatchInputNotRetained(t *testing.T) {
	s, _ := openMem(t)
	b := s.NewBatch()
	k, v := []byte("key"), []byte("val")
	b.Put(ks1, k, v)
	copy(k, "zzz")
	copy(v, "zzz")
	mustApply(t, s, b)
	wantGet(t, s, "key", "val")
	wantNotFound(t, s, "zzz")
}

func TestBatchReset(t *testing.T) {
	s, _ := openMem(t)
	b := s.NewBatch()
	b.Put(ks1, []byte("a"), []byte("1"))
	b.SetWatermark(9)
	b.Reset()
	if b.Len() != 0 {
		t.Fatalf("Len after Reset = %d", b.Len())
	}
	b.Put(ks1, []byte("b"), []byte("2"))
	mustApply(t, s, b)
	wantNotFound(t, s, "a")
	wantGet(t, s, "b", "2")
	wantWatermark(t, s, 0)
	// A batch is reusable after Apply.
	b.Put(ks1, []byte("c"), []byte("3"))
	mustApply(t, s, b)
	wantGet(t, s, "c", "3")
}

func TestEmptyKeyAndValue(t *testing.T) {
	s, _ := openMem(t)
	put(t, s, "", "empty-key", "k", "")
	wantGet(t, s, "", "empty-key")
	wantGet(t, s, "k", "")
	b := s.NewBatch()
	b.Delete(ks1, nil)
	mustApply(t, s, b)
	wantNotFound(t, s, "")
	wantGet(t, s, "k", "")
}

// TestNamespaceIsolation writes user keys that spell out every internal key
// and meta names equal to user keys, and checks none of them leaks into
// another namespace.
func TestNamespaceIsolation(t *testing.T) {
	s, _ := openMem(t)
	adversarial := []string{
		"", "\x00", "\x01", "\x02", "\x03", "\xff", "\xff\xff",
		watermarkKey, watermarkKey[1:], "wm", "\x00\x00wm",
		"\x01catalog", "catalog", "\x02catalog", "\x02", "\x02\x00",
	}
	b := s.NewBatch()
	b.SetMeta("catalog", []byte("meta-catalog"))
	b.SetMeta("", []byte("meta-empty"))
	b.SetMeta("\x02catalog", []byte("meta-tagged"))
	b.SetWatermark(7)
	mustApply(t, s, b)

	// Before any user write, no user key sees meta or system entries.
	for _, k := range adversarial {
		wantNotFound(t, s, k)
	}
	if got := scan(t, s, nil, nil); len(got) != 0 {
		t.Fatalf("user scan sees internal keys: %q", got)
	}

	b = s.NewBatch()
	for _, k := range adversarial {
		b.Put(ks1, []byte(k), []byte("user:"+k))
	}
	mustApply(t, s, b)
	for _, k := range adversarial {
		wantGet(t, s, k, "user:"+k)
	}
	for name, want := range map[string]string{"catalog": "meta-catalog", "": "meta-empty", "\x02catalog": "meta-tagged"} {
		got, err := s.GetMeta(name)
		if err != nil || string(got) != want {
			t.Fatalf("GetMeta(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := s.GetMeta("wm"); !errors.Is(err, kverr.ErrNotFound) {
		t.Fatalf("GetMeta(wm) = %v, want ErrNotFound", err)
	}
	wantWatermark(t, s, 7)

	// Deleting every adversarial user key leaves meta and watermark alone.
	b = s.NewBatch()
	for _, k := range adversarial {
		b.Delete(ks1, []byte(k))
	}
	mustApply(t, s, b)
	if got, err := s.GetMeta("catalog"); err != nil || string(got) != "meta-catalog" {
		t.Fatalf("GetMeta after user deletes = %q, %v", got, err)
	}
	wantWatermark(t, s, 7)

	// The scan sees exactly the user keys, untagged, in order.
	b = s.NewBatch()
	for _, k := range adversarial {
		b.Put(ks1, []byte(k), []byte("v"))
	}
	mustApply(t, s, b)
	keys := slices.Clone(adversarial)
	slices.Sort(keys)
	var want []string
	for _, k := range slices.Compact(keys) {
		want = append(want, k+"=v")
	}
	if got := scan(t, s, nil, nil); !slices.Equal(got, want) {
		t.Fatalf("scan = %q\nwant %q", got, want)
	}
}

func TestGetMetaNotFoundNamesKey(t *testing.T) {
	s, _ := openMem(t)
	_, err := s.GetMeta("catalog/7")
	if !errors.Is(err, kverr.ErrNotFound) || !strings.Contains(err.Error(), "catalog/7") {
		t.Fatalf("GetMeta = %v; want ErrNotFound naming the key", err)
	}
}

func TestWatermark(t *testing.T) {
	fs := vfs.NewMem()
	s, err := Open("db", &Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	wantWatermark(t, s, 0)

	// A batch with only a watermark commits it.
	b := s.NewBatch()
	b.SetWatermark(10)
	mustApply(t, s, b)
	wantWatermark(t, s, 10)

	// A lower watermark keeps the higher one, but the data still lands.
	b.Put(ks1, []byte("k"), []byte("v"))
	b.SetWatermark(5)
	mustApply(t, s, b)
	wantWatermark(t, s, 10)
	wantGet(t, s, "k", "v")

	// Within a batch the highest SetWatermark wins.
	b.SetWatermark(30)
	b.SetWatermark(20)
	mustApply(t, s, b)
	wantWatermark(t, s, 30)

	// Batches without a watermark leave it alone.
	put(t, s, "x", "y")
	wantWatermark(t, s, 30)

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open("db", &Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wantWatermark(t, s, 30)
	b = s.NewBatch()
	b.SetWatermark(3)
	mustApply(t, s, b)
	wantWatermark(t, s, 30)
}

// TestWatermarkConcurrentApply races batches with increasing watermarks;
// whatever order they commit in, the persisted watermark must end at the
// maximum.
func TestWatermarkConcurrentApply(t *testing.T) {
	s, _ := openMem(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				b := s.NewBatch()
				b.Put(ks1, fmt.Appendf(nil, "g%d-%d", g, i), []byte("v"))
				b.SetWatermark(uint64(i*8 + g + 1))
				if err := s.Apply(b); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	wantWatermark(t, s, 19*8+7+1)
}

// TestWatermarkSurvivesCrash checks contract 4 on pebble's crash-simulating
// filesystem: after a crash, the watermark read back covers only data that
// is present.
func TestWatermarkSurvivesCrash(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s, err := Open("db", &Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 50; i++ {
		b := s.NewBatch()
		b.Put(ks1, fmt.Appendf(nil, "k%03d", i), fmt.Appendf(nil, "v%d", i))
		b.SetWatermark(uint64(i))
		mustApply(t, s, b)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open("db", &Options{FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wm, err := s.Watermark()
	if err != nil {
		t.Fatal(err)
	}
	if wm != 50 {
		t.Fatalf("watermark after crash = %d, want 50 (every Apply was synced)", wm)
	}
	for i := 1; i <= int(wm); i++ {
		wantGet(t, s, fmt.Sprintf("k%03d", i), fmt.Sprintf("v%d", i))
	}
}

func TestClosed(t *testing.T) {
	s, _ := openMem(t)
	put(t, s, "k", "v")
	b := s.NewBatch()
	b.Put(ks1, []byte("late"), []byte("v"))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v, want nil (idempotent)", err)
	}
	check := func(name string, err error) {
		t.Helper()
		if !errors.Is(err, kverr.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	_, err := s.Get(ks1, []byte("k"))
	check("Get", err)
	_, err = s.GetAppend(nil, ks1, []byte("k"))
	check("GetAppend", err)
	_, err = s.GetMeta("m")
	check("GetMeta", err)
	_, err = s.Watermark()
	check("Watermark", err)
	check("Apply", s.Apply(b))
	check("Apply(new batch)", s.Apply(s.NewBatch()))
	b.Put(ks1, []byte("late"), []byte("v"))
	_, err = s.Commit(b)
	check("Commit", err)
	if b.Len() != 0 {
		t.Error("Commit after Close did not empty the batch")
	}
	_, err = s.NewIter(ks1, nil, nil)
	check("NewIter", err)
	_, err = s.NewSnapshot()
	check("NewSnapshot", err)
	check("Flush", s.Flush())
	_, err = s.Metrics()
	check("Metrics", err)
}

// TestCloseRacesOperations runs every kind of call against a concurrent
// Close; each must either succeed or return kverr.ErrClosed, never panic.
func TestCloseRacesOperations(t *testing.T) {
	s, _ := openMem(t)
	put(t, s, "k", "v")
	var wg sync.WaitGroup
	start := make(chan struct{})
	ok := func(err error) bool { return err == nil || errors.Is(err, kverr.ErrClosed) }
	for g := range 8 {
		wg.Go(func() {
			<-start
			var pending []*Commit
			defer func() {
				// Commits made before Close settle with their sync's
				// result.
				for _, c := range pending {
					if err := c.Wait(); err != nil {
						t.Errorf("Wait: %v", err)
					}
				}
			}()
			for i := 0; ; i++ {
				var err error
				switch g {
				case 0:
					_, err = s.Get(ks1, []byte("k"))
				case 1:
					b := s.NewBatch()
					b.Put(ks1, []byte("k2"), []byte("v"))
					b.SetWatermark(uint64(i + 1))
					err = s.Apply(b)
				case 2:
					var it *Iter
					it, err = s.NewIter(ks1, nil, nil)
					if err == nil {
						for it.First(); it.Valid(); it.Next() {
							_ = it.Value()
						}
						err = it.Close()
					}
				case 3:
					_, err = s.Watermark()
				case 4:
					_, err = s.Metrics()
				case 5:
					b := s.NewBatch()
					b.Put(ks1, []byte("k3"), []byte("v"))
					b.SetWatermark(uint64(i + 1))
					var c *Commit
					c, err = s.Commit(b)
					if err == nil {
						pending = append(pending, c)
					}
				case 6:
					var sn *Snapshot
					sn, err = s.NewSnapshot()
					if err == nil {
						_, err = sn.Get(ks1, []byte("k"))
						var it *Iter
						if err == nil {
							it, err = sn.NewIter(ks1, nil, nil)
						}
						if err == nil {
							for it.Last(); it.Valid(); it.Prev() {
								_ = it.Value()
							}
							err = it.Close()
						}
						if cerr := sn.Close(); err == nil {
							err = cerr
						}
					}
				case 7:
					err = s.Close()
				}
				if !ok(err) {
					t.Errorf("goroutine %d: %v", g, err)
					return
				}
				if errors.Is(err, kverr.ErrClosed) || g == 7 {
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if _, err := s.Get(ks1, []byte("k")); !errors.Is(err, kverr.ErrClosed) {
		t.Fatalf("Get after racing Close = %v", err)
	}
}

func TestConcurrentClose(t *testing.T) {
	s, _ := openMem(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := s.Close(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

func TestBatchTooLarge(t *testing.T) {
	s, _ := openMem(t)
	b := s.NewBatch()
	b.limit = 200
	b.Put(ks1, []byte("small"), []byte("v"))
	b.Put(ks1, []byte("big"), bytes.Repeat([]byte("x"), 300))
	b.Put(ks1, []byte("after"), []byte("v"))
	if b.Len() != 1 {
		t.Fatalf("Len = %d, want 1 (oversize and later ops dropped)", b.Len())
	}
	err := s.Apply(b)
	if !errors.Is(err, kverr.ErrBatchTooLarge) || !strings.Contains(err.Error(), "big") {
		t.Fatalf("Apply = %v, want ErrBatchTooLarge naming the key", err)
	}
	// The root's TestErrorTexts cannot build a 4 GiB batch; the text rule
	// (errors.go "Texts") for kvbuf.ErrBatchTooLarge is pinned here.
	if got, want := err.Error(), `kvbuf: batch of 26 bytes adding key "big" with a 300-byte value: batch too large`; got != want {
		t.Fatalf("Apply's text\n  %s\nwant\n  %s", got, want)
	}
	wantNotFound(t, s, "small")
	wantNotFound(t, s, "after")
	// The batch is usable again after the failed Apply.
	b.Put(ks1, []byte("again"), []byte("v"))
	mustApply(t, s, b)
	wantGet(t, s, "again", "v")

	b.SetMeta("meta", bytes.Repeat([]byte("x"), 300))
	if err := s.Apply(b); !errors.Is(err, kverr.ErrBatchTooLarge) {
		t.Fatalf("Apply(oversize meta) = %v", err)
	}
	b.Delete(ks1, bytes.Repeat([]byte("k"), 300))
	if err := s.Apply(b); !errors.Is(err, kverr.ErrBatchTooLarge) {
		t.Fatalf("Apply(oversize delete key) = %v", err)
	}
	b.DeleteRange(ks1, bytes.Repeat([]byte("a"), 100), bytes.Repeat([]byte("b"), 100))
	if err := s.Apply(b); !errors.Is(err, kverr.ErrBatchTooLarge) || !strings.Contains(err.Error(), "range deletion") {
		t.Fatalf("Apply(oversize range deletion) = %v", err)
	}
	b.DeleteMeta(strings.Repeat("m", 300))
	if err := s.Apply(b); !errors.Is(err, kverr.ErrBatchTooLarge) {
		t.Fatalf("Apply(oversize meta delete) = %v", err)
	}
	// A failed batch drops everything after the failure, even what fits.
	b.Put(ks1, []byte("big"), bytes.Repeat([]byte("x"), 300))
	b.DeleteRange(ks1, nil, nil)
	b.SetMeta("m", nil)
	b.DeleteMeta("m")
	if b.Len() != 0 {
		t.Fatalf("Len after a failed op = %d", b.Len())
	}
	if err := s.Apply(b); !errors.Is(err, kverr.ErrBatchTooLarge) {
		t.Fatal(err)
	}
	wantGet(t, s, "again", "v")
}

// TestDeleteMeta: DeleteMeta removes a meta entry and touches nothing else.
func TestDeleteMeta(t *testing.T) {
	s, _ := openMem(t)
	b := s.NewBatch()
	b.SetMeta("a", []byte("1"))
	b.SetMeta("b", []byte("2"))
	b.Put(ks1, []byte("a"), []byte("user"))
	mustApply(t, s, b)
	b.DeleteMeta("a")
	if b.Len() != 1 {
		t.Fatalf("Len = %d", b.Len())
	}
	mustApply(t, s, b)
	if _, err := s.GetMeta("a"); !errors.Is(err, kverr.ErrNotFound) {
		t.Fatalf("GetMeta(a) after DeleteMeta = %v", err)
	}
	if v, err := s.GetMeta("b"); err != nil || string(v) != "2" {
		t.Fatalf("GetMeta(b) = %q, %v", v, err)
	}
	wantGet(t, s, "a", "user")
}

func TestForeignBatch(t *testing.T) {
	s1, _ := openMem(t)
	s2, _ := openMem(t)
	b := s1.NewBatch()
	b.Put(ks1, []byte("k"), []byte("v"))
	if err := s2.Apply(b); !errors.Is(err, kverr.ErrForeignBatch) {
		t.Fatalf("Apply of another store's batch = %v", err)
	}
	wantNotFound(t, s2, "k")
	wantNotFound(t, s1, "k")
}

func TestFlushAndMetrics(t *testing.T) {
	s, _ := openMem(t)
	m, err := s.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	if m.EstimatedKeys != 0 || m.Levels[0].Files != 0 {
		t.Fatalf("new store metrics = %+v", m)
	}
	b := s.NewBatch()
	for i := range 1000 {
		b.Put(ks1, fmt.Appendf(nil, "key%05d", i), []byte("value"))
	}
	b.SetWatermark(42)
	mustApply(t, s, b)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	m, err = s.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	var files int64
	var size int64
	for _, l := range m.Levels {
		files += l.Files
		size += l.Bytes
	}
	if files == 0 || size == 0 {
		t.Fatalf("no sstables after Flush: %+v", m)
	}
	// 1000 user keys + the watermark.
	if m.EstimatedKeys != 1001 {
		t.Fatalf("EstimatedKeys = %d, want 1001", m.EstimatedKeys)
	}
	if m.DiskUsage < uint64(size) {
		t.Fatalf("DiskUsage %d < table bytes %d", m.DiskUsage, size)
	}
	if m.Watermark != 42 {
		t.Fatalf("Metrics.Watermark = %d", m.Watermark)
	}
}
