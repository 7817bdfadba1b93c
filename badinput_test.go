package kvbuf

// The bad-input catalogue (contract 6): every bad input the API accepts —
// damaged, truncated or foreign files, wrong path kinds, a directory locked
// by another process, bad names, oversize keys and values, huge indexes,
// nonsense option values — gets a typed error (checked with errors.Is) or
// documented harmless behaviour, never a panic, and leaves the files on
// disk byte for byte as they were (hashed before and after).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/storage"
)

// lockChild opens the engine in $KVBUF_CHILD_DIR, prints "locked", and
// holds it until its stdin is closed.
func lockChild() int {
	db, err := Open(os.Getenv(childDirEnv), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 4
	}
	fmt.Println("locked")
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := db.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "close:", err)
		return 4
	}
	return 0
}

// hashTree describes every file under root (path, type, mode, contents),
// skipping the subdirectories named in skip. Two equal hashes mean nothing
// was created, removed or changed.
func hashTree(t testing.TB, root string, skip ...string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root { // a path that does not exist or cannot be a directory
				fmt.Fprintf(h, "missing %v\n", errors.Is(err, fs.ErrNotExist))
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(root, p)
		for _, s := range skip {
			if rel == s && d.IsDir() {
				return filepath.SkipDir
			}
			if rel == s {
				return nil // SkipDir on a file would skip the rest of its directory
			}
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %v\n", rel, info.Mode()) // not a directory's size: it counts entries, LOCK among them
		if info.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// newEngineDir makes an engine with keyspace "k" holding a=1 and bitslice
// "b" with bit 3 set, closed.
func newEngineDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	db := openT(t, dir, nil)
	if err := mustKV(t, db, "k").Put(ctx, []byte("a"), []byte("1"), 1); err != nil {
		t.Fatal(err)
	}
	if err := mustBits(t, db, "b").Set(ctx, 3, true, 2); err != nil {
		t.Fatal(err)
	}
	closeT(t, db)
	return dir
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// setCatalog overwrites the engine's keyspace catalog through the storage
// package.
func setCatalog(t testing.TB, dir string, catalog []byte) {
	t.Helper()
	st, err := storage.Open(filepath.Join(dir, StoreDir), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := st.NewBatch()
	b.SetMeta(catalogMeta, catalog)
	if err := errors.Join(st.Apply(b), st.Close()); err != nil {
		t.Fatal(err)
	}
}

func storeFiles(t testing.TB, dir, prefix string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, StoreDir))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) || strings.HasSuffix(e.Name(), prefix) {
			out = append(out, filepath.Join(dir, StoreDir, e.Name()))
		}
	}
	sort.Strings(out)
	return out
}

// TestBadOpenInputs: Open of a damaged, foreign or locked directory fails
// with the documented error and changes nothing.
func TestBadOpenInputs(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T) string // returns the path to Open
		want  []error                   // errors.Is must hold for each
	}{
		{"path is a regular file", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "f")
			writeFile(t, p, []byte("data"))
			return p
		}, []error{ErrNotEngine}},
		{"path is a symlink to a file", func(t *testing.T) string {
			d := t.TempDir()
			writeFile(t, filepath.Join(d, "f"), []byte("data"))
			if err := os.Symlink(filepath.Join(d, "f"), filepath.Join(d, "l")); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(d, "l")
		}, []error{ErrNotEngine}},
		{"path is a device", func(t *testing.T) string { return "/dev/null" }, []error{ErrNotEngine}},
		{"parent is a file", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "f")
			writeFile(t, p, nil)
			return filepath.Join(p, "engine")
		}, []error{syscall.ENOTDIR}},
		{"non-empty foreign directory", func(t *testing.T) string {
			d := t.TempDir()
			writeFile(t, filepath.Join(d, "precious.txt"), []byte("x"))
			return d
		}, []error{ErrNotEngine}},
		{"foreign directory with a subdirectory", func(t *testing.T) string {
			d := t.TempDir()
			if err := os.Mkdir(filepath.Join(d, "store"), 0o755); err != nil {
				t.Fatal(err)
			}
			return d
		}, []error{ErrNotEngine}},
		{"foreign manifest", func(t *testing.T) string {
			d := t.TempDir()
			writeFile(t, filepath.Join(d, ManifestName), []byte("something else\n"))
			return d
		}, []error{ErrNotEngine}},
		{"empty manifest", func(t *testing.T) string {
			d := t.TempDir()
			writeFile(t, filepath.Join(d, ManifestName), nil)
			return d
		}, []error{ErrNotEngine}},
		{"manifest of a future format", func(t *testing.T) string {
			d := newEngineDir(t)
			writeFile(t, filepath.Join(d, ManifestName), []byte("kvbuf engine directory\nformat 2\n"))
			return d
		}, []error{ErrCorrupt}},
		{"truncated manifest", func(t *testing.T) string {
			d := newEngineDir(t)
			writeFile(t, filepath.Join(d, ManifestName), []byte("kvbuf engine directory\n"))
			return d
		}, []error{ErrCorrupt}},
		{"manifest is a directory", func(t *testing.T) string {
			d := t.TempDir()
			if err := os.Mkdir(filepath.Join(d, ManifestName), 0o755); err != nil {
				t.Fatal(err)
			}
			return d
		}, []error{ErrNotEngine}},
		{"store is a file", func(t *testing.T) string {
			d := newEngineDir(t)
			if err := os.RemoveAll(filepath.Join(d, StoreDir)); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(d, StoreDir), []byte("x"))
			return d
		}, []error{syscall.ENOTDIR}},
		{"bits is a file", func(t *testing.T) string {
			d := newEngineDir(t)
			if err := os.RemoveAll(filepath.Join(d, BitsDir)); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(d, BitsDir), []byte("x"))
			return d
		}, []error{syscall.ENOTDIR}},
		{"pebble MANIFEST overwritten", func(t *testing.T) string {
			d := newEngineDir(t)
			for _, p := range storeFiles(t, d, "MANIFEST-") {
				writeFile(t, p, bytes.Repeat([]byte{0x5a}, 100))
			}
			return d
		}, []error{ErrCorrupt, storage.ErrCorrupt}},
		{"pebble MANIFEST removed", func(t *testing.T) string {
			d := newEngineDir(t)
			for _, p := range storeFiles(t, d, "MANIFEST-") {
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
			}
			return d
		}, []error{ErrCorrupt, storage.ErrCorrupt}},
		{"keyspace catalog garbage", func(t *testing.T) string {
			d := newEngineDir(t)
			setCatalog(t, d, []byte("\x00\xff garbage"))
			return d
		}, []error{ErrCorrupt}},
		{"keyspace catalog id zero", func(t *testing.T) string {
			d := newEngineDir(t)
			setCatalog(t, d, []byte("k 0\n"))
			return d
		}, []error{ErrCorrupt}},
		{"keyspace catalog id overflow", func(t *testing.T) string {
			d := newEngineDir(t)
			setCatalog(t, d, []byte("k 4294967296\n"))
			return d
		}, []error{ErrCorrupt}},
		{"keyspace catalog duplicate name", func(t *testing.T) string {
			d := newEngineDir(t)
			setCatalog(t, d, []byte("k 1\nk 2\n"))
			return d
		}, []error{ErrCorrupt}},
		{"keyspace catalog bad name", func(t *testing.T) string {
			d := newEngineDir(t)
			setCatalog(t, d, []byte("../x 1\n"))
			return d
		}, []error{ErrCorrupt}},
		{"locked by another process", func(t *testing.T) string {
			d := newEngineDir(t)
			cmd := reexec(t, "lock", childDirEnv+"="+d)
			in, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				in.Close()
				if err := cmd.Wait(); err != nil {
					t.Errorf("lock child: %v\n%s", err, stderr.String())
				}
			})
			if line, err := bufio.NewReader(out).ReadString('\n'); line != "locked\n" {
				t.Fatalf("lock child said %q, %v\n%s", line, err, stderr.String())
			}
			return d
		}, []error{ErrLocked}},
		{"locked in this process", func(t *testing.T) string {
			d := newEngineDir(t)
			db := openT(t, d, nil)
			t.Cleanup(func() { closeT(t, db) })
			return d
		}, []error{ErrLocked}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := c.setup(t)
			// pebble rewrites some of its own files (WAL, MANIFEST) whenever
			// it opens, so failures found after the store is open (catalog,
			// bits directory) change store/ byte-wise; they must leave its
			// contents as they were, and every other file byte for byte.
			before := hashTree(t, path, LockName, StoreDir) + storeDump(t, path)
			db, err := Open(path, nil)
			if err == nil {
				closeT(t, db)
				t.Fatalf("Open succeeded, want %v", c.want)
			}
			for _, w := range c.want {
				if !errors.Is(err, w) {
					t.Errorf("Open = %v; want errors.Is %v", err, w)
				}
			}
			if after := hashTree(t, path, LockName, StoreDir) + storeDump(t, path); after != before {
				t.Errorf("the failed Open changed the directory:\n%s\n%s", before, after)
			}
		})
	}
}

// TestBadBitsliceFiles: a damaged bitslice file is reported by DB.Bits with
// ErrCorrupt (and bitslice.ErrCorrupt), the file is untouched, and the rest
// of the engine keeps working.
func TestBadBitsliceFiles(t *testing.T) {
	fixture := func(name string) func(string) error {
		return func(p string) error {
			b, err := os.ReadFile(filepath.Join("testdata", "bitslice", name))
			if err != nil {
				return err
			}
			return os.WriteFile(p, b, 0o644)
		}
	}
	write := func(b []byte) func(string) error {
		return func(p string) error { return os.WriteFile(p, b, 0o644) }
	}
	mutate := func(f func(b []byte) []byte) func(string) error {
		return func(p string) error {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(p, f(b), 0o644)
		}
	}
	cases := []struct {
		name  string
		setup func(path string) error
		want  []error
	}{
		{"empty file", write(nil), []error{ErrCorrupt, bitslice.ErrCorrupt}},
		{"text file", write([]byte("hello, world\n")), []error{ErrCorrupt, bitslice.ErrCorrupt}},
		{"filled with 0xAB", write(bytes.Repeat([]byte{0xab}, 8192)), []error{ErrCorrupt, bitslice.ErrCorrupt}},
		{"zero header area", write(make([]byte, 8192)), []error{ErrCorrupt, bitslice.ErrCorrupt}},
		{"fixture badmagic", fixture("badmagic.bits"), []error{ErrCorrupt, bitslice.ErrCorrupt}},
		{"fixture badchecksum", fixture("badchecksum.bits"), []error{ErrCorrupt, bitslice.ErrCorrupt}},
		{"fixture truncated", fixture("truncated.bits"), []error{ErrCorrupt, bitslice.ErrCorrupt}},
		{"cut inside the header", mutate(func(b []byte) []byte { return b[:100] }), []error{ErrCorrupt, bitslice.ErrCorrupt}},
		{"cut inside the data", mutate(func(b []byte) []byte { return b[:bitslice.DataOffset+3] }), []error{ErrCorrupt, bitslice.ErrCorrupt}},
		{"both slots flipped", mutate(func(b []byte) []byte {
			b[20] ^= 1
			b[2048+20] ^= 1
			return b
		}), []error{ErrCorrupt, bitslice.ErrCorrupt}},
		{"is a directory", func(p string) error {
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.Mkdir(p, 0o755)
		}, []error{ErrCorrupt, bitslice.ErrCorrupt}},
		{"is a symlink to /dev/zero", func(p string) error {
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.Symlink("/dev/zero", p)
		}, []error{ErrCorrupt, bitslice.ErrCorrupt}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := newEngineDir(t)
			path := filepath.Join(dir, BitsDir, "b"+BitsExt)
			if err := c.setup(path); err != nil {
				t.Fatal(err)
			}
			before := hashTree(t, dir, LockName, StoreDir)
			db := openT(t, dir, nil)
			_, err := db.Bits("b")
			for _, w := range c.want {
				if !errors.Is(err, w) {
					t.Errorf("Bits = %v; want errors.Is %v", err, w)
				}
			}
			// The engine goes on working, and a second try fails the same way.
			wantGet(t, mustKV(t, db, "k"), "a", "1")
			if _, err2 := db.Bits("b"); !errors.Is(err2, ErrCorrupt) {
				t.Errorf("second Bits = %v", err2)
			}
			closeT(t, db)
			if after := hashTree(t, dir, LockName, StoreDir); after != before {
				t.Errorf("the failed Bits changed the directory")
			}
		})
	}
	t.Run("torn header falls back to the other slot", func(t *testing.T) {
		dir := newEngineDir(t)
		path := filepath.Join(dir, BitsDir, "b"+BitsExt)
		if err := fixture("torn.bits")(path); err != nil {
			t.Fatal(err)
		}
		db := openT(t, dir, nil)
		defer closeT(t, db)
		if _, err := db.Bits("b"); err != nil {
			t.Fatalf("Bits on a file with one good slot: %v", err)
		}
	})
}

// TestBadAPIInputs: bad arguments to an open engine are errors that leave
// the engine and its files as they were.
func TestBadAPIInputs(t *testing.T) {
	dir := newEngineDir(t)
	db := openT(t, dir, &Options{MaxKeySize: 8, MaxValueSize: 16, FlushInterval: -1})
	k, b := mustKV(t, db, "k"), mustBits(t, db, "b")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name string
		want error
		run  func() error
	}{
		{"KV name empty", ErrBadName, func() error { _, err := db.KV(""); return err }},
		{"KV name with slash", ErrBadName, func() error { _, err := db.KV("a/b"); return err }},
		{"KV name dot-dot", ErrBadName, func() error { _, err := db.KV(".."); return err }},
		{"KV name NUL", ErrBadName, func() error { _, err := db.KV("a\x00b"); return err }},
		{"KV name 129 bytes", ErrBadName, func() error { _, err := db.KV(strings.Repeat("a", 129)); return err }},
		{"Bits name with slash", ErrBadName, func() error { _, err := db.Bits("../k"); return err }},
		{"Bits name non-ASCII", ErrBadName, func() error { _, err := db.Bits("bé"); return err }},
		{"Put empty key", ErrEmptyKey, func() error { return k.Put(ctx, nil, []byte("v"), 3) }},
		{"Delete empty key", ErrEmptyKey, func() error { return k.Delete(ctx, []byte{}, 3) }},
		{"Get empty key", ErrEmptyKey, func() error { _, err := k.Get(nil); return err }},
		{"Put oversize key", ErrKeyTooLarge, func() error { return k.Put(ctx, make([]byte, 9), nil, 3) }},
		{"Put huge key", ErrKeyTooLarge, func() error { return k.Put(ctx, make([]byte, 1<<20), nil, 3) }},
		{"Delete oversize key", ErrKeyTooLarge, func() error { return k.Delete(ctx, make([]byte, 9), 3) }},
		{"Get oversize key", ErrKeyTooLarge, func() error { _, err := k.Get(make([]byte, 9)); return err }},
		{"Put oversize value", ErrValueTooLarge, func() error { return k.Put(ctx, []byte("a"), make([]byte, 17), 3) }},
		{"Set bit 2^32 (buffer MaxBits)", bitslice.ErrOutOfRange, func() error { return b.Set(ctx, 1<<32, true, 3) }},
		{"Set bit 2^63", bitslice.ErrOutOfRange, func() error { return b.Set(ctx, 1<<63, true, 3) }},
		{"Set bit MaxUint64", bitslice.ErrOutOfRange, func() error { return b.Set(ctx, math.MaxUint64, false, 3) }},
		{"Flush with a cancelled context", context.Canceled, func() error { return db.Flush(cancelled) }},
		{"FlushMemtables with a cancelled context", context.Canceled, func() error { return db.FlushMemtables(cancelled) }},
	}
	before := hashTree(t, dir, LockName, StoreDir)
	for _, c := range cases {
		if err := c.run(); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// Harmless inputs: reads past the end, empty and inverted ranges.
	for _, i := range []uint64{64, 1 << 32, 1 << 63, math.MaxUint64} {
		if v, err := b.Get(i); err != nil || v {
			t.Errorf("Bits.Get(%d) = %v, %v; want false, nil", i, v, err)
		}
	}
	for _, r := range [][2]string{{"z", "a"}, {"a", "a"}, {"\xff\xff", ""}} {
		it, err := k.NewIter([]byte(r[0]), []byte(r[1]))
		if err != nil {
			t.Fatalf("NewIter%q: %v", r, err)
		}
		if it.First() {
			t.Errorf("NewIter%q found %q", r, it.Key())
		}
		if err := errors.Join(it.Error(), it.Close()); err != nil {
			t.Errorf("NewIter%q: %v", r, err)
		}
	}
	if st := db.Stats(); st.PendingBytes != 0 {
		t.Errorf("rejected calls left %d pending bytes", st.PendingBytes)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if wm := db.Watermark(); wm != 2 {
		t.Errorf("watermark %d after only rejected writes, want 2", wm)
	}
	closeT(t, db)
	if after := hashTree(t, dir, LockName, StoreDir); after != before {
		t.Errorf("rejected calls changed the directory")
	}
	if _, err := os.Stat(filepath.Join(dir, BitsDir, "k"+BitsExt)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Bits(\"../k\") created something: %v", err)
	}
}

// TestNonsenseOptions: negative and zero sizes mean the documented
// defaults (or "disabled" where documented), never a panic or a zero
// limit.
func TestNonsenseOptions(t *testing.T) {
	opts := &Options{
		FlushInterval:   -5,
		MaxPendingBytes: math.MinInt64,
		MaxKeySize:      -1,
		MaxValueSize:    -1,
		Shards:          -7,
		CacheSize:       -1,
	}
	db := openT(t, t.TempDir(), opts)
	defer closeT(t, db)
	k := mustKV(t, db, "k")
	if err := k.Put(ctx, make([]byte, defaultMaxKeySize), make([]byte, defaultMaxValueSize), 1); err != nil {
		t.Fatalf("key and value at the default limits: %v", err)
	}
	if err := k.Put(ctx, make([]byte, defaultMaxKeySize+1), nil, 2); !errors.Is(err, ErrKeyTooLarge) {
		t.Fatalf("key over the default limit: %v", err)
	}
	if err := k.Put(ctx, []byte("v"), make([]byte, defaultMaxValueSize+1), 2); !errors.Is(err, ErrValueTooLarge) {
		t.Fatalf("value over the default limit: %v", err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// storeDump describes the logical contents of dir's store, read through a
// read-only storage.Open: every user key and value, the catalog and the
// watermark (or why it cannot be opened).
func storeDump(t testing.TB, dir string) string {
	t.Helper()
	st, err := storage.Open(filepath.Join(dir, StoreDir), &storage.Options{ReadOnly: true})
	if err != nil {
		return fmt.Sprintf(" store: corrupt=%v notexist=%v", errors.Is(err, storage.ErrCorrupt), errors.Is(err, fs.ErrNotExist))
	}
	defer st.Close()
	var b strings.Builder
	cat, err := st.GetMeta(catalogMeta)
	wm, werr := st.Watermark()
	fmt.Fprintf(&b, " catalog=%q,%v wm=%d,%v", cat, err, wm, werr)
	it, err := st.NewIter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		fmt.Fprintf(&b, " %q=%q", it.Key(), it.Value())
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestAccessorsAndClosedEngine covers the small accessors and the calls
// that must fail with ErrClosed (or a typed error) on a closed engine or a
// missing directory.
func TestAccessorsAndClosedEngine(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, &Options{FlushInterval: -1})
	k, b := mustKV(t, db, "name-k"), mustBits(t, db, "name-b")
	if db.Dir() != dir || k.Name() != "name-k" || b.Name() != "name-b" {
		t.Fatalf("Dir/Name = %q %q %q", db.Dir(), k.Name(), b.Name())
	}
	if err := k.Put(ctx, []byte("a"), []byte("1"), 1); err != nil {
		t.Fatal(err)
	}
	it, err := k.NewIter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if it.Valid() || !it.First() || !it.Valid() || string(it.Key()) != "a" {
		t.Fatalf("iterator Valid/First/Key wrong")
	}
	if err := db.FlushMemtables(ctx); err != nil {
		t.Fatal(err)
	}
	closeT(t, db)
	if it.Next() || it.Valid() || !errors.Is(it.Error(), ErrClosed) {
		t.Fatalf("iterator after Close: Valid %v, Error %v", it.Valid(), it.Error())
	}
	// It reports the store's ErrClosed, which kvbuf.ErrClosed does not
	// match (a finding in the report), but never a panic.
	if err := it.Close(); err != nil && !errors.Is(err, storage.ErrClosed) {
		t.Fatalf("closing an iterator the engine closed: %v", err)
	}
	if _, err := b.Len(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Len after Close: %v", err)
	}
	if err := db.FlushMemtables(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("FlushMemtables after Close: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := BitsNames(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("BitsNames of a missing directory: %v", err)
	}
	// Names that are not bitslices are skipped.
	writeFile(t, filepath.Join(dir, BitsDir, "notes.txt"), nil)
	writeFile(t, filepath.Join(dir, BitsDir, "bad name"+BitsExt), nil)
	if names := BitsNamesT(t, dir); fmt.Sprint(names) != "[name-b]" {
		t.Fatalf("BitsNames = %v", names)
	}
}
