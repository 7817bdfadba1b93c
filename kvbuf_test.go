package kvbuf

// The engine's core behaviour through its API: read-your-writes across
// flushes and reopens, keyspaces, merged scans, bitslices, the directory
// lock and foreign directories, Close, and the watermark as a receipt for
// whole ops (contract 4, the repro).

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/internal/enginedir"
)

const (
	manifestReadyText = "kvbuf engine directory\nformat 2\n"
	manifestInitText  = manifestReadyText + "initialising\n"
)

func TestKVReadYourWritesAcrossFlushAndReopen(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, &Options{FlushInterval: -1})
	k := mustKV(t, db, "users")
	for i := range 100 {
		mustPut(t, k, fmt.Sprintf("k%03d", i), fmt.Sprintf("v%d", i), uint64(i+1))
	}
	wantGet(t, k, "k007", "v7")
	mustFlush(t, db)
	wantGet(t, k, "k007", "v7") // read from the store now
	// Op 100 may still get writes: the flush covers ops 1-99 only.
	if wm := db.Watermark(); wm != 99 {
		t.Fatalf("watermark after flush = %d, want 99 (op 100 is not known complete)", wm)
	}
	if err := k.Delete(ctx, []byte("k007"), 101); err != nil {
		t.Fatal(err)
	}
	mustPut(t, k, "k008", "new", 102)
	if err := k.DeleteRange(ctx, []byte("k090"), []byte("k095"), 103); err != nil {
		t.Fatal(err)
	}
	wantGet(t, k, "k007", "")
	wantGet(t, k, "k008", "new")
	wantGet(t, k, "k092", "")
	wantGet(t, k, "k095", "v95")
	if err := db.EndOp(ctx, 103); err != nil {
		t.Fatal(err)
	}
	closeT(t, db) // the final flush persists ops 101-103

	db = openT(t, dir, nil)
	defer closeT(t, db)
	if wm := db.Watermark(); wm != 103 {
		t.Fatalf("watermark after reopen = %d, want 103", wm)
	}
	k = mustKV(t, db, "users")
	wantGet(t, k, "k007", "")
	wantGet(t, k, "k008", "new")
	wantGet(t, k, "k099", "v99")
	wantGet(t, k, "k090", "")
	wantGet(t, k, "k094", "")
	wantGet(t, k, "k095", "v95")
	if n := len(scan(t, k, nil)); n != 100-1-5 {
		t.Fatalf("%d keys after reopen, want 94", n)
	}
}

func TestKeyspacesAreIsolatedAndPersisted(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, &Options{FlushInterval: -1})
	a, b := mustKV(t, db, "a"), mustKV(t, db, "b")
	mustPut(t, a, "x", "in-a", 1)
	mustPut(t, b, "x", "in-b", 2)
	mustPut(t, b, "y", "only-b", 3)
	wantGet(t, a, "x", "in-a")
	wantGet(t, b, "x", "in-b")
	wantGet(t, a, "y", "")
	if again := mustKV(t, db, "a"); again != a {
		t.Fatal("KV(name) returned a second handle for the same keyspace")
	}
	mustFlush(t, db)
	// A range delete of a whole keyspace stays inside it.
	if err := a.DeleteRange(ctx, nil, nil, 4); err != nil {
		t.Fatal(err)
	}
	wantGet(t, b, "x", "in-b")
	// An empty keyspace is persisted with the next flush.
	mustKV(t, db, "empty")
	crashed := filepath.Join(t.TempDir(), "before-flush")
	if err := copyDir(dir, crashed); err != nil {
		t.Fatal(err)
	}
	mustFlush(t, db)
	flushed := filepath.Join(t.TempDir(), "after-flush")
	if err := copyDir(dir, flushed); err != nil {
		t.Fatal(err)
	}
	closeT(t, db)

	db = openT(t, crashed, nil)
	if got := fmt.Sprint(db.Keyspaces()); got != "[a b]" {
		t.Fatalf("Keyspaces of a copy taken before the flush = %s, want [a b]", got)
	}
	closeT(t, db)
	for _, d := range []string{flushed, dir} {
		db = openT(t, d, nil)
		if got := fmt.Sprint(db.Keyspaces()); got != "[a b empty]" {
			t.Fatalf("Keyspaces after reopen = %s, want [a b empty]", got)
		}
		wantGet(t, mustKV(t, db, "a"), "x", "")
		wantGet(t, mustKV(t, db, "b"), "x", "in-b")
		c := mustKV(t, db, "c") // a new id must not reuse a, b or empty's prefix
		wantGet(t, c, "x", "")
		wantGet(t, c, "y", "")
		if got := scan(t, mustKV(t, db, "empty"), nil); len(got) != 0 {
			t.Fatalf("empty keyspace holds %v", got)
		}
		closeT(t, db)
	}
}

func TestIteratorMergesPendingAndStored(t *testing.T) {
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1})
	defer closeT(t, db)
	k, other := mustKV(t, db, "k"), mustKV(t, db, "other")
	for _, kv := range []string{"a", "b", "c", "d", "f", "g", "h"} {
		mustPut(t, k, kv, "stored-"+kv, 1)
	}
	mustPut(t, other, "bb", "not mine", 1)
	mustFlush(t, db)
	if err := k.Delete(ctx, []byte("b"), 2); err != nil {
		t.Fatal(err)
	}
	mustPut(t, k, "c", "pending-c", 3)
	mustPut(t, k, "e", "pending-e", 4)
	if err := k.DeleteRange(ctx, []byte("f"), []byte("h"), 5); err != nil { // stored f, g
		t.Fatal(err)
	}
	mustPut(t, k, "g", "pending-g", 6) // a put after the range delete shows

	want := []string{"a=stored-a", "c=pending-c", "d=stored-d", "e=pending-e", "g=pending-g", "h=stored-h"}
	if got := scan(t, k, nil); !slices.Equal(got, want) {
		t.Fatalf("scan = %v, want %v", got, want)
	}
	rev := slices.Clone(want)
	slices.Reverse(rev)
	if got := scanReverse(t, k, nil); !slices.Equal(got, rev) {
		t.Fatalf("reverse scan = %v, want %v", got, rev)
	}

	it, err := k.NewIter(&IterOptions{LowerBound: []byte("b"), UpperBound: []byte("e")})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	if !it.SeekGE([]byte("a")) || string(it.Key()) != "c" {
		t.Fatalf("bounded SeekGE landed on %q", it.Key())
	}
	if !it.Next() || string(it.Key()) != "d" {
		t.Fatalf("Next landed on %q", it.Key())
	}
	if it.Next() {
		t.Fatalf("bounded scan went past upper bound to %q", it.Key())
	}
	if !it.SeekLT([]byte("zz")) || string(it.Key()) != "d" {
		t.Fatalf("bounded SeekLT landed on %q", it.Key())
	}
	if !it.SeekLT([]byte("d")) || string(it.Key()) != "c" {
		t.Fatalf("SeekLT(d) landed on %q", it.Key())
	}
	if it.Prev() {
		t.Fatalf("bounded scan went below the lower bound to %q", it.Key())
	}

	// Flushing everything changes nothing a new scan returns.
	mustFlush(t, db)
	if got := scan(t, k, nil); !slices.Equal(got, want) {
		t.Fatalf("scan after flush = %v, want %v", got, want)
	}
}

func TestBitsPersistAndGrow(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, &Options{FlushInterval: -1})
	b := mustBits(t, db, "live")
	for _, i := range []uint64{0, 5, 64, 1000, 100_000} {
		mustSet(t, b, i, true, i+1)
	}
	if n, _ := b.Len(); n != 100_001 {
		t.Fatalf("Len with pending growth = %d, want 100001", n)
	}
	wantBit(t, b, 1000, true)
	mustFlush(t, db)
	wantBit(t, b, 1000, true)
	// The file grows in whole table words of 32 bits, and Len is the
	// file's length once that is larger than the highest index set + 1.
	if n, _ := b.Len(); n < 100_001 || n > 100_032 {
		t.Fatalf("Len after flush = %d, want 100001..100032", n)
	}
	if err := b.SetRange(ctx, 200_000, 200_100, true, 200_000); err != nil {
		t.Fatal(err)
	}
	mustSet(t, b, 5, false, 200_001)
	if err := db.EndOp(ctx, 200_001); err != nil {
		t.Fatal(err)
	}
	closeT(t, db)

	db = openT(t, dir, nil)
	defer closeT(t, db)
	if wm := db.Watermark(); wm != 200_001 {
		t.Fatalf("watermark = %d, want 200001", wm)
	}
	b = mustBits(t, db, "live")
	if n, _ := b.Len(); n < 200_100 || n > 200_128 {
		t.Fatalf("Len after reopen = %d, want 200100..200128", n)
	}
	if c, _ := b.Count(); c != 4+100 {
		t.Fatalf("Count after reopen = %d, want 104", c)
	}
	for i, want := range map[uint64]bool{0: true, 5: false, 6: false, 64: true, 1000: true, 100_000: true,
		199_999: false, 200_000: true, 200_099: true, 200_100: false, 1 << 40: false} {
		wantBit(t, b, i, want)
	}
	names, err := enginedir.BitsNames(dir)
	if err != nil || fmt.Sprint(names) != "[live]" {
		t.Fatalf("BitsNames = %v, %v", names, err)
	}
	if got := fmt.Sprint(db.Bitslices()); got != "[live]" {
		t.Fatalf("Bitslices = %s", got)
	}
}

func TestSecondOpenIsLocked(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, nil)
	before := hashTree(t, dir, enginedir.StoreDir)
	for range 3 {
		if _, err := Open(dir, nil); !errors.Is(err, ErrLocked) {
			t.Fatalf("second Open: %v, want ErrLocked", err)
		}
	}
	if hashTree(t, dir, enginedir.StoreDir) != before {
		t.Fatal("a refused Open changed the directory")
	}
	// The engine that holds the lock is unaffected.
	mustPut(t, mustKV(t, db, "k"), "a", "1", 1)
	mustFlush(t, db)
	closeT(t, db)
	db = openT(t, dir, nil) // Close released the lock
	wantGet(t, mustKV(t, db, "k"), "a", "1")
	closeT(t, db)
}

func TestOpenRefusesForeignDirectories(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, d string) string
		want  error
	}{
		{"non-empty", func(t *testing.T, d string) string {
			writeFile(t, filepath.Join(d, "precious.txt"), []byte("x"))
			return d
		}, ErrNotEngine},
		{"file", func(t *testing.T, d string) string {
			writeFile(t, filepath.Join(d, "f"), []byte("x"))
			return filepath.Join(d, "f")
		}, ErrNotEngine},
		{"only an empty LOCK", func(t *testing.T, d string) string {
			writeFile(t, filepath.Join(d, enginedir.LockName), nil)
			return d
		}, ErrNotEngine},
		{"only a foreign LOCK", func(t *testing.T, d string) string {
			writeFile(t, filepath.Join(d, enginedir.LockName), []byte("pid 1234\n"))
			return d
		}, ErrNotEngine},
		{"foreign manifest", func(t *testing.T, d string) string {
			writeFile(t, filepath.Join(d, enginedir.ManifestName), []byte("something else"))
			return d
		}, ErrNotEngine},
		{"damaged manifest", func(t *testing.T, d string) string {
			writeFile(t, filepath.Join(d, enginedir.ManifestName), []byte("kvbuf engine directory\nformat 99\n"))
			return d
		}, ErrCorrupt},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := c.setup(t, t.TempDir())
			before := hashTree(t, filepath.Dir(path))
			db, err := Open(path, nil)
			if err == nil {
				closeT(t, db)
				t.Fatalf("Open succeeded, want %v", c.want)
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("Open: %v, want %v", err, c.want)
			}
			if hashTree(t, filepath.Dir(path)) != before {
				t.Fatalf("a refused Open changed the directory: %v", listTree(filepath.Dir(path)))
			}
		})
	}
}

// TestCorruptBitsliceIsReported: a bitslice file is opened with the engine,
// so damage to it fails Open with ErrCorrupt and changes nothing.
func TestCorruptBitsliceIsReported(t *testing.T) {
	dir := newEngineDir(t)
	path := filepath.Join(dir, enginedir.BitsDir, "b"+enginedir.BitsExt)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	junk := bytes.Repeat([]byte{0xAB}, 8192)
	writeFile(t, path, junk)
	before := hashTree(t, dir, enginedir.StoreDir)
	dump := storeDump(t, dir)
	_, err = Open(dir, nil)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with a corrupt bitslice: %v, want ErrCorrupt", err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, junk) {
		t.Fatal("opening a corrupt bitslice changed it")
	}
	if hashTree(t, dir, enginedir.StoreDir) != before || storeDump(t, dir) != dump {
		t.Fatalf("the failed Open changed the directory: %v", listTree(dir))
	}
	// Removing the file is no repair: the engine recorded the bitslice,
	// and a missing file would lose its bits without a word (issue 20).
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with the bitslice file removed: %v, want ErrCorrupt", err)
	}
	// Restoring it (from a backup or a checkpoint) is.
	writeFile(t, path, good)
	db := openT(t, dir, nil)
	defer closeT(t, db)
	wantGet(t, mustKV(t, db, "k"), "a", "1")
	wantBit(t, mustBits(t, db, "b"), 3, true)
}

// TestOperationsAfterClose: writes, flushes and snapshots after Close are
// ErrClosed, and so are reads (they start after Close began); iterators and
// snapshots left open stop with ErrClosed.
func TestOperationsAfterClose(t *testing.T) {
	db := openT(t, t.TempDir(), nil)
	k, b := mustKV(t, db, "k"), mustBits(t, db, "b")
	mustPut(t, k, "a", "1", 1)
	mustPut(t, k, "b", "2", 1)
	mustSet(t, b, 1, true, 1)
	it, err := k.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !it.First() || string(it.Key()) != "a" {
		t.Fatal("iterator not positioned on a")
	}
	unpositioned, err := k.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	sk, err := snap.KV("k")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := snap.Bits("b")
	if err != nil {
		t.Fatal(err)
	}
	snapIt, err := sk.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !snapIt.First() {
		t.Fatal("snapshot iterator empty")
	}
	batch := db.NewBatch()
	batch.Put(k, []byte("c"), []byte("3"))
	closeT(t, db)

	checks := map[string]error{
		"Put":            k.Put(ctx, []byte("a"), nil, 2),
		"Delete":         k.Delete(ctx, []byte("a"), 2),
		"DeleteRange":    k.DeleteRange(ctx, nil, nil, 2),
		"Set":            b.Set(ctx, 1, true, 2),
		"SetRange":       b.SetRange(ctx, 1, 5, true, 2),
		"Flush":          db.Flush(ctx),
		"FlushMemtables": db.FlushMemtables(ctx),
		"EndOp":          db.EndOp(ctx, 2),
		"Apply":          db.Apply(ctx, batch, 2),
		"DropKV":         db.DropKV(ctx, "k", 2),
		"GetMany":        func() error { _, err := k.GetMany([][]byte{[]byte("a")}, make([][]byte, 1), nil); return err }(),
		"BitsGetMany":    b.GetMany([]uint64{1}, make([]bool, 1)),
		"iter Error":     it.Error(),
		"iter Close":     it.Close(),
		"iter2 Error":    unpositioned.Error(),
		"iter2 Close":    unpositioned.Close(),
		"snapIter Error": snapIt.Error(),
		"snapIter Close": snapIt.Close(),
		"Wait":           nil,
	}
	_, checks["Get"] = k.Get([]byte("a"))
	_, checks["GetAppend"] = k.GetAppend(nil, []byte("a"))
	_, checks["BitsGet"] = b.Get(1)
	_, checks["Len"] = b.Len()
	_, checks["Count"] = b.Count()
	_, checks["KV"] = db.KV("k2")
	_, checks["KV existing"] = db.KV("k")
	_, checks["Bits"] = db.Bits("b2")
	_, checks["NewIter"] = k.NewIter(nil)
	_, checks["NewSnapshot"] = db.NewSnapshot()
	_, checks["snapshot Get"] = sk.Get([]byte("a"))
	_, checks["snapshot bits Get"] = sb.Get(1)
	_, checks["snapshot Count"] = sb.Count()
	_, checks["snapshot NewIter"] = sk.NewIter(nil)
	delete(checks, "Wait")
	for name, err := range checks {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	if it.Valid() || it.Key() != nil || it.Value() != nil {
		t.Errorf("positioned iterator after Close: Valid %v Key %q Value %q", it.Valid(), it.Key(), it.Value())
	}
	if it.First() || it.Next() || it.Last() || it.SeekGE([]byte("a")) || it.SeekLT([]byte("z")) {
		t.Error("iterator positioned after Close")
	}
	if snapIt.Valid() || snapIt.Key() != nil {
		t.Error("snapshot iterator valid after Close")
	}
	for i := range b.Ones(0) {
		t.Errorf("Ones after Close yielded %d", i)
	}
	for i := range sb.Ones(0) {
		t.Errorf("snapshot Ones after Close yielded %d", i)
	}
	snap.Close() // already closed by the engine: harmless
	select {
	case <-db.Done():
	default:
		t.Fatal("Done not closed after Close returned")
	}
	if err := db.Wait(ctx); err != nil {
		t.Fatalf("Wait after Close: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if m := db.Metrics(); m.Watermark != 0 || m.Snapshots != 0 {
		t.Errorf("Metrics after Close: %+v", m) // op 1 was never known complete
	}
}

// TestConcurrentCloseWithWriters: writers racing Close either get
// ErrClosed or have their write kept by the final flush.
func TestConcurrentCloseWithWriters(t *testing.T) {
	for round := range 5 {
		dir := t.TempDir()
		db := openT(t, dir, &Options{FlushInterval: -1})
		k, b := mustKV(t, db, "k"), mustBits(t, db, "b")
		const W = 4
		var wg sync.WaitGroup
		acked := make([][]int, W) // writes that returned nil, per writer
		started := make(chan struct{}, W)
		for w := range W {
			wg.Go(func() {
				for i := 0; ; i++ {
					if i == 10 {
						started <- struct{}{}
					}
					var err error
					switch i % 3 {
					case 0, 1:
						err = k.Put(ctx, fmt.Appendf(nil, "w%d-%d", w, i), []byte("v"), 0)
					case 2:
						err = b.Set(ctx, uint64(i*W+w), true, 0)
					}
					if errors.Is(err, ErrClosed) {
						return
					}
					if err != nil {
						t.Errorf("write: %v", err)
						return
					}
					acked[w] = append(acked[w], i)
				}
			})
		}
		for range W {
			<-started
		}
		for range 4 {
			wg.Go(func() {
				if err := db.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
		}
		wg.Wait()
		db = openT(t, dir, nil)
		k, b = mustKV(t, db, "k"), mustBits(t, db, "b")
		n := 0
		for w, is := range acked {
			for _, i := range is {
				if i%3 == 2 {
					wantBit(t, b, uint64(i*W+w), true)
				} else {
					wantGet(t, k, fmt.Sprintf("w%d-%d", w, i), "v") // Close's final flush kept every acked write
				}
				n++
			}
		}
		closeT(t, db)
		if round == 0 {
			t.Logf("%d acknowledged writes kept", n)
		}
	}
}

// TestDeletedStoreIsCorruptNotRecreated: a ready engine whose store is gone
// (removed, or emptied) lost its data: Open says ErrCorrupt and creates
// nothing, not even pebble's LOCK in an emptied store/.
func TestDeletedStoreIsCorruptNotRecreated(t *testing.T) {
	for _, how := range []string{"removed", "emptied"} {
		t.Run(how, func(t *testing.T) {
			dir := newEngineDir(t)
			store := filepath.Join(dir, enginedir.StoreDir)
			if err := os.RemoveAll(store); err != nil {
				t.Fatal(err)
			}
			if how == "emptied" {
				if err := os.Mkdir(store, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			before := hashTree(t, dir)
			for range 2 {
				db, err := Open(dir, nil)
				if err == nil {
					closeT(t, db)
					t.Fatal("Open of an engine without its store succeeded")
				}
				if after := hashTree(t, dir); after != before {
					t.Fatalf("the failed Open left something behind: %v", listTree(dir))
				}
				if !errors.Is(err, ErrCorrupt) {
					t.Errorf("Open without a store: %v, want ErrCorrupt", err)
				}
			}
			if _, err := os.Stat(filepath.Join(store, "LOCK")); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("store/LOCK after a failed Open: %v", err)
			}
		})
	}
}

// TestInterruptedInitialisationResumes: what a crash between writing the
// initialising manifest and creating the store leaves behind is finished by
// the next Open, not called corrupt.
func TestInterruptedInitialisationResumes(t *testing.T) {
	for _, withBits := range []bool{false, true} {
		t.Run(fmt.Sprintf("bits=%v", withBits), func(t *testing.T) {
			dir := t.TempDir()
			if withBits {
				if err := os.Mkdir(filepath.Join(dir, enginedir.BitsDir), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			writeFile(t, filepath.Join(dir, enginedir.ManifestName), []byte(manifestInitText))
			db := openT(t, dir, nil)
			mustPut(t, mustKV(t, db, "k"), "a", "1", 1)
			closeT(t, db)
			if b, err := os.ReadFile(filepath.Join(dir, enginedir.ManifestName)); err != nil || string(b) != manifestReadyText {
				t.Fatalf("manifest after resumed init: %q, %v", b, err)
			}
			db = openT(t, dir, nil)
			defer closeT(t, db)
			wantGet(t, mustKV(t, db, "k"), "a", "1")
		})
	}
}

// TestWatermarkNeverCoversHalfAnOp is the repro (contract 4): op 1
// is a Put and a Bits.Set made with a flush between them. A crash after
// the flush must not leave a watermark of 1 without bit 7: the watermark
// is 0 (op 1 not known complete), and once op 2 is written and flushed it
// covers op 1 whole.
func TestWatermarkNeverCoversHalfAnOp(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, &Options{FlushInterval: -1})
	defer func() { closeT(t, db) }()
	points, deleted := mustKV(t, db, "points"), mustBits(t, db, "deleted")
	mustPut(t, points, "p7", "payload", 1)
	mustFlush(t, db)
	if wm := db.Watermark(); wm != 0 {
		t.Fatalf("watermark %d after flushing the first half of op 1", wm)
	}
	mustSet(t, deleted, 7, true, 1) // the second half of op 1: not ErrStaleOp

	crash := func(name string) *DB {
		t.Helper()
		c := filepath.Join(t.TempDir(), name)
		if err := copyDir(dir, c); err != nil {
			t.Fatal(err)
		}
		return openT(t, c, nil)
	}
	c := crash("after-half")
	wm := c.Watermark()
	bit, _ := mustBits(t, c, "deleted").Get(7)
	if wm != 0 {
		t.Errorf("after a crash: watermark %d (bit 7 = %v), want 0: op 1 is not known complete", wm, bit)
	}
	if wm >= 1 && !bit {
		t.Errorf("after a crash: watermark %d covers op 1 but bit 7 is lost", wm)
	}
	// The host replays its log from wm+1 = op 1, whole, then op 2.
	mustPut(t, mustKV(t, c, "points"), "p7", "payload", 1)
	mustSet(t, mustBits(t, c, "deleted"), 7, true, 1)
	mustPut(t, mustKV(t, c, "points"), "p8", "x", 2)
	mustFlush(t, c)
	if wm := c.Watermark(); wm != 1 {
		t.Errorf("replayed copy: watermark %d after op 2's write, want 1", wm)
	}
	closeT(t, c)

	// The original engine: op 2 is written and flushed.
	if err := db.Update(ctx, 2, func(b *Batch) error {
		b.Put(points, []byte("p8"), []byte("x"))
		b.Set(deleted, 8, true)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	mustFlush(t, db)
	if wm := db.Watermark(); wm != 2 {
		t.Fatalf("watermark %d after flushing batch op 2, want 2", wm)
	}
	c = crash("after-op2")
	defer closeT(t, c)
	if wm := c.Watermark(); wm != 2 {
		t.Fatalf("after a crash: watermark %d, want 2", wm)
	}
	wantGet(t, mustKV(t, c, "points"), "p7", "payload")
	wantGet(t, mustKV(t, c, "points"), "p8", "x")
	wantBit(t, mustBits(t, c, "deleted"), 7, true)
	wantBit(t, mustBits(t, c, "deleted"), 8, true)
}

// TestDeleteRangeConcurrentWithFlush: range deletes that seal the active
// table (it holds a key in the range) while flushes release generations.
// Every read stays exact; under -race this must report no data race
// (buffer.KV.newActive, called by DeleteRange, reads kv.lastCap, which
// KV.Release writes under kv.vmu on the flusher's goroutine).
func TestDeleteRangeConcurrentWithFlush(t *testing.T) {
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1})
	defer closeT(t, db)
	k := mustKV(t, db, "k")
	stop := make(chan struct{})
	var flusher sync.WaitGroup
	flusher.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := db.Flush(ctx); err != nil {
				t.Error(err)
				return
			}
		}
	})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			lo, hi := fmt.Appendf(nil, "w%d/", w), fmt.Appendf(nil, "w%d0", w)
			for i := range 300 {
				key := fmt.Appendf(nil, "w%d/%03d", w, i)
				if err := k.Put(ctx, key, []byte("v"), 0); err != nil {
					t.Error(err)
					return
				}
				if v, err := k.Get(key); err != nil || string(v) != "v" {
					t.Errorf("Get(%s) = %q, %v", key, v, err)
					return
				}
				if err := k.DeleteRange(ctx, lo, hi, 0); err != nil {
					t.Error(err)
					return
				}
				if v, err := k.Get(key); !errors.Is(err, ErrNotFound) {
					t.Errorf("Get(%s) after DeleteRange = %q, %v", key, v, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	flusher.Wait()
	if got := scan(t, k, nil); len(got) != 0 {
		t.Fatalf("keys left after every range delete: %v", got)
	}
}

// TestReadsAfterCloseBegan: once Close has begun, reads return ErrClosed
// even while its final flush is still running and the value they ask for
// is still pending in memory; an iterator positioned before Close is no
// longer valid. (Close is held inside its final flush by a stalled WAL
// write; Flush returning ErrClosed shows that Close has begun.)
func TestReadsAfterCloseBegan(t *testing.T) {
	sfs, fsys := newStallFS()
	opts := &Options{FlushInterval: -1, storeFS: fsys}
	dir := t.TempDir()
	db := openT(t, dir, opts)
	k, b := mustKV(t, db, "k"), mustBits(t, db, "b")
	mustPut(t, k, "p", "pending", 1)
	mustSet(t, b, 70, true, 1)
	it, err := k.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !it.First() || !it.Valid() {
		t.Fatal("iterator not positioned")
	}
	sfs.armed.Store(true)
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	sfs.waitStalled(t) // the final flush is in the WAL write: Close has begun
	if err := db.Flush(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Flush during Close: %v", err)
	}
	checks := map[string]error{}
	_, checks["Get"] = k.Get([]byte("p"))
	_, checks["GetAppend"] = k.GetAppend(nil, []byte("p"))
	_, checks["GetMany"] = k.GetMany([][]byte{[]byte("p")}, make([][]byte, 1), nil)
	_, checks["NewIter"] = k.NewIter(nil)
	_, checks["Bits.Get"] = b.Get(70)
	checks["Bits.GetMany"] = b.GetMany([]uint64{70}, make([]bool, 1))
	_, checks["Len"] = b.Len()
	_, checks["Count"] = b.Count()
	_, checks["NewSnapshot"] = db.NewSnapshot()
	checks["Put"] = k.Put(ctx, []byte("q"), nil, 2)
	for name, err := range checks {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close began: %v, want ErrClosed", name, err)
		}
	}
	// The position taken before Close began holds until the next move
	// (issue 30); that move fails with ErrClosed and ends it.
	if !it.Valid() || string(it.Key()) != "p" || string(it.Value()) != "pending" {
		t.Errorf("iterator position after Close began: Valid %v Key %q Value %q; want it held", it.Valid(), it.Key(), it.Value())
	}
	if it.Next() || it.Valid() || it.Key() != nil || !errors.Is(it.Error(), ErrClosed) {
		t.Errorf("iterator move after Close began: Valid %v Key %q Error %v", it.Valid(), it.Key(), it.Error())
	}
	for i := range b.Ones(0) {
		t.Errorf("Ones after Close began yielded %d", i)
	}
	sfs.release()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := it.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("iterator Close after the engine closed: %v", err)
	}
	db = openT(t, dir, opts)
	defer closeT(t, db)
	wantGet(t, mustKV(t, db, "k"), "p", "pending") // the final flush kept it
	wantBit(t, mustBits(t, db, "b"), 70, true)
}

// TestNewKeyspaceCostIsFlat: creating a keyspace does not copy, validate
// and encode the whole catalog, whose size grows with every keyspace (that
// made creating n keyspaces cost O(n^2): W3/construct took 300 µs per
// keyspace at 1,000). Counted in allocations, which do not depend on the
// machine's speed: the next keyspaces after 2,000 cost no more than the
// first ones. (The flush target list's copy, also gone, was one
// allocation whatever its size: W3/construct measures that one.)
func TestNewKeyspaceCostIsFlat(t *testing.T) {
	db := openT(t, t.TempDir(), nil)
	defer db.Close()
	n := 0
	newKV := func() {
		n++
		if _, err := db.KV(fmt.Sprintf("ks-%d", n)); err != nil {
			t.Fatal(err)
		}
	}
	first := testing.AllocsPerRun(20, newKV)
	for range 2000 {
		newKV()
	}
	later := testing.AllocsPerRun(20, newKV)
	if later > first+4 {
		t.Fatalf("a new keyspace after %d costs %.0f allocations, the first ones %.0f", n, later, first)
	}
}

// TestCompactKeepsData: DB.Compact leaves every flushed key readable (and
// pending ones pending), and is refused with ErrClosed after Close.
func TestCompactKeepsData(t *testing.T) {
	ctx := t.Context()
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1})
	k := mustKV(t, db, "k")
	mustPut(t, k, "flushed", "1", 1)
	if err := db.FlushMemtables(ctx); err != nil {
		t.Fatal(err)
	}
	mustPut(t, k, "pending", "2", 2)
	if err := db.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"flushed": "1", "pending": "2"} {
		if got, err := k.Get([]byte(key)); err != nil || string(got) != want {
			t.Fatalf("Get(%q) after Compact = %q, %v; want %q", key, got, err, want)
		}
	}
	if m := db.Metrics(); m.PendingKeys != 1 {
		t.Fatalf("PendingKeys after Compact = %d, want 1 (Compact does not flush)", m.PendingKeys)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Compact(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Compact after Close: %v, want ErrClosed", err)
	}
}

// A flush writes a bitslice's header with the previous flush's watermark
// (BitsGen.WriteLagged: one fdatasync, so the header may reach the disk
// before the data); Close records the last flush's watermark, whose bits
// are durable, so the file's header matches the engine's watermark after a
// clean Close, and never runs ahead of it before.
func TestBitsHeaderWatermarkAfterClose(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, &Options{FlushInterval: -1})
	b := mustBits(t, db, "hw")
	path := db.dir.BitsPath("hw")
	for op := uint64(1); op <= 3; op++ {
		mustSet(t, b, op, true, op)
		if err := db.EndOp(ctx, op); err != nil {
			t.Fatal(err)
		}
		mustFlush(t, db)
		info, err := bitslice.ReadInfo(path)
		if err != nil {
			t.Fatal(err)
		}
		if info.Watermark >= op || info.Watermark > db.Watermark() {
			t.Fatalf("after flush %d: header watermark %d, engine's %d: want the previous flush's", op, info.Watermark, db.Watermark())
		}
	}
	wm := db.Watermark()
	closeT(t, db)
	info, err := bitslice.ReadInfo(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Watermark != wm || wm != 3 {
		t.Fatalf("after Close: header watermark %d, engine's %d; want both 3", info.Watermark, wm)
	}
}
