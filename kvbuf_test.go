package kvbuf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if code := runTestChild(); code >= 0 { // a re-executed child (crash_test.go)
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}

var ctx = context.Background()

func openT(t testing.TB, dir string, opts *Options) *DB {
	t.Helper()
	db, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return db
}

func closeT(t testing.TB, db *DB) {
	t.Helper()
	if err := db.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func mustKV(t testing.TB, db *DB, name string) *KV {
	t.Helper()
	k, err := db.KV(name)
	if err != nil {
		t.Fatalf("KV(%q): %v", name, err)
	}
	return k
}

func mustBits(t testing.TB, db *DB, name string) *Bits {
	t.Helper()
	b, err := db.Bits(name)
	if err != nil {
		t.Fatalf("Bits(%q): %v", name, err)
	}
	return b
}

func wantGet(t testing.TB, k *KV, key, want string) {
	t.Helper()
	v, err := k.Get([]byte(key))
	if want == "" {
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get(%q) = %q, %v; want ErrNotFound", key, v, err)
		}
		return
	}
	if err != nil || string(v) != want {
		t.Fatalf("Get(%q) = %q, %v; want %q", key, v, err, want)
	}
}

func TestKVReadYourWritesAcrossFlushAndReopen(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, &Options{FlushInterval: -1})
	k := mustKV(t, db, "users")
	for i := range 100 {
		if err := k.Put(ctx, fmt.Appendf(nil, "k%03d", i), fmt.Appendf(nil, "v%d", i), uint64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	wantGet(t, k, "k007", "v7")
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if wm := db.Watermark(); wm != 100 {
		t.Fatalf("watermark after flush = %d, want 100", wm)
	}
	if err := k.Delete(ctx, []byte("k007"), 101); err != nil {
		t.Fatal(err)
	}
	if err := k.Put(ctx, []byte("k008"), []byte("new"), 102); err != nil {
		t.Fatal(err)
	}
	wantGet(t, k, "k007", "")
	wantGet(t, k, "k008", "new")
	closeT(t, db) // the final flush persists ops 101 and 102

	db = openT(t, dir, nil)
	defer closeT(t, db)
	if wm := db.Watermark(); wm != 102 {
		t.Fatalf("watermark after reopen = %d, want 102", wm)
	}
	k = mustKV(t, db, "users")
	wantGet(t, k, "k007", "")
	wantGet(t, k, "k008", "new")
	wantGet(t, k, "k099", "v99")
}

func TestKeyspacesAreIsolatedAndPersisted(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, nil)
	a, b := mustKV(t, db, "a"), mustKV(t, db, "b")
	if err := a.Put(ctx, []byte("x"), []byte("in-a"), 1); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, []byte("x"), []byte("in-b"), 2); err != nil {
		t.Fatal(err)
	}
	wantGet(t, a, "x", "in-a")
	wantGet(t, b, "x", "in-b")
	if again := mustKV(t, db, "a"); again != a {
		t.Fatal("KV(name) returned a second handle for the same keyspace")
	}
	closeT(t, db)

	db = openT(t, dir, nil)
	defer closeT(t, db)
	if got := fmt.Sprint(db.Keyspaces()); got != "[a b]" {
		t.Fatalf("Keyspaces after reopen = %s", got)
	}
	c := mustKV(t, db, "c") // a new id must not reuse a or b's prefix
	wantGet(t, c, "x", "")
	wantGet(t, mustKV(t, db, "b"), "x", "in-b")
}

func TestIteratorMergesPendingAndStored(t *testing.T) {
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1})
	defer closeT(t, db)
	k, other := mustKV(t, db, "k"), mustKV(t, db, "other")
	for _, kv := range []string{"a", "b", "c", "d"} {
		if err := k.Put(ctx, []byte(kv), []byte("stored-"+kv), 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := other.Put(ctx, []byte("bb"), []byte("not mine"), 1); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	_ = k.Delete(ctx, []byte("b"), 2)
	_ = k.Put(ctx, []byte("c"), []byte("pending-c"), 3)
	_ = k.Put(ctx, []byte("e"), []byte("pending-e"), 4)

	it, err := k.NewIter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for ok := it.First(); ok; ok = it.Next() {
		got = append(got, string(it.Key())+"="+string(it.Value()))
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	want := "[a=stored-a c=pending-c d=stored-d e=pending-e]"
	if fmt.Sprint(got) != want {
		t.Fatalf("scan = %v, want %s", got, want)
	}

	it, err = k.NewIter([]byte("b"), []byte("d"))
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	if !it.SeekGE([]byte("a")) || string(it.Key()) != "c" {
		t.Fatalf("bounded SeekGE landed on %q", it.Key())
	}
	if it.Next() {
		t.Fatalf("bounded scan went past upper bound to %q", it.Key())
	}
}

func TestBitsPersistAndGrow(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, &Options{FlushInterval: -1})
	b := mustBits(t, db, "live")
	for _, i := range []uint64{0, 5, 64, 1000, 100_000} {
		if err := b.Set(ctx, i, true, i+1); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := b.Len(); n < 100_001 {
		t.Fatalf("Len with pending growth = %d, want >= 100001", n)
	}
	if v, _ := b.Get(1000); !v {
		t.Fatal("pending bit 1000 not visible")
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Set(ctx, 5, false, 200_000); err != nil {
		t.Fatal(err)
	}
	closeT(t, db)

	db = openT(t, dir, nil)
	defer closeT(t, db)
	if wm := db.Watermark(); wm != 200_000 {
		t.Fatalf("watermark = %d, want 200000", wm)
	}
	b = mustBits(t, db, "live")
	for i, want := range map[uint64]bool{0: true, 5: false, 6: false, 64: true, 1000: true, 100_000: true, 1 << 40: false} {
		if v, err := b.Get(i); err != nil || v != want {
			t.Fatalf("Get(%d) = %v, %v; want %v", i, v, err, want)
		}
	}
	names, err := BitsNames(dir)
	if err != nil || fmt.Sprint(names) != "[live]" {
		t.Fatalf("BitsNames = %v, %v", names, err)
	}
}

func TestSecondOpenIsLocked(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, nil)
	_, err := Open(dir, nil)
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	closeT(t, db)
	closeT(t, openT(t, dir, nil)) // the lock is released by Close
}

func TestOpenRefusesForeignDirectories(t *testing.T) {
	t.Run("non-empty", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "precious.txt"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(dir, nil); !errors.Is(err, ErrNotEngine) {
			t.Fatalf("Open of foreign dir: %v, want ErrNotEngine", err)
		}
		ents, _ := os.ReadDir(dir)
		if len(ents) != 1 {
			t.Fatalf("Open of a foreign dir changed it: %d entries", len(ents))
		}
	})
	t.Run("file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(path, nil); !errors.Is(err, ErrNotEngine) {
			t.Fatalf("Open of a file: %v, want ErrNotEngine", err)
		}
	})
	t.Run("foreign-manifest", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ManifestName), []byte("something else"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(dir, nil); !errors.Is(err, ErrNotEngine) {
			t.Fatalf("Open: %v, want ErrNotEngine", err)
		}
	})
	t.Run("damaged-manifest", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ManifestName), []byte("kvbuf engine directory\nformat 99\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(dir, nil); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Open: %v, want ErrCorrupt", err)
		}
	})
}

func TestCorruptBitsliceIsReported(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, nil)
	b := mustBits(t, db, "x")
	if err := b.Set(ctx, 3, true, 1); err != nil {
		t.Fatal(err)
	}
	closeT(t, db)
	path := filepath.Join(dir, BitsDir, "x"+BitsExt)
	if err := os.WriteFile(path, bytes.Repeat([]byte{0xAB}, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	db = openT(t, dir, nil)
	defer closeT(t, db)
	if _, err := db.Bits("x"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Bits on a corrupt file: %v, want ErrCorrupt", err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, bytes.Repeat([]byte{0xAB}, 8192)) {
		t.Fatal("opening a corrupt bitslice changed it")
	}
}

func TestBadInputs(t *testing.T) {
	db := openT(t, t.TempDir(), &Options{MaxKeySize: 8, MaxValueSize: 16})
	defer closeT(t, db)
	for _, name := range []string{"", ".", "..", "a/b", "a b", "ü", string(make([]byte, 129))} {
		if _, err := db.KV(name); !errors.Is(err, ErrBadName) {
			t.Errorf("KV(%q): %v, want ErrBadName", name, err)
		}
		if _, err := db.Bits(name); !errors.Is(err, ErrBadName) {
			t.Errorf("Bits(%q): %v, want ErrBadName", name, err)
		}
	}
	k := mustKV(t, db, "k")
	cases := []struct {
		name string
		err  error
		run  func() error
	}{
		{"empty key put", ErrEmptyKey, func() error { return k.Put(ctx, nil, []byte("v"), 0) }},
		{"empty key get", ErrEmptyKey, func() error { _, err := k.Get(nil); return err }},
		{"empty key delete", ErrEmptyKey, func() error { return k.Delete(ctx, []byte{}, 0) }},
		{"long key put", ErrKeyTooLarge, func() error { return k.Put(ctx, make([]byte, 9), nil, 0) }},
		{"long key get", ErrKeyTooLarge, func() error { _, err := k.Get(make([]byte, 9)); return err }},
		{"long value", ErrValueTooLarge, func() error { return k.Put(ctx, []byte("k"), make([]byte, 17), 0) }},
	}
	for _, c := range cases {
		if err := c.run(); !errors.Is(err, c.err) {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
		}
	}
	b := mustBits(t, db, "b")
	if err := b.Set(ctx, 1<<40, true, 0); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("Set(2^40): %v, want ErrOutOfRange", err)
	}
	wantGet(t, k, "k", "") // nothing was written by the rejected calls
	if err := k.Put(ctx, make([]byte, 8), make([]byte, 16), 0); err != nil {
		t.Errorf("key and value at their limits: %v", err)
	}
}

func TestOperationsAfterClose(t *testing.T) {
	db := openT(t, t.TempDir(), nil)
	k, b := mustKV(t, db, "k"), mustBits(t, db, "b")
	it, err := k.NewIter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	closeT(t, db)
	checks := map[string]error{
		"Put":    k.Put(ctx, []byte("a"), nil, 0),
		"Delete": k.Delete(ctx, []byte("a"), 0),
		"Set":    b.Set(ctx, 1, true, 0),
		"Flush":  db.Flush(ctx),
	}
	_, checks["Get"] = k.Get([]byte("a"))
	_, checks["BitsGet"] = b.Get(1)
	_, checks["KV"] = db.KV("k2")
	_, checks["Bits"] = db.Bits("b2")
	_, checks["NewIter"] = k.NewIter(nil, nil)
	for name, err := range checks {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	if it.First() || !errors.Is(it.Error(), ErrClosed) {
		t.Errorf("iterator after Close: Error() = %v, want ErrClosed", it.Error())
	}
	if err := it.Close(); err != nil && !errors.Is(err, ErrClosed) {
		t.Errorf("iterator Close after engine Close: %v, want nil or ErrClosed", err)
	}
	select {
	case <-db.Done():
	default:
		t.Fatal("Done not closed after Close returned")
	}
	if err := db.Wait(ctx); err != nil {
		t.Fatalf("Wait after Close: %v", err)
	}
}

func TestConcurrentCloseWithWriters(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, &Options{FlushInterval: -1})
	k := mustKV(t, db, "k")
	var wg sync.WaitGroup
	acked := make([][]int, 4) // writes that returned nil, per writer
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				err := k.Put(ctx, fmt.Appendf(nil, "w%d-%d", w, i), []byte("v"), 0)
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("Put: %v", err)
					return
				}
				acked[w] = append(acked[w], i)
			}
		})
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
	defer closeT(t, db)
	k = mustKV(t, db, "k")
	for w, is := range acked {
		for _, i := range is {
			wantGet(t, k, fmt.Sprintf("w%d-%d", w, i), "v") // Close's final flush kept every acked write
		}
	}
}

func TestDeletedStoreIsCorruptNotRecreated(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, nil)
	if err := mustKV(t, db, "k").Put(ctx, []byte("a"), []byte("1"), 1); err != nil {
		t.Fatal(err)
	}
	closeT(t, db)
	if err := os.RemoveAll(filepath.Join(dir, StoreDir)); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open without store/: %v, want ErrCorrupt", err)
	}
	if _, err := os.Stat(filepath.Join(dir, StoreDir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open recreated the missing store: %v", err)
	}
}

func TestInterruptedInitialisationResumes(t *testing.T) {
	// What a crash between writing the initial manifest and creating the
	// store leaves behind: the manifest says initialisation is not done,
	// so Open finishes it instead of calling the missing store corrupt.
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, BitsDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestName), []byte(manifestInit), 0o644); err != nil {
		t.Fatal(err)
	}
	db := openT(t, dir, nil)
	closeT(t, db)
	if b, err := os.ReadFile(filepath.Join(dir, ManifestName)); err != nil || string(b) != manifestText {
		t.Fatalf("manifest after resumed init: %q, %v", b, err)
	}
}
