package kvbuf

// Helpers shared by the root package's tests (every suite may use them):
// opening and closing engines, getting handles, checking reads, scanning,
// hashing a directory tree, dumping a store's logical content, and copying
// an engine directory as a kill -9 would leave it.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvbuf/kvbuf/internal/enginedir"
	"github.com/kvbuf/kvbuf/storage"
)

// ctx is the context of calls that are not about cancellation.
var ctx = context.Background()

// testSeedFlag replays a randomized test of this package: every randomized
// test logs the seed it used and takes it back from -kvbuf.seed.
var testSeedFlag = flag.Uint64("kvbuf.seed", 0, "seed of the randomized root tests (0: random, logged)")

// testSeed returns the seed of a randomized test, logging how to replay it.
func testSeed(t testing.TB) uint64 {
	t.Helper()
	seed := *testSeedFlag
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (replay: go test -run '^%s$' -kvbuf.seed %d .)", seed, strings.SplitN(t.Name(), "/", 2)[0], seed)
	return seed
}

// raceEnabled reports whether the test binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

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

func mustPut(t testing.TB, k *KV, key, value string, op uint64) {
	t.Helper()
	if err := k.Put(ctx, []byte(key), []byte(value), op); err != nil {
		t.Fatalf("Put(%q, op %d): %v", key, op, err)
	}
}

func mustSet(t testing.TB, b *Bits, i uint64, v bool, op uint64) {
	t.Helper()
	if err := b.Set(ctx, i, v, op); err != nil {
		t.Fatalf("Set(%d, op %d): %v", i, op, err)
	}
}

func mustFlush(t testing.TB, db *DB) {
	t.Helper()
	if err := db.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

// getter is what KV and SnapshotKV have in common for wantGet.
type getter interface {
	Get(key []byte) ([]byte, error)
}

// wantGet checks that key reads as want; want "" means ErrNotFound.
func wantGet(t testing.TB, k getter, key, want string) {
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

// wantBit checks bit i of b (a Bits or a SnapshotBits).
func wantBit(t testing.TB, b interface{ Get(uint64) (bool, error) }, i uint64, want bool) {
	t.Helper()
	if v, err := b.Get(i); err != nil || v != want {
		t.Fatalf("bit %d = %v, %v; want %v", i, v, err, want)
	}
}

// iterable is what KV and SnapshotKV have in common for scan.
type iterable interface {
	NewIter(o *IterOptions) (*Iter, error)
}

// scan returns "key=value" for every key of k within o, in iteration order
// (forwards).
func scan(t testing.TB, k iterable, o *IterOptions) []string {
	t.Helper()
	it, err := k.NewIter(o)
	if err != nil {
		t.Fatalf("NewIter: %v", err)
	}
	got := []string{}
	for ok := it.First(); ok; ok = it.Next() {
		got = append(got, string(it.Key())+"="+string(it.Value()))
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		t.Fatalf("scan: %v", err)
	}
	return got
}

// scanReverse is scan from Last to the front, returned in that order.
func scanReverse(t testing.TB, k iterable, o *IterOptions) []string {
	t.Helper()
	it, err := k.NewIter(o)
	if err != nil {
		t.Fatalf("NewIter: %v", err)
	}
	got := []string{}
	for ok := it.Last(); ok; ok = it.Prev() {
		got = append(got, string(it.Key())+"="+string(it.Value()))
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		t.Fatalf("reverse scan: %v", err)
	}
	return got
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// hashTree describes every entry under root (path, type, mode, contents of
// regular files, symlink targets), skipping the relative paths in skip (a
// directory's whole subtree). Equal hashes mean nothing was created,
// removed or changed. A root that does not exist hashes as "missing".
func hashTree(t testing.TB, root string, skip ...string) string {
	t.Helper()
	sum, err := treeHash(root, skip...)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// waitQuiet waits until the files under dir stop changing (the same hash
// over several polls), at most 30 s: an engine that is open goes on
// writing after Open and FlushMemtables return (pebble replaces its
// OPTIONS file and deletes obsolete logs and manifests in the
// background), and a test comparing the files before and after something
// else must not see those writes.
func waitQuiet(dir string) error {
	var last string
	stable := 0
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		sum, err := treeHash(dir)
		if err != nil || sum != last {
			last, stable = sum, 0
			continue
		}
		if stable++; stable == 5 {
			return nil
		}
	}
	return fmt.Errorf("%s still changing after 30 s", dir)
}

// treeHash is hashTree returning its error.
func treeHash(root string, skip ...string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root {
				fmt.Fprintf(h, "missing %v\n", errors.Is(err, fs.ErrNotExist))
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(root, p)
		for _, s := range skip {
			if rel == s {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil // SkipDir on a file would skip the rest of its directory
			}
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		// Not a directory's size: it counts entries.
		fmt.Fprintf(h, "%s %v\n", rel, info.Mode())
		switch {
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%d:", len(b))
			h.Write(b)
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "-> %s\n", target)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// listTree returns the relative paths under root, for failure messages.
func listTree(root string) []string {
	var out []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

// storeDump describes the logical content of dir's store, read through a
// read-only storage.Open: the catalog, the watermark and every key of the
// keyspaces named by the catalog (or why the store cannot be opened). It
// must not be called while an engine has dir open.
func storeDump(t testing.TB, dir string) string {
	t.Helper()
	st, err := storage.Open(filepath.Join(dir, enginedir.StoreDir), &storage.Options{ReadOnly: true})
	if err != nil {
		return fmt.Sprintf("store: corrupt=%v notexist=%v locked=%v",
			errors.Is(err, ErrCorruptBlock), errors.Is(err, fs.ErrNotExist), errors.Is(err, ErrLocked))
	}
	defer st.Close()
	var b strings.Builder
	cat, cerr := st.GetMeta(enginedir.CatalogMeta)
	wm, werr := st.Watermark()
	fmt.Fprintf(&b, "catalog=%q,%v wm=%d,%v", cat, cerr, wm, werr)
	ids := map[uint32]bool{}
	if c, err := enginedir.ParseCatalog(cat); err == nil {
		for _, id := range c.Keyspaces {
			ids[id] = true
		}
		for _, id := range c.Dropped {
			ids[id] = true
		}
	}
	// Also look at a few ids a broken catalog might have lost track of.
	for id := uint32(1); id <= 8; id++ {
		ids[id] = true
	}
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		it, err := st.NewIter(storage.KeyspaceID(id), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for ok := it.First(); ok; ok = it.Next() {
			fmt.Fprintf(&b, " %d:%q=%q", id, it.Key(), it.Value())
		}
		if err := errors.Join(it.Error(), it.Close()); err != nil {
			fmt.Fprintf(&b, " %d:error %v", id, err)
		}
	}
	return b.String()
}

// copyDir copies the directory tree src to dst as a kill -9 of the engine
// holding src would leave it: every file as it is now (page cache
// included), LOCK files too (a dead process holds no flock).
//
// pebble goes on compacting while the engine is open, so a file listed
// by the walk may be deleted before it is read, or a new one appear that a
// MANIFEST copied later names. A copy is kept only when no file vanished
// and the set of names is the same after it as before; otherwise dst is
// wiped and the copy retried. A file that only grew (the write-ahead log)
// is a crash's state too and does not force a retry.
func copyDir(src, dst string) error {
	var err error
	for range 50 {
		var before, after []string
		if before, err = treeNames(src); err != nil {
			return err
		}
		err = copyTree(src, dst)
		if err == nil {
			if after, err = treeNames(src); err != nil {
				return err
			}
			if slices.Equal(before, after) {
				return nil
			}
			err = fmt.Errorf("copy %s: files changed during the copy", src)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if rerr := os.RemoveAll(dst); rerr != nil {
			return rerr
		}
	}
	return err
}

// treeNames lists the paths under dir, sorted.
func treeNames(dir string) ([]string, error) {
	var names []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		names = append(names, path)
		return nil
	})
	return names, err
}

func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}

// newEngineDir makes an engine with keyspace "k" holding a=1 (op 1) and
// bitslice "b" with bit 3 set (op 2), closed: watermark 2.
func newEngineDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	db := openT(t, dir, nil)
	mustPut(t, mustKV(t, db, "k"), "a", "1", 1)
	if err := mustBits(t, db, "b").Set(ctx, 3, true, 2); err != nil {
		t.Fatal(err)
	}
	if err := db.EndOp(ctx, 2); err != nil {
		t.Fatal(err)
	}
	closeT(t, db)
	return dir
}

// engineState is the logical content of an engine seen through the API:
// keyspaces with their keys, bitslices with their set bits, the watermark.
// The engine must be open.
func engineState(t testing.TB, db *DB) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "wm=%d", db.Watermark())
	for _, name := range db.Keyspaces() {
		fmt.Fprintf(&b, " kv %s %v", name, scan(t, mustKV(t, db, name), nil))
	}
	for _, name := range db.Bitslices() {
		bs := mustBits(t, db, name)
		n, err := bs.Len()
		if err != nil {
			t.Fatal(err)
		}
		var ones []uint64
		for i := range bs.Ones(0) {
			ones = append(ones, i)
		}
		fmt.Fprintf(&b, " bits %s len=%d %v", name, n, ones)
	}
	return b.String()
}
