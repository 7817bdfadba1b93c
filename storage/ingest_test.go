package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// ingestDesigns are the two layouts of ingested tables, tested alike.
var ingestDesigns = []struct {
	name  string
	split uint64
}{{"one-table", 0}, {"split", 1}}

func openMemDesign(t testing.TB, fsys vfs.FS, split uint64) *Store {
	t.Helper()
	s, err := Open("db", &Options{FS: fsys, ingestSplit: split})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func mustIngest(t testing.TB, s *Store, in *Ingest) {
	t.Helper()
	c, err := s.CommitIngest(in)
	if err != nil {
		t.Fatalf("CommitIngest: %v", err)
	}
	if err := c.Wait(); err != nil {
		t.Fatalf("ingest Wait: %v", err)
	}
}

// ingestFiles lists the ingest directory of the store in dir.
func ingestFiles(t testing.TB, fsys vfs.FS, dir string) []string {
	t.Helper()
	names, err := fsys.List(fsys.PathJoin(dir, IngestDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return names
}

func TestIngestBasic(t *testing.T) {
	for _, d := range ingestDesigns {
		t.Run(d.name, func(t *testing.T) {
			fsys := vfs.NewMem()
			s := openMemDesign(t, fsys, d.split)
			putKS(t, s, 1, "a", "old", "b", "old", "c", "old", "x", "old")
			putKS(t, s, 2, "a", "old2", "z", "old2")
			b := s.NewBatch()
			b.SetMeta("cat", []byte("v1"))
			b.SetMeta("gone", []byte("soon"))
			b.SetWatermark(3)
			mustApply(t, s, b)

			in := s.NewIngest()
			in.SetWatermark(7)
			in.SetMeta("cat", []byte("v0"))
			in.SetMeta("cat", []byte("v2")) // the last change of a name wins
			in.DeleteMeta("gone")
			in.Put(1, []byte("a"), []byte("new"))
			in.DeleteRange(1, []byte("b"), []byte("d")) // hides b, c (stored), not b2 (its own)
			in.Put(1, []byte("b2"), []byte("own"))
			in.Delete(1, []byte("x"))
			in.DeleteRange(2, nil, nil) // all of keyspace 2 as stored...
			in.Put(2, []byte("m"), []byte("kept"))
			if got := in.Len(); got != 9 {
				t.Fatalf("Len = %d, want 9", got)
			}
			mustIngest(t, s, in)

			check := func(s *Store) {
				t.Helper()
				wantGetKS(t, s, 1, "a", "new")
				wantNotFoundKS(t, s, 1, "b")
				wantNotFoundKS(t, s, 1, "c")
				wantGetKS(t, s, 1, "b2", "own")
				wantNotFoundKS(t, s, 1, "x")
				wantNotFoundKS(t, s, 2, "a")
				wantNotFoundKS(t, s, 2, "z")
				wantGetKS(t, s, 2, "m", "kept")
				if got := scanKS(t, s, 1, nil, nil); strings.Join(got, ",") != "a=new,b2=own" {
					t.Fatalf("scan of keyspace 1 = %v", got)
				}
				if v, err := s.GetMeta("cat"); err != nil || string(v) != "v2" {
					t.Fatalf("GetMeta(cat) = %q, %v; want v2", v, err)
				}
				if _, err := s.GetMeta("gone"); !errors.Is(err, kverr.ErrNotFound) {
					t.Fatalf("GetMeta(gone) = %v, want ErrNotFound", err)
				}
				wantWatermark(t, s, 7)
			}
			check(s)
			if n := ingestFiles(t, fsys, "db"); len(n) != 0 {
				t.Fatalf("ingest directory holds %v after the ingest", n)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s2 := openMemDesign(t, fsys, d.split)
			check(s2)
		})
	}
}

// TestIngestTableFormat checks that an ingested table is written like the
// tables pebble writes itself in the store: the same Bloom filter and
// compression. Automatic compactions are off: the ingested table holds the
// watermark key and overlaps the flushed one, so it lands as a second L0
// sublevel, which (at this store's L0 threshold of 4) scores 2x2/4 = 1 and
// starts a compaction; one finished before the tables are listed would
// merge the two into a table pebble wrote.
func TestIngestTableFormat(t *testing.T) {
	fsys := vfs.NewMem()
	s, err := Open("db", &Options{FS: fsys, noAutoCompactions: true})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	putKS(t, s, 1, "flushed", "by pebble")
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	in := s.NewIngest()
	in.SetWatermark(1)
	for i := range 1000 {
		in.Put(2, fmt.Appendf(nil, "k%05d", i), []byte("value-value-value"))
	}
	mustIngest(t, s, in)
	tables, err := s.db.SSTables(pebble.WithProperties())
	if err != nil {
		t.Fatal(err)
	}
	var props []*pebble.SSTableInfo
	for _, level := range tables {
		for i := range level {
			props = append(props, &level[i])
		}
	}
	if len(props) != 2 {
		t.Fatalf("%d tables, want 2 (one flushed, one ingested)", len(props))
	}
	a, b := props[0].Properties, props[1].Properties
	if !strings.Contains(a.FilterPolicyName, "Bloom") || a.FilterPolicyName != b.FilterPolicyName {
		t.Errorf("filter policies %q and %q, want the same Bloom filter", a.FilterPolicyName, b.FilterPolicyName)
	}
	if a.CompressionName != b.CompressionName {
		t.Errorf("compressions %q and %q, want the same", a.CompressionName, b.CompressionName)
	}
}

func TestIngestBadOrder(t *testing.T) {
	cases := []struct {
		name  string
		build func(in *Ingest)
		want  error
	}{
		{"key-repeated", func(in *Ingest) {
			in.Put(1, []byte("a"), nil)
			in.Put(1, []byte("a"), nil)
		}, kverr.ErrBadRange},
		{"key-down", func(in *Ingest) {
			in.Put(1, []byte("b"), nil)
			in.Delete(1, []byte("a"))
		}, kverr.ErrBadRange},
		{"keyspace-down", func(in *Ingest) {
			in.Put(2, []byte("a"), nil)
			in.Put(1, []byte("b"), nil)
		}, kverr.ErrBadRange},
		{"range-of-earlier-keyspace", func(in *Ingest) {
			in.Put(2, []byte("a"), nil)
			in.DeleteRange(1, nil, nil)
		}, kverr.ErrBadRange},
		{"meta-after-user", func(in *Ingest) {
			in.Put(1, []byte("a"), nil)
			in.SetMeta("m", nil)
		}, kverr.ErrBadRange},
		{"watermark-after-user", func(in *Ingest) {
			in.Put(1, []byte("a"), nil)
			in.SetWatermark(9)
		}, kverr.ErrBadRange},
		{"keyspace-0", func(in *Ingest) { in.Put(0, []byte("a"), nil) }, kverr.ErrInvalidKeyspace},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fsys := vfs.NewMem()
			s := openMemDesign(t, fsys, 0)
			in := s.NewIngest()
			c.build(in)
			in.Put(3, []byte("later"), []byte("dropped"))
			if _, err := s.CommitIngest(in); !errors.Is(err, c.want) || !strings.HasPrefix(err.Error(), "kvbuf: ") {
				t.Fatalf("CommitIngest = %v, want %v", err, c.want)
			}
			wantNotFoundKS(t, s, 3, "later")
			wantNotFoundKS(t, s, 1, "a")
			if n := ingestFiles(t, fsys, "db"); len(n) != 0 {
				t.Fatalf("a failed ingest left %v", n)
			}
			if _, err := s.CommitIngest(in); !errors.Is(err, kverr.ErrClosed) {
				t.Fatalf("second CommitIngest = %v, want ErrClosed", err)
			}
		})
	}
}

func TestIngestMisuse(t *testing.T) {
	fsys := vfs.NewMem()
	s := openMemDesign(t, fsys, 0)
	other, err := Open("other", &Options{FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	in := other.NewIngest()
	in.Put(1, []byte("a"), []byte("b"))
	if _, err := s.CommitIngest(in); !errors.Is(err, kverr.ErrForeignBatch) {
		t.Fatalf("CommitIngest of another store's ingest = %v, want ErrForeignBatch", err)
	}
	if n := ingestFiles(t, fsys, "other"); len(n) != 0 {
		t.Fatalf("a refused ingest left %v", n)
	}

	// Aborted: files gone, later use fails.
	in = s.NewIngest()
	in.Put(1, []byte("a"), []byte("b"))
	in.Abort()
	in.Abort()
	if n := ingestFiles(t, fsys, "db"); len(n) != 0 {
		t.Fatalf("Abort left %v", n)
	}
	if _, err := s.CommitIngest(in); !errors.Is(err, kverr.ErrClosed) {
		t.Fatalf("CommitIngest after Abort = %v, want ErrClosed", err)
	}

	// A watermark below one committed since.
	b := s.NewBatch()
	b.SetWatermark(10)
	mustApply(t, s, b)
	in = s.NewIngest()
	in.SetWatermark(9)
	in.Put(1, []byte("a"), []byte("b"))
	if _, err := s.CommitIngest(in); !errors.Is(err, kverr.ErrStaleOp) {
		t.Fatalf("CommitIngest with a lower watermark = %v, want ErrStaleOp", err)
	}
	wantWatermark(t, s, 10)
	wantNotFoundKS(t, s, 1, "a")

	// Empty: commits nothing, completes.
	c, err := s.CommitIngest(s.NewIngest())
	if err != nil || c.Wait() != nil {
		t.Fatalf("empty ingest: %v", err)
	}

	// Read-only and closed stores.
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := Open("other", &Options{FS: fsys, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	in = ro.NewIngest()
	in.Put(1, []byte("a"), nil)
	if _, err := ro.CommitIngest(in); !errors.Is(err, kverr.ErrReadOnly) {
		t.Fatalf("CommitIngest on a read-only store = %v, want ErrReadOnly", err)
	}
	_ = ro.Close()
	in = s.NewIngest()
	in.Put(1, []byte("a"), nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CommitIngest(in); !errors.Is(err, kverr.ErrClosed) {
		t.Fatalf("CommitIngest after Close = %v, want ErrClosed", err)
	}
	if n := ingestFiles(t, fsys, "db"); len(n) != 0 {
		t.Fatalf("a refused ingest left %v", n)
	}
}

// TestIngestOrderedWithCommits holds a batch's WAL sync while a batch, an
// ingest and another batch are committed behind it: nothing behind the
// held sync is visible, and once released they apply in commit order (the
// ingest after the batch before it, the batch after it above it) with
// watermarks in order (ingest rules 1-3).
func TestIngestOrderedWithCommits(t *testing.T) {
	for _, d := range ingestDesigns {
		t.Run(d.name, func(t *testing.T) {
			g := newWALGate()
			s := openMemDesign(t, g.fs(vfs.NewMem()), d.split)
			batch := func(wm uint64, kv ...string) *Commit {
				b := s.NewBatch()
				for i := 0; i < len(kv); i += 2 {
					b.Put(ks1, []byte(kv[i]), []byte(kv[i+1]))
				}
				b.SetWatermark(wm)
				return mustCommit(t, s, b)
			}
			g.set(gateHold)
			a := batch(1, "k1", "a", "k2", "a", "k3", "a")
			<-g.held
			b := batch(2, "k1", "b", "k3", "b")
			in := s.NewIngest()
			in.SetWatermark(3)
			in.Put(ks1, []byte("k1"), []byte("c"))
			in.Put(ks1, []byte("k2"), []byte("c"))
			in.Put(ks1, []byte("k3"), []byte("c"))
			c, err := s.CommitIngest(in)
			if err != nil {
				t.Fatal(err)
			}
			dd := batch(4, "k1", "d")
			// Nothing behind the held sync is applied yet.
			wantGet(t, s, "k1", "a")
			wantGet(t, s, "k3", "a")
			if done(c.done) || done(dd.done) {
				t.Fatal("commits behind a held sync completed")
			}
			g.open(gatePass)
			for i, cm := range []*Commit{a, b, c, dd} {
				if err := cm.Wait(); err != nil {
					t.Fatalf("commit %d: %v", i, err)
				}
			}
			wantGet(t, s, "k1", "d")
			wantGet(t, s, "k2", "c")
			wantGet(t, s, "k3", "c")
			wantWatermark(t, s, 4)
		})
	}
}

// TestIngestRacesCommits commits batches and ingests over the same keys
// from one goroutine without waiting (the flusher's pattern, but with no
// wait for an ingest's result), with WAL syncs slowed down so that the
// queue fills, while readers check that no key's value and no watermark
// ever goes back; with the point reads' path chosen as usual, and
// ("-mixed") with every other read through DB.Get (point-read rules P1-P3
// on the mixed path).
func TestIngestRacesCommits(t *testing.T) {
	const (
		keys   = 64
		rounds = 300
	)
	for _, d := range ingestDesigns {
		for _, mixed := range []bool{false, true} {
			name := d.name
			if mixed {
				name += "-mixed"
			}
			t.Run(name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(7, d.split))
				var slow atomic.Bool
				fsys := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
					if slow.Load() && strings.HasSuffix(op.Path, ".log") && op.Kind == errorfs.OpFileSync {
						for range 200 {
							// A slow device, without sleeping: let the
							// committer run ahead.
							runtime.Gosched()
						}
					}
					return nil
				}))
				slow.Store(true)
				s := openMemDesign(t, fsys, d.split)
				s.pit.path.alternate = mixed
				stop := make(chan struct{})
				var wg sync.WaitGroup
				var bad atomic.Value
				for r := range 4 {
					wg.Go(func() {
						last := make([]uint64, keys)
						var lastWM uint64
						for i := 0; ; i++ {
							select {
							case <-stop:
								return
							default:
							}
							k := (i*7 + r) % keys
							v, err := s.Get(ks1, fmt.Appendf(nil, "k%03d", k))
							if err != nil && !errors.Is(err, kverr.ErrNotFound) {
								bad.Store(err.Error())
								return
							}
							if err == nil {
								var n uint64
								fmt.Sscanf(string(v), "%d", &n)
								if n < last[k] {
									bad.Store(fmt.Sprintf("key %d went back from %d to %d", k, last[k], n))
									return
								}
								last[k] = n
							}
							wm, _ := s.Watermark()
							if wm < lastWM {
								bad.Store(fmt.Sprintf("watermark went back from %d to %d", lastWM, wm))
								return
							}
							lastWM = wm
						}
					})
				}
				var commits []*Commit
				final := make([]uint64, keys)
				for n := uint64(1); n <= rounds; n++ {
					// Round n writes value n to a random subset of keys.
					var ks []int
					for k := range keys {
						if rng.IntN(3) == 0 {
							ks = append(ks, k)
							final[k] = n
						}
					}
					if rng.IntN(3) == 0 {
						in := s.NewIngest()
						in.SetWatermark(n)
						for _, k := range ks {
							in.Put(ks1, fmt.Appendf(nil, "k%03d", k), fmt.Appendf(nil, "%d", n))
						}
						c, err := s.CommitIngest(in)
						if err != nil {
							t.Fatal(err)
						}
						commits = append(commits, c)
					} else {
						b := s.NewBatch()
						for _, k := range ks {
							b.Put(ks1, fmt.Appendf(nil, "k%03d", k), fmt.Appendf(nil, "%d", n))
						}
						b.SetWatermark(n)
						commits = append(commits, mustCommit(t, s, b))
					}
				}
				for _, c := range commits {
					if err := c.Wait(); err != nil {
						t.Fatal(err)
					}
				}
				close(stop)
				wg.Wait()
				if b := bad.Load(); b != nil {
					t.Fatal(b)
				}
				for k := range keys {
					if final[k] == 0 {
						continue
					}
					wantGetKS(t, s, ks1, fmt.Sprintf("k%03d", k), fmt.Sprint(final[k]))
				}
				wantWatermark(t, s, rounds)
			})
		}
	}
}

// TestIngestFailure fails pebble's DB.Ingest (the ingest's table cannot be
// read) while a batch waits behind it: both fail, nothing of either is
// applied, the watermark stays, and a retry of both then succeeds and
// writes the watermark again (ingest rule 4).
func TestIngestFailure(t *testing.T) {
	for _, d := range ingestDesigns {
		t.Run(d.name, func(t *testing.T) {
			var failing atomic.Bool
			g := newWALGate()
			fsys := errorfs.Wrap(g.fs(vfs.NewMem()), errorfs.InjectorFunc(func(op errorfs.Op) error {
				if failing.Load() && strings.Contains(op.Path, IngestDir) && op.Kind == errorfs.OpOpen {
					return errorfs.ErrInjected
				}
				return nil
			}))
			s := openMemDesign(t, fsys, d.split)
			put(t, s, "k", "v1")
			b := s.NewBatch()
			b.SetWatermark(1)
			mustApply(t, s, b)

			g.set(gateHold)
			b = s.NewBatch()
			b.Put(ks1, []byte("k"), []byte("v2"))
			b.SetWatermark(2)
			first := mustCommit(t, s, b)
			<-g.held
			failing.Store(true)
			in := s.NewIngest()
			in.SetWatermark(3)
			in.Put(ks1, []byte("k"), []byte("v3"))
			c, err := s.CommitIngest(in)
			if err != nil {
				t.Fatal(err)
			}
			b = s.NewBatch()
			b.Put(ks1, []byte("j"), []byte("behind"))
			b.SetWatermark(3)
			behind := mustCommit(t, s, b)
			g.open(gatePass)
			if err := first.Wait(); err != nil {
				t.Fatal(err)
			}
			if err := c.Wait(); !errors.Is(err, errorfs.ErrInjected) {
				t.Fatalf("failed ingest: Wait = %v, want the injected error", err)
			}
			if err := behind.Wait(); !errors.Is(err, errorfs.ErrInjected) {
				t.Fatalf("commit behind a failed ingest: Wait = %v, want the ingest's error", err)
			}
			wantGet(t, s, "k", "v2")
			wantNotFound(t, s, "j")
			wantWatermark(t, s, 2)
			if n := ingestFiles(t, fsys, "db"); len(n) != 0 {
				t.Fatalf("a failed ingest left %v", n)
			}

			// The retry: the same watermark is written again.
			failing.Store(false)
			in = s.NewIngest()
			in.SetWatermark(3)
			in.Put(ks1, []byte("k"), []byte("v3"))
			mustIngest(t, s, in)
			b = s.NewBatch()
			b.Put(ks1, []byte("j"), []byte("behind"))
			b.SetWatermark(3)
			mustApply(t, s, b)
			wantGet(t, s, "k", "v3")
			wantGet(t, s, "j", "behind")
			wantWatermark(t, s, 3)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s2 := openMemDesign(t, fsys, d.split)
			wantWatermark(t, s2, 3)
			wantGet(t, s2, "k", "v3")
		})
	}
}

// TestIngestLeftoversRemovedAtOpen leaves the synced tables of an ingest
// that was never committed (a crash between writing them and DB.Ingest)
// holding an older value than the store's: Open removes them, and neither
// their value nor their watermark reaches the store.
func TestIngestLeftoversRemovedAtOpen(t *testing.T) {
	for _, d := range ingestDesigns {
		t.Run(d.name, func(t *testing.T) {
			fsys := vfs.NewMem()
			s, err := Open("db", &Options{FS: fsys, ingestSplit: d.split})
			if err != nil {
				t.Fatal(err)
			}
			in := s.NewIngest()
			in.SetWatermark(5)
			in.SetMeta("m", []byte("orphan"))
			in.Put(ks1, []byte("k"), []byte("orphan"))
			if err := in.finish(); err != nil {
				t.Fatal(err)
			}
			put(t, s, "k", "newer")
			b := s.NewBatch()
			b.SetWatermark(2)
			mustApply(t, s, b)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if n := ingestFiles(t, fsys, "db"); len(n) == 0 {
				t.Fatal("the test left no tables behind")
			}
			s2 := openMemDesign(t, fsys, d.split)
			if n := ingestFiles(t, fsys, "db"); len(n) != 0 {
				t.Fatalf("Open left %v in the ingest directory", n)
			}
			wantGet(t, s2, "k", "newer")
			wantWatermark(t, s2, 2)
			if _, err := s2.GetMeta("m"); !errors.Is(err, kverr.ErrNotFound) {
				t.Fatalf("GetMeta of the leftover's entry = %v, want ErrNotFound", err)
			}
		})
	}
}

// TestIngestParts: parts of an ingest written by concurrent goroutines land
// in the one ingest (with its watermark); parts out of order, a range
// deletion in a part, or a part committed on its own fail the ingest and
// leave nothing behind.
func TestIngestParts(t *testing.T) {
	fsys := vfs.NewMem()
	s := openMemDesign(t, fsys, 0)
	in := s.NewIngest()
	in.SetWatermark(5)
	in.Put(1, []byte("a"), []byte("0"))
	parts := in.Parts(3)
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Go(func() {
			if i == 1 {
				return // an empty part
			}
			for j := range 100 {
				p.Put(1, fmt.Appendf(nil, "k%d-%03d", i, j), []byte("v"))
			}
		})
	}
	wg.Wait()
	in.Put(2, []byte("z"), []byte("after")) // above every part
	if got := in.Len(); got != 202 {
		t.Fatalf("Len = %d, want 202", got)
	}
	mustIngest(t, s, in)
	wantGetKS(t, s, 1, "a", "0")
	wantGetKS(t, s, 1, "k0-000", "v")
	wantGetKS(t, s, 1, "k2-099", "v")
	wantGetKS(t, s, 2, "z", "after")
	if wm, _ := s.Watermark(); wm != 5 {
		t.Fatalf("watermark %d, want 5", wm)
	}

	bad := []struct {
		name string
		fill func(in *Ingest, parts []*Ingest)
	}{
		{"parts out of order", func(in *Ingest, parts []*Ingest) {
			parts[0].Put(1, []byte("m"), []byte("x"))
			parts[1].Put(1, []byte("c"), []byte("x"))
		}},
		{"a part below the ingest", func(in *Ingest, parts []*Ingest) {
			parts[1].Put(1, []byte("0"), []byte("x"))
		}},
		{"range deletion in a part", func(in *Ingest, parts []*Ingest) {
			parts[0].DeleteRange(1, []byte("p"), []byte("q"))
		}},
		{"a change below the parts after them", func(in *Ingest, parts []*Ingest) {
			parts[0].Put(1, []byte("m"), []byte("x"))
			in.Put(1, []byte("c"), []byte("x"))
		}},
	}
	for _, c := range bad {
		in := s.NewIngest()
		in.SetWatermark(9)
		in.Put(1, []byte("b"), []byte("bad"))
		parts := in.Parts(2)
		c.fill(in, parts)
		if _, err := s.CommitIngest(parts[0]); !errors.Is(err, kverr.ErrBadRange) {
			t.Fatalf("%s: CommitIngest of a part = %v, want ErrBadRange", c.name, err)
		}
		if _, err := s.CommitIngest(in); !errors.Is(err, kverr.ErrBadRange) {
			t.Fatalf("%s: CommitIngest = %v, want ErrBadRange", c.name, err)
		}
		wantGetKS(t, s, 1, "a", "0") // nothing of it landed
		wantNotFoundKS(t, s, 1, "b")
		if wm, _ := s.Watermark(); wm != 5 {
			t.Fatalf("%s: watermark %d, want 5", c.name, wm)
		}
		if ls, _ := fsys.List(fsys.PathJoin("db", IngestDir)); len(ls) != 0 {
			t.Fatalf("%s: files left in the ingest directory: %v", c.name, ls)
		}
	}
}

// TestIngestTableFormatOption: Options.IngestTableFormat writes ingested
// tables in that format (here the row-block Pebblev4, below the store's
// columnar one), readable with the same filter, before and after a
// reopen and a compaction; a format above the store's is lowered to the
// store's; out-of-range values are kverr.ErrBadOptions.
func TestIngestTableFormatOption(t *testing.T) {
	for _, f := range []sstable.TableFormat{sstable.TableFormatPebblev4, sstable.TableFormatMax} {
		t.Run(f.String(), func(t *testing.T) {
			fsys := vfs.NewMem()
			opts := &Options{FS: fsys, IngestTableFormat: f}
			s, err := Open("db", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = s.Close() }()
			in := s.NewIngest()
			in.SetWatermark(1)
			for i := range 1000 {
				in.Put(1, fmt.Appendf(nil, "k%05d", i), fmt.Appendf(nil, "v%d", i))
			}
			mustIngest(t, s, in)
			want := min(f, s.db.TableFormat())
			tables, err := s.db.SSTables(pebble.WithProperties())
			if err != nil {
				t.Fatal(err)
			}
			var n int
			for _, level := range tables {
				for _, tb := range level {
					n++
					file, err := fsys.Open(fsys.PathJoin("db", fmt.Sprintf("%06d.sst", tb.FileNum)))
					if err != nil {
						t.Fatal(err)
					}
					readable, err := sstable.NewSimpleReadable(file)
					if err != nil {
						t.Fatal(err)
					}
					r, err := sstable.NewReader(context.Background(), readable, sstable.ReaderOptions{})
					if err != nil {
						t.Fatal(err)
					}
					got, err := r.TableFormat()
					_ = r.Close()
					if err != nil || got != want {
						t.Errorf("ingested table format %s, %v; want %s", got, err, want)
					}
					if !strings.Contains(tb.Properties.FilterPolicyName, "Bloom") {
						t.Errorf("ingested table's filter %q, want the store's Bloom filter", tb.Properties.FilterPolicyName)
					}
				}
			}
			if n != 1 {
				t.Fatalf("%d tables, want 1", n)
			}
			check := func(s *Store) {
				t.Helper()
				for _, i := range []int{0, 1, 500, 999} {
					wantGetKS(t, s, 1, fmt.Sprintf("k%05d", i), fmt.Sprintf("v%d", i))
				}
				wantNotFoundKS(t, s, 1, "k01000")
				wantWatermark(t, s, 1)
			}
			check(s)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s2, err := Open("db", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = s2.Close() }()
			check(s2)
			if err := s2.db.Compact(context.Background(), []byte{0}, []byte{0xff}, true); err != nil {
				t.Fatal(err)
			}
			check(s2)
		})
	}
	for _, f := range []sstable.TableFormat{sstable.TableFormatLevelDB, sstable.TableFormatMax + 1} {
		if _, err := Open(t.TempDir(), &Options{IngestTableFormat: f}); !errors.Is(err, kverr.ErrBadOptions) {
			t.Errorf("Open with IngestTableFormat %d: %v, want ErrBadOptions", f, err)
		}
	}
}
