package kvbuf

// The bad-input catalogue (contract 6): every bad input the API accepts —
// damaged, truncated or foreign files, wrong path kinds, a directory locked
// by this or another process, bad names, keys, values, ranges and indexes,
// stale ops, foreign and dropped handles, nonsense options — gets a typed
// error, checked with errors.Is, never a panic or an exit. Each input also
// checks that the files outside the store are byte for byte as they were
// and that the store's logical content (catalog, watermark, keys) did not
// change.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/internal/enginedir"
	"github.com/kvbuf/kvbuf/internal/testutil"
	"github.com/kvbuf/kvbuf/storage"
)

// childDirEnv names the engine directory of a re-executed child.
const childDirEnv = "KVBUF_TEST_DIR"

func init() {
	childRoles["lock"] = lockChild
	childRoles["openrace"] = openRaceChild
}

// lockChild opens the engine in $KVBUF_TEST_DIR, prints "locked", and holds
// it until its stdin is closed.
func lockChild() int {
	db, err := Open(os.Getenv(childDirEnv), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 4
	}
	// pebble flushes what it replayed from its log in the background
	// after Open (a new sstable, MANIFEST and OPTIONS, then the obsolete
	// files' removal): let it finish before saying so, or the parent's
	// before/after comparison of the store's files sees this process's
	// writes (seen in CI under load).
	if err := db.FlushMemtables(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "flush:", err)
		return 4
	}
	if err := waitQuiet(os.Getenv(childDirEnv)); err != nil {
		fmt.Fprintln(os.Stderr, err)
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

// openRaceChild serves TestOpenRaceLosersGetErrLocked: for each line
// "open DIR" it opens DIR and prints "won", "locked" or "error ..."; after
// "won" it holds the engine until the line "release", then closes it and
// prints "released". It prints "ready" first.
func openRaceChild() int {
	in := bufio.NewScanner(os.Stdin)
	fmt.Println("ready")
	for in.Scan() {
		dir, ok := strings.CutPrefix(in.Text(), "open ")
		if !ok {
			fmt.Fprintf(os.Stderr, "bad command %q\n", in.Text())
			return 2
		}
		db, err := Open(dir, nil)
		switch {
		case errors.Is(err, ErrLocked):
			fmt.Println("locked")
			continue
		case err != nil:
			fmt.Printf("error %v\n", strings.ReplaceAll(err.Error(), "\n", " "))
			continue
		}
		fmt.Println("won")
		if !in.Scan() || in.Text() != "release" {
			fmt.Fprintf(os.Stderr, "expected release, got %q\n", in.Text())
			return 2
		}
		if err := db.Close(); err != nil {
			fmt.Printf("error close: %v\n", err)
			continue
		}
		fmt.Println("released")
	}
	return 0
}

// holdInChild opens dir in a re-executed child process, which holds it
// until the test ends.
func holdInChild(t *testing.T, dir string) {
	t.Helper()
	cmd := testutil.Reexec(t, "lock", childDirEnv+"="+dir)
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
}

// setCatalog overwrites the keyspace catalog of the closed engine in dir.
func setCatalog(t testing.TB, dir string, catalog []byte) {
	t.Helper()
	st, err := storage.Open(filepath.Join(dir, enginedir.StoreDir), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := st.NewBatch()
	b.SetMeta(enginedir.CatalogMeta, catalog)
	if err := errors.Join(st.Apply(b), st.Close()); err != nil {
		t.Fatal(err)
	}
}

// storeFiles returns the paths of the files of dir's store whose name
// starts with prefix.
func storeFiles(t testing.TB, dir, prefix string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, enginedir.StoreDir))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, filepath.Join(dir, enginedir.StoreDir, e.Name()))
		}
	}
	if len(out) == 0 {
		t.Fatalf("no store file %s*", prefix)
	}
	return out
}

// badOpenCase is an input to Open.
type badOpenCase struct {
	name string
	// setup prepares the input and returns the path to Open.
	setup func(t *testing.T) string
	want  []error // errors.Is must hold for each
	// storeOpened: the failure is found after pebble opened the store,
	// which rewrites some of its own files; store/ must keep its logical
	// content. Otherwise it must be byte for byte as it was.
	storeOpened bool
}

// newEngineWith returns newEngineDir after f changed it.
func newEngineWith(f func(t *testing.T, dir string)) func(t *testing.T) string {
	return func(t *testing.T) string {
		d := newEngineDir(t)
		f(t, d)
		return d
	}
}

func emptyDirWith(f func(t *testing.T, dir string)) func(t *testing.T) string {
	return func(t *testing.T) string {
		d := t.TempDir()
		f(t, d)
		return d
	}
}

func bitsFile(dir string) string {
	return filepath.Join(dir, enginedir.BitsDir, "b"+enginedir.BitsExt)
}

func mustRemoveAll(t *testing.T, p string) {
	t.Helper()
	if err := os.RemoveAll(p); err != nil {
		t.Fatal(err)
	}
}

func mustMkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

// mutateFile rewrites path with f applied to its content.
func mutateFile(t *testing.T, path string, f func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, f(b))
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "bitslice", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBadOpenInputs: Open of a damaged, foreign or locked directory fails
// with the documented error and changes nothing.
func TestBadOpenInputs(t *testing.T) {
	notEngine := []error{ErrNotEngine}
	corrupt := []error{ErrCorrupt}
	corruptBits := []error{ErrCorrupt, ErrCorruptBits}
	corruptStore := []error{ErrCorrupt, ErrCorruptBlock}
	setBits := func(b []byte) func(t *testing.T, d string) {
		return func(t *testing.T, d string) { writeFile(t, bitsFile(d), b) }
	}
	cases := []badOpenCase{
		// The path itself.
		{"path is a regular file", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "f")
			writeFile(t, p, []byte("data"))
			return p
		}, notEngine, false},
		{"path is an empty regular file", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "f")
			writeFile(t, p, nil)
			return p
		}, notEngine, false},
		{"path is a symlink to a file", func(t *testing.T) string {
			d := t.TempDir()
			writeFile(t, filepath.Join(d, "f"), []byte("data"))
			mustSymlink(t, filepath.Join(d, "f"), filepath.Join(d, "l"))
			return filepath.Join(d, "l")
		}, notEngine, false},
		{"path is a device", func(t *testing.T) string { return "/dev/null" }, notEngine, false},
		{"parent is a file", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "f")
			writeFile(t, p, nil)
			return filepath.Join(p, "engine")
		}, []error{syscall.ENOTDIR}, false},
		{"path holds a NUL byte", func(t *testing.T) string {
			return filepath.Join(t.TempDir(), "a\x00b")
		}, []error{syscall.EINVAL}, false},
		// Foreign directories.
		{"non-empty foreign directory", emptyDirWith(func(t *testing.T, d string) {
			writeFile(t, filepath.Join(d, "precious.txt"), []byte("x"))
		}), notEngine, false},
		{"foreign directory with a store subdirectory", emptyDirWith(func(t *testing.T, d string) {
			mustMkdir(t, filepath.Join(d, enginedir.StoreDir))
		}), notEngine, false},
		{"foreign directory holding only an empty LOCK", emptyDirWith(func(t *testing.T, d string) {
			writeFile(t, filepath.Join(d, enginedir.LockName), nil)
		}), notEngine, false},
		{"foreign directory holding only a foreign LOCK", emptyDirWith(func(t *testing.T, d string) {
			writeFile(t, filepath.Join(d, enginedir.LockName), []byte("12345\n"))
		}), notEngine, false},
		{"LOCK is a directory", emptyDirWith(func(t *testing.T, d string) {
			mustMkdir(t, filepath.Join(d, enginedir.LockName))
		}), notEngine, false},
		{"LOCK and a foreign file", emptyDirWith(func(t *testing.T, d string) {
			writeFile(t, filepath.Join(d, enginedir.LockName), []byte("kvbuf engine lock\n"))
			writeFile(t, filepath.Join(d, "data.db"), []byte("x"))
		}), notEngine, false},
		// The manifest.
		{"foreign manifest", emptyDirWith(func(t *testing.T, d string) {
			writeFile(t, filepath.Join(d, enginedir.ManifestName), []byte("something else\n"))
		}), notEngine, false},
		{"empty manifest", emptyDirWith(func(t *testing.T, d string) {
			writeFile(t, filepath.Join(d, enginedir.ManifestName), nil)
		}), notEngine, false},
		{"manifest is a directory", emptyDirWith(func(t *testing.T, d string) {
			mustMkdir(t, filepath.Join(d, enginedir.ManifestName))
		}), notEngine, false},
		{"manifest of a future format", newEngineWith(func(t *testing.T, d string) {
			writeFile(t, filepath.Join(d, enginedir.ManifestName), []byte("kvbuf engine directory\nformat 3\n"))
		}), corrupt, false},
		{"truncated manifest", newEngineWith(func(t *testing.T, d string) {
			writeFile(t, filepath.Join(d, enginedir.ManifestName), []byte("kvbuf engine directory\n"))
		}), corrupt, false},
		{"manifest with trailing garbage", newEngineWith(func(t *testing.T, d string) {
			writeFile(t, filepath.Join(d, enginedir.ManifestName), []byte(manifestReadyText+"x\n"))
		}), corrupt, false},
		{"huge manifest", newEngineWith(func(t *testing.T, d string) {
			writeFile(t, filepath.Join(d, enginedir.ManifestName), append([]byte(manifestReadyText), make([]byte, 1<<20)...))
		}), corrupt, false},
		// Subdirectories of a ready engine.
		{"store removed", newEngineWith(func(t *testing.T, d string) {
			mustRemoveAll(t, filepath.Join(d, enginedir.StoreDir))
		}), corrupt, false},
		{"store emptied", newEngineWith(func(t *testing.T, d string) {
			mustRemoveAll(t, filepath.Join(d, enginedir.StoreDir))
			mustMkdir(t, filepath.Join(d, enginedir.StoreDir))
		}), corrupt, false},
		{"store is a file", newEngineWith(func(t *testing.T, d string) {
			mustRemoveAll(t, filepath.Join(d, enginedir.StoreDir))
			writeFile(t, filepath.Join(d, enginedir.StoreDir), []byte("x"))
		}), corrupt, false},
		{"bits removed", newEngineWith(func(t *testing.T, d string) {
			mustRemoveAll(t, filepath.Join(d, enginedir.BitsDir))
		}), corrupt, false},
		{"bits is a file", newEngineWith(func(t *testing.T, d string) {
			mustRemoveAll(t, filepath.Join(d, enginedir.BitsDir))
			writeFile(t, filepath.Join(d, enginedir.BitsDir), []byte("x"))
		}), corrupt, false},
		// The pebble store.
		{"pebble MANIFEST overwritten", newEngineWith(func(t *testing.T, d string) {
			for _, p := range storeFiles(t, d, "MANIFEST-") {
				writeFile(t, p, bytes.Repeat([]byte{0x5a}, 100))
			}
		}), corruptStore, false},
		{"pebble MANIFEST removed", newEngineWith(func(t *testing.T, d string) {
			for _, p := range storeFiles(t, d, "MANIFEST-") {
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
			}
		}), corruptStore, false},
		{"pebble OPTIONS garbage", newEngineWith(func(t *testing.T, d string) {
			for _, p := range storeFiles(t, d, "OPTIONS-") {
				writeFile(t, p, []byte("garbage"))
			}
		}), corruptStore, false},
		// The keyspace catalog.
		{"keyspace catalog garbage", newEngineWith(func(t *testing.T, d string) {
			setCatalog(t, d, []byte("\x00\xff garbage"))
		}), corrupt, true},
		{"keyspace catalog id zero", newEngineWith(func(t *testing.T, d string) {
			setCatalog(t, d, []byte("k 0\n"))
		}), corrupt, true},
		{"keyspace catalog id overflow", newEngineWith(func(t *testing.T, d string) {
			setCatalog(t, d, []byte("k 4294967296\n"))
		}), corrupt, true},
		{"keyspace catalog id 0xffffffff", newEngineWith(func(t *testing.T, d string) {
			setCatalog(t, d, []byte("k 4294967295\n"))
		}), corrupt, true},
		{"keyspace catalog duplicate name", newEngineWith(func(t *testing.T, d string) {
			setCatalog(t, d, []byte("k 1\nk 2\n"))
		}), corrupt, true},
		{"keyspace catalog duplicate id", newEngineWith(func(t *testing.T, d string) {
			setCatalog(t, d, []byte("k 1\nj 1\n"))
		}), corrupt, true},
		{"keyspace catalog bad name", newEngineWith(func(t *testing.T, d string) {
			setCatalog(t, d, []byte("../x 1\n"))
		}), corrupt, true},
		{"keyspace catalog unknown directive", newEngineWith(func(t *testing.T, d string) {
			setCatalog(t, d, []byte("k 1\n@frobnicate 2\n"))
		}), corrupt, true},
		{"keyspace catalog @next not above ids", newEngineWith(func(t *testing.T, d string) {
			setCatalog(t, d, []byte("k 5\n@next 3\n"))
		}), corrupt, true},
		{"keyspace catalog dropped id reused", newEngineWith(func(t *testing.T, d string) {
			setCatalog(t, d, []byte("k 1\n@dropped 1\n"))
		}), corrupt, true},
		// Bitslice files: they are opened with the engine.
		{"bitslice empty", newEngineWith(setBits(nil)), corruptBits, true},
		{"bitslice text file", newEngineWith(setBits([]byte("hello, world\n"))), corruptBits, true},
		{"bitslice filled with 0xAB", newEngineWith(setBits(bytes.Repeat([]byte{0xab}, 8192))), corruptBits, true},
		{"bitslice zero header area", newEngineWith(setBits(make([]byte, 8192))), corruptBits, true},
		{"bitslice fixture badmagic", newEngineWith(func(t *testing.T, d string) { writeFile(t, bitsFile(d), fixture(t, "badmagic.bits")) }), corruptBits, true},
		{"bitslice fixture badchecksum", newEngineWith(func(t *testing.T, d string) { writeFile(t, bitsFile(d), fixture(t, "badchecksum.bits")) }), corruptBits, true},
		{"bitslice fixture truncated", newEngineWith(func(t *testing.T, d string) { writeFile(t, bitsFile(d), fixture(t, "truncated.bits")) }), corruptBits, true},
		{"bitslice cut inside the header", newEngineWith(func(t *testing.T, d string) {
			mutateFile(t, bitsFile(d), func(b []byte) []byte { return b[:100] })
		}), corruptBits, true},
		{"bitslice cut inside the data", newEngineWith(func(t *testing.T, d string) {
			mutateFile(t, bitsFile(d), func(b []byte) []byte { return b[:4096+3] })
		}), corruptBits, true},
		{"bitslice both header slots flipped", newEngineWith(func(t *testing.T, d string) {
			mutateFile(t, bitsFile(d), func(b []byte) []byte {
				b[20] ^= 1
				b[2048+20] ^= 1
				return b
			})
		}), corruptBits, true},
		{"bitslice of a future version", newEngineWith(func(t *testing.T, d string) {
			mutateFile(t, bitsFile(d), func(b []byte) []byte {
				// Version 3 in both slots, checksums left stale: no valid slot.
				b[8], b[2048+8] = 3, 3
				return b
			})
		}), corruptBits, true},
		{"bitslice corrupt in an engine without a LOCK file", newEngineWith(func(t *testing.T, d string) {
			// As a copy of a crashed engine without its LOCK: the failed
			// Open must remove the LOCK it made.
			if err := os.Remove(filepath.Join(d, enginedir.LockName)); err != nil {
				t.Fatal(err)
			}
			writeFile(t, bitsFile(d), []byte("junk"))
		}), corruptBits, true},
		{"keyspace catalog garbage in an engine without a LOCK file", newEngineWith(func(t *testing.T, d string) {
			setCatalog(t, d, []byte("k 1\nk 1\n"))
			if err := os.Remove(filepath.Join(d, enginedir.LockName)); err != nil {
				t.Fatal(err)
			}
		}), corrupt, true},
		{"bitslice hard link of another", newEngineWith(func(t *testing.T, d string) {
			if err := os.Link(bitsFile(d), filepath.Join(d, enginedir.BitsDir, "c"+enginedir.BitsExt)); err != nil {
				t.Fatal(err)
			}
		}), []error{ErrLocked, ErrLocked}, true},
		// Locks.
		{"locked by another process", func(t *testing.T) string {
			d := newEngineDir(t)
			holdInChild(t, d)
			return d
		}, []error{ErrLocked}, false},
		{"locked in this process", func(t *testing.T) string {
			d := newEngineDir(t)
			db := openT(t, d, nil)
			t.Cleanup(func() { closeT(t, db) })
			// pebble flushes what it replayed from its log in the
			// background after Open: let it finish, so that the files
			// compared are the refused Open's business only.
			if err := db.FlushMemtables(ctx); err != nil {
				t.Fatal(err)
			}
			if err := waitQuiet(d); err != nil {
				t.Fatal(err)
			}
			return d
		}, []error{ErrLocked}, false},
		{"bad options on a good engine", func(t *testing.T) string {
			return newEngineDir(t) // opened with bad options below
		}, []error{ErrBadOptions}, false},
	}
	t.Logf("%d inputs", len(cases))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := c.setup(t)
			var opts *Options
			if strings.HasPrefix(c.name, "bad options") {
				opts = &Options{PipelineDepth: -1}
			}
			dumpBefore := storeDump(t, path)
			outside := hashTree(t, path, enginedir.StoreDir)
			store := hashTree(t, filepath.Join(path, enginedir.StoreDir))
			db, err := Open(path, opts)
			if err == nil {
				closeT(t, db)
				t.Fatalf("Open succeeded, want %v", c.want)
			}
			for _, w := range c.want {
				if !errors.Is(err, w) {
					t.Errorf("Open = %v; want errors.Is %v", err, w)
				}
			}
			if hashTree(t, path, enginedir.StoreDir) != outside {
				t.Errorf("the failed Open changed files outside the store: %v", listTree(path))
			}
			if !c.storeOpened && hashTree(t, filepath.Join(path, enginedir.StoreDir)) != store {
				t.Errorf("the failed Open changed the store's files: %v", listTree(filepath.Join(path, enginedir.StoreDir)))
			}
			if got := storeDump(t, path); got != dumpBefore {
				t.Errorf("the failed Open changed the store's content:\nbefore %s\nafter  %s", dumpBefore, got)
			}
		})
	}
}

// TestHarmlessOpenInputs: inputs that are odd but not damage open normally,
// with the documented outcome.
func TestHarmlessOpenInputs(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T) string
		check func(t *testing.T, db *DB, dir string)
	}{
		{"torn bitslice header falls back to the other slot", newEngineWith(func(t *testing.T, d string) {
			// A crash tore the header write of a flush whose store batch
			// never came (so the catalog does not know its generation).
			f, err := bitslice.Open(bitsFile(d))
			if err != nil {
				t.Fatal(err)
			}
			f.SetGen(f.Gen() + 1)
			f.SetWatermark(f.Watermark() + 1)
			slot := f.Info().Slot
			if err := errors.Join(f.Sync(), f.Close()); err != nil {
				t.Fatal(err)
			}
			mutateFile(t, bitsFile(d), func(b []byte) []byte {
				copy(b[(1-slot)*2048+32:], bytes.Repeat([]byte{0xa5}, 32))
				return b
			})
		}), func(t *testing.T, db *DB, dir string) {
			if _, err := db.Bits("b"); err != nil {
				t.Fatalf("Bits on a file with one good slot: %v", err)
			}
		}},
		{"files in bits/ that are not bitslices are ignored", newEngineWith(func(t *testing.T, d string) {
			writeFile(t, filepath.Join(d, enginedir.BitsDir, "notes.txt"), []byte("x"))
			writeFile(t, filepath.Join(d, enginedir.BitsDir, "bad name"+enginedir.BitsExt), []byte("x"))
			mustMkdir(t, filepath.Join(d, enginedir.BitsDir, "sub"+enginedir.BitsExt))
			mustSymlink(t, "/dev/zero", filepath.Join(d, enginedir.BitsDir, "zero"+enginedir.BitsExt))
		}), func(t *testing.T, db *DB, dir string) {
			if got := fmt.Sprint(db.Bitslices()); got != "[b]" {
				t.Errorf("Bitslices = %s, want [b]", got)
			}
			// Asking for them by name is an error, never a crash or a write.
			before := hashTree(t, dir, enginedir.StoreDir)
			for _, name := range []string{"sub", "zero"} {
				if _, err := db.Bits(name); !errors.Is(err, ErrCorrupt) || !errors.Is(err, ErrCorruptBits) {
					t.Errorf("Bits(%q) = %v, want ErrCorrupt", name, err)
				}
			}
			if hashTree(t, dir, enginedir.StoreDir) != before {
				t.Error("a refused Bits changed the directory")
			}
		}},
		{"interrupted initialisation: only a kvbuf LOCK", emptyDirWith(func(t *testing.T, d string) {
			writeFile(t, filepath.Join(d, enginedir.LockName), []byte("kvbuf engine lock\n"))
		}), func(t *testing.T, db *DB, dir string) {}},
		{"interrupted initialisation: a temporary manifest", emptyDirWith(func(t *testing.T, d string) {
			writeFile(t, filepath.Join(d, enginedir.ManifestName+".tmp.123"), []byte("kvbuf eng"))
		}), func(t *testing.T, db *DB, dir string) {
			if _, err := os.Stat(filepath.Join(dir, enginedir.ManifestName+".tmp.123")); err == nil {
				t.Error("leftover temporary manifest not removed")
			}
		}},
		{"interrupted initialisation: a store whose creation was cut short", emptyDirWith(func(t *testing.T, d string) {
			// Initialising (the manifest says so, bits/ exists) with a
			// store whose marker names a MANIFEST that never reached the
			// disk: what a power cut in pebble's creation can leave
			// (TestCrashPowerCut found it). Nothing was acknowledged.
			writeFile(t, filepath.Join(d, enginedir.ManifestName), []byte(manifestInitText))
			mustMkdir(t, filepath.Join(d, enginedir.BitsDir))
			st, err := storage.Open(filepath.Join(d, enginedir.StoreDir), nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			for _, p := range storeFiles(t, d, "MANIFEST-") {
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
			}
		}), func(t *testing.T, db *DB, dir string) {
			mustPut(t, mustKV(t, db, "k"), "a", "1", 1)
			mustFlush(t, db)
		}},
		{"the newest WAL is garbage: the watermark drops with the data", newEngineWith(func(t *testing.T, d string) {
			for _, p := range storeFiles(t, d, "0") {
				if strings.HasSuffix(p, ".log") {
					mutateFile(t, p, func(b []byte) []byte { return bytes.Repeat([]byte{0x5a}, len(b)) })
				}
			}
		}), func(t *testing.T, db *DB, dir string) {
			// The catalog went with the WAL too: no keyspace, watermark 0,
			// so the host replays everything.
			if wm := db.Watermark(); wm != 0 {
				t.Errorf("watermark %d with the WAL gone", wm)
			}
			wantGet(t, mustKV(t, db, "k"), "a", "")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := c.setup(t)
			db := openT(t, dir, nil)
			c.check(t, db, dir)
			closeT(t, db)
		})
	}
}

// TestOpenRaceLosersGetErrLocked: Opens racing on a fresh directory (in
// this process and in another one): exactly one wins, every loser gets
// ErrLocked (never ErrNotEngine or ErrCorrupt from a half-made directory),
// and the directory opens normally afterwards.
func TestOpenRaceLosersGetErrLocked(t *testing.T) {
	rounds, G := 30, 6
	if testing.Short() {
		rounds = 10
	}
	cmd := testutil.Reexec(t, "openrace")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(outPipe)
	readLine := func() string {
		line, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("race child: %v\n%s", err, stderr.String())
		}
		return strings.TrimSuffix(line, "\n")
	}
	defer func() {
		in.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("race child: %v\n%s", err, stderr.String())
		}
	}()
	if l := readLine(); l != "ready" {
		t.Fatalf("race child said %q", l)
	}
	var childWins, goWins int
	for r := range rounds {
		dir := filepath.Join(t.TempDir(), "engine")
		if r%2 == 1 {
			mustMkdir(t, dir) // fresh: empty, or (even rounds) absent
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		var winners atomic.Int32
		dbs := make([]*DB, G)
		errs := make([]error, G)
		for g := range G {
			wg.Go(func() {
				<-start
				dbs[g], errs[g] = Open(dir, nil)
				if errs[g] == nil {
					winners.Add(1)
				}
			})
		}
		withChild := r%3 != 2
		if withChild {
			if _, err := fmt.Fprintf(in, "open %s\n", dir); err != nil {
				t.Fatal(err)
			}
		}
		close(start)
		wg.Wait()
		child := ""
		if withChild {
			child = readLine()
		}
		won := int(winners.Load())
		if child == "won" {
			won++
			childWins++
		}
		if won != 1 {
			t.Errorf("round %d: %d winners (child %q)", r, won, child)
		}
		for g, err := range errs {
			if err != nil && !errors.Is(err, ErrLocked) {
				t.Errorf("round %d: loser %d got %v, want ErrLocked", r, g, err)
			}
		}
		if withChild && child != "won" && child != "locked" {
			t.Errorf("round %d: child loser got %q, want locked", r, child)
		}
		for _, db := range dbs {
			if db != nil {
				goWins++
				mustPut(t, mustKV(t, db, "k"), "winner", "go", 0)
				closeT(t, db)
			}
		}
		if child == "won" {
			fmt.Fprintln(in, "release")
			if l := readLine(); l != "released" {
				t.Fatalf("round %d: child said %q", r, l)
			}
		}
		db := openT(t, dir, nil)
		if _, err := os.Stat(filepath.Join(dir, enginedir.StoreDir)); err != nil {
			t.Errorf("round %d: %v", r, err)
		}
		closeT(t, db)
		if t.Failed() {
			t.FailNow()
		}
	}
	t.Logf("%d rounds: %d won in this process, %d in the child", rounds, goWins, childWins)
}

// apiCase is a bad argument to an open engine.
type apiCase struct {
	name string
	want error
	run  func() error
}

// TestBadAPIInputs: bad arguments to an open engine are errors that apply
// nothing: after each one the engine's content (read through the API), its
// pending memory and the files outside the store are as they were, and
// after all of them the store's content (after a flush, and a reopen) too.
func TestBadAPIInputs(t *testing.T) {
	dir := newEngineDir(t) // k: a=1; b: bit 3; watermark 2
	db := openT(t, dir, &Options{MaxKeySize: 8, MaxValueSize: 16, MaxBits: 1 << 20, FlushInterval: -1})
	k, b := mustKV(t, db, "k"), mustBits(t, db, "b")
	gone := mustKV(t, db, "gone")
	mustPut(t, gone, "x", "1", 3)
	if err := db.DropKV(ctx, "gone", 4); err != nil {
		t.Fatal(err)
	}
	if err := db.EndOp(ctx, 4); err != nil {
		t.Fatal(err)
	}
	mustFlush(t, db)
	if wm := db.Watermark(); wm != 4 {
		t.Fatalf("watermark %d, want 4", wm)
	}
	other := openT(t, t.TempDir(), nil)
	defer closeT(t, other)
	ok, ob := mustKV(t, other, "k"), mustBits(t, other, "b")
	snap, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	sk, err := snap.KV("k")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := snap.Bits("b")
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	long := strings.Repeat("a", 129)
	key9, val17 := make([]byte, 9), make([]byte, 17)
	getErr := func(_ []byte, err error) error { return err }
	iterErr := func(it *Iter, err error) error {
		if it != nil {
			it.Close()
		}
		return err
	}
	batchErr := func(op uint64, fill func(bt *Batch)) func() error {
		return func() error {
			bt := db.NewBatch()
			fill(bt)
			return db.Apply(ctx, bt, op)
		}
	}
	cases := []apiCase{
		// Names.
		{"KV name empty", ErrBadName, func() error { _, err := db.KV(""); return err }},
		{"KV name with slash", ErrBadName, func() error { _, err := db.KV("a/b"); return err }},
		{"KV name dot", ErrBadName, func() error { _, err := db.KV("."); return err }},
		{"KV name dot-dot", ErrBadName, func() error { _, err := db.KV(".."); return err }},
		{"KV name NUL", ErrBadName, func() error { _, err := db.KV("a\x00b"); return err }},
		{"KV name space", ErrBadName, func() error { _, err := db.KV("a b"); return err }},
		{"KV name 129 bytes", ErrBadName, func() error { _, err := db.KV(long); return err }},
		{"KV name non-ASCII", ErrBadName, func() error { _, err := db.KV("ü"); return err }},
		{"Bits name empty", ErrBadName, func() error { _, err := db.Bits(""); return err }},
		{"Bits name with slash", ErrBadName, func() error { _, err := db.Bits("../k"); return err }},
		{"Bits name non-ASCII", ErrBadName, func() error { _, err := db.Bits("bé"); return err }},
		{"Bits name 129 bytes", ErrBadName, func() error { _, err := db.Bits(long); return err }},
		{"DropKV bad name", ErrBadName, func() error { return db.DropKV(ctx, "a/b", 5) }},
		{"Snapshot.KV bad name", ErrBadName, func() error { _, err := snap.KV("x/y"); return err }},
		{"Snapshot.Bits bad name", ErrBadName, func() error { _, err := snap.Bits(""); return err }},
		// Keys and values.
		{"Put empty key", ErrEmptyKey, func() error { return k.Put(ctx, nil, []byte("v"), 5) }},
		{"Delete empty key", ErrEmptyKey, func() error { return k.Delete(ctx, []byte{}, 5) }},
		{"Get empty key", ErrEmptyKey, func() error { return getErr(k.Get(nil)) }},
		{"GetAppend empty key", ErrEmptyKey, func() error { return getErr(k.GetAppend(nil, []byte{})) }},
		{"snapshot Get empty key", ErrEmptyKey, func() error { return getErr(sk.Get(nil)) }},
		{"Put oversize key", ErrKeyTooLarge, func() error { return k.Put(ctx, key9, nil, 5) }},
		{"Put huge key", ErrKeyTooLarge, func() error { return k.Put(ctx, make([]byte, 1<<20), nil, 5) }},
		{"Delete oversize key", ErrKeyTooLarge, func() error { return k.Delete(ctx, key9, 5) }},
		{"Get oversize key", ErrKeyTooLarge, func() error { return getErr(k.Get(key9)) }},
		{"snapshot Get oversize key", ErrKeyTooLarge, func() error { return getErr(sk.Get(key9)) }},
		{"Put oversize value", ErrValueTooLarge, func() error { return k.Put(ctx, []byte("a"), val17, 5) }},
		{"GetMany with an empty key", ErrEmptyKey, func() error {
			_, err := k.GetMany([][]byte{[]byte("a"), nil}, make([][]byte, 2), nil)
			return err
		}},
		{"GetMany with too few value slots", ErrBadRange, func() error {
			_, err := k.GetMany([][]byte{[]byte("a"), []byte("b")}, make([][]byte, 1), nil)
			return err
		}},
		{"snapshot GetMany with too few value slots", ErrBadRange, func() error {
			_, err := sk.GetMany([][]byte{[]byte("a"), []byte("b")}, nil, nil)
			return err
		}},
		// Ranges.
		{"DeleteRange lower > upper", ErrBadRange, func() error { return k.DeleteRange(ctx, []byte("b"), []byte("a"), 5) }},
		{"NewIter lower > upper", ErrBadRange, func() error {
			return iterErr(k.NewIter(&IterOptions{LowerBound: []byte("b"), UpperBound: []byte("a")}))
		}},
		{"NewIter lower 0xff > upper empty", ErrBadRange, func() error {
			return iterErr(k.NewIter(&IterOptions{LowerBound: []byte{0xff}, UpperBound: []byte{}}))
		}},
		{"snapshot NewIter lower > upper", ErrBadRange, func() error {
			return iterErr(sk.NewIter(&IterOptions{LowerBound: []byte("z"), UpperBound: []byte("a")}))
		}},
		// Bits.
		{"Set at MaxBits", ErrOutOfRange, func() error { return b.Set(ctx, 1<<20, true, 5) }},
		{"Set bit 2^40", ErrOutOfRange, func() error { return b.Set(ctx, 1<<40, true, 5) }},
		{"Set bit MaxUint64", ErrOutOfRange, func() error { return b.Set(ctx, math.MaxUint64, false, 5) }},
		{"SetRange lo > hi", ErrBadRange, func() error { return b.SetRange(ctx, 10, 5, true, 5) }},
		{"SetRange hi past MaxBits", ErrOutOfRange, func() error { return b.SetRange(ctx, 0, 1<<20+1, true, 5) }},
		{"SetRange to MaxUint64", ErrOutOfRange, func() error { return b.SetRange(ctx, 1, math.MaxUint64, true, 5) }},
		{"Bits.GetMany with too few slots", ErrBadRange, func() error { return b.GetMany([]uint64{1, 2}, make([]bool, 1)) }},
		{"snapshot Bits.GetMany with too few slots", ErrBadRange, func() error { return sb.GetMany([]uint64{1, 2}, nil) }},
		// Batches: nothing of a bad batch is applied.
		{"batch with an empty key", ErrEmptyKey, batchErr(5, func(bt *Batch) {
			bt.Put(k, []byte("s"), []byte("1"))
			bt.Put(k, nil, []byte("1"))
		})},
		{"batch with an oversize value", ErrValueTooLarge, batchErr(5, func(bt *Batch) {
			bt.Set(b, 9, true)
			bt.Put(k, []byte("s"), val17)
		})},
		{"batch Delete oversize key", ErrKeyTooLarge, batchErr(5, func(bt *Batch) { bt.Delete(k, key9) })},
		{"batch DeleteRange lower > upper", ErrBadRange, batchErr(5, func(bt *Batch) { bt.DeleteRange(k, []byte("b"), []byte("a")) })},
		{"batch SetRange lo > hi", ErrBadRange, batchErr(5, func(bt *Batch) { bt.SetRange(b, 3, 2, true) })},
		{"batch Set out of range", ErrOutOfRange, batchErr(5, func(bt *Batch) {
			bt.Put(k, []byte("s"), []byte("1"))
			bt.Set(b, 1<<20, true)
		})},
		{"batch with another engine's keyspace", ErrForeign, batchErr(5, func(bt *Batch) { bt.Put(ok, []byte("s"), []byte("1")) })},
		{"batch with another engine's bitslice", ErrForeign, batchErr(5, func(bt *Batch) { bt.Set(ob, 1, true) })},
		{"batch with a nil keyspace", ErrForeign, batchErr(5, func(bt *Batch) { bt.Delete(nil, []byte("a")) })},
		{"batch with a nil bitslice", ErrForeign, batchErr(5, func(bt *Batch) { bt.SetRange(nil, 1, 2, true) })},
		{"Apply of another engine's batch", ErrForeign, func() error {
			bt := other.NewBatch()
			bt.Put(ok, []byte("s"), []byte("1"))
			return db.Apply(ctx, bt, 5)
		}},
		{"Apply of a nil batch", ErrForeign, func() error { return db.Apply(ctx, nil, 5) }},
		{"batch to a dropped keyspace", ErrDropped, batchErr(5, func(bt *Batch) {
			bt.Put(k, []byte("s"), []byte("1"))
			bt.Put(gone, []byte("s"), []byte("1"))
		})},
		{"Update with a nil fn", ErrNilArgument, func() error { return db.Update(ctx, 5, nil) }},
		{"Update whose fn fails", io.ErrUnexpectedEOF, func() error {
			return db.Update(ctx, 5, func(bt *Batch) error {
				bt.Put(k, []byte("s"), []byte("1"))
				return io.ErrUnexpectedEOF
			})
		}},
		// A dropped keyspace's handle.
		{"Put to a dropped keyspace", ErrDropped, func() error { return gone.Put(ctx, []byte("x"), []byte("2"), 5) }},
		{"Delete in a dropped keyspace", ErrDropped, func() error { return gone.Delete(ctx, []byte("x"), 5) }},
		{"DeleteRange in a dropped keyspace", ErrDropped, func() error { return gone.DeleteRange(ctx, nil, nil, 5) }},
		{"Get in a dropped keyspace", ErrDropped, func() error { return getErr(gone.Get([]byte("x"))) }},
		{"GetMany in a dropped keyspace", ErrDropped, func() error {
			_, err := gone.GetMany([][]byte{[]byte("x")}, make([][]byte, 1), nil)
			return err
		}},
		{"NewIter of a dropped keyspace", ErrDropped, func() error { return iterErr(gone.NewIter(nil)) }},
		// Contexts.
		{"Flush with a cancelled context", context.Canceled, func() error { return db.Flush(cancelled) }},
		{"FlushMemtables with a cancelled context", context.Canceled, func() error { return db.FlushMemtables(cancelled) }},
		{"EndOp with a cancelled context", context.Canceled, func() error { return db.EndOp(cancelled, 9) }},
		{"Wait with a cancelled context", context.Canceled, func() error { return db.Wait(cancelled) }},
		// Reads that are not bad input but must not be mistaken for it.
		{"Bits.Get past the end", nil, func() error { return wantFalse(b.Get(1 << 19)) }},
		{"Bits.Get at 2^63", nil, func() error { return wantFalse(b.Get(1 << 63)) }},
		{"Bits.Get at MaxUint64", nil, func() error { return wantFalse(b.Get(math.MaxUint64)) }},
		{"snapshot Bits.Get at MaxUint64", nil, func() error { return wantFalse(sb.Get(math.MaxUint64)) }},
		{"snapshot of a keyspace that did not exist", ErrNotFound, func() error {
			r, err := snap.KV("never")
			if err != nil {
				return err
			}
			return getErr(r.Get([]byte("a")))
		}},
		{"snapshot of a bitslice that did not exist", nil, func() error {
			r, err := snap.Bits("never")
			if err != nil {
				return err
			}
			return wantFalse(r.Get(5))
		}},
	}
	// Harmless inputs: empty ranges and no-ops.
	cases = append(cases,
		apiCase{"DeleteRange lower == upper", nil, func() error { return k.DeleteRange(ctx, []byte("a"), []byte("a"), 5) }},
		apiCase{"SetRange lo == hi", nil, func() error { return b.SetRange(ctx, 3, 3, false, 6) }},
		apiCase{"DropKV of a keyspace that does not exist", nil, func() error { return db.DropKV(ctx, "never", 7) }},
		apiCase{"EndOp of a claimed op", nil, func() error { return db.EndOp(ctx, 2) }},
		apiCase{"empty batch", nil, func() error { return db.Apply(ctx, db.NewBatch(), 8) }},
		apiCase{"GetMany of no keys", nil, func() error { _, err := k.GetMany(nil, nil, nil); return err }},
		apiCase{"Bits.GetMany of no indexes", nil, func() error { return b.GetMany(nil, nil) }},
	)
	t.Logf("%d inputs", len(cases))
	stateBefore := engineState(t, db)
	outside := hashTree(t, dir, enginedir.StoreDir)
	for _, c := range cases {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s: panic %v", c.name, p)
				}
			}()
			err := c.run()
			switch {
			case c.want == nil && err != nil:
				t.Errorf("%s: %v, want nil", c.name, err)
			case c.want != nil && !errors.Is(err, c.want):
				t.Errorf("%s: %v, want %v", c.name, err, c.want)
			}
			// Nothing was applied: the engine reads as before, nothing is
			// pending, and no file outside the store changed.
			if got := engineState(t, db); got != stateBefore {
				t.Errorf("%s changed the engine:\nbefore %s\nafter  %s", c.name, stateBefore, got)
			}
			if p := db.Metrics().PendingBytes; p != 0 {
				t.Errorf("%s left %d pending bytes", c.name, p)
			}
			if hashTree(t, dir, enginedir.StoreDir) != outside {
				t.Errorf("%s changed files outside the store: %v", c.name, listTree(dir))
			}
		}()
	}
	if err := db.EndOp(ctx, 8); err != nil {
		t.Fatal(err)
	}
	mustFlush(t, db)
	stateAfter := engineState(t, db)
	// The harmless ops advanced the watermark (ops 5-8), and nothing else.
	if want := strings.Replace(stateBefore, "wm=4", "wm=8", 1); stateAfter != want {
		t.Errorf("rejected calls changed the engine:\nbefore %s\nafter  %s", want, stateAfter)
	}
	if _, err := snap.KV("gone"); err != nil {
		t.Error(err)
	}
	snap.Close()
	closeT(t, db)
	if hashTree(t, dir, enginedir.StoreDir) != outside {
		t.Errorf("rejected calls changed the files outside the store: %v", listTree(dir))
	}
	if _, err := os.Stat(filepath.Join(dir, enginedir.BitsDir, "k"+enginedir.BitsExt)); err == nil {
		t.Errorf(`Bits("../k") created a file`)
	}
	db = openT(t, dir, nil)
	defer closeT(t, db)
	if got := engineState(t, db); got != stateAfter {
		t.Errorf("after reopen:\n got %s\nwant %s", got, stateAfter)
	}
}

func wantFalse(v bool, err error) error {
	if err != nil {
		return err
	}
	if v {
		return errors.New("read true, want false")
	}
	return nil
}

// TestBadIteratorUse: an iterator used out of order is an error or a
// documented nil, never a panic or pebble's fatal bound check.
func TestBadIteratorUse(t *testing.T) {
	db := openT(t, t.TempDir(), &Options{FlushInterval: -1})
	defer closeT(t, db)
	k := mustKV(t, db, "k")
	mustPut(t, k, "a", "1", 1)
	mustPut(t, k, "c", "3", 2)
	mustFlush(t, db)
	mustPut(t, k, "b", "2", 3)
	it, err := k.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	if it.Valid() || it.Key() != nil || it.Value() != nil {
		t.Fatalf("unpositioned iterator: Valid %v Key %q Value %q", it.Valid(), it.Key(), it.Value())
	}
	if it.Next() || it.Prev() {
		t.Fatal("Next/Prev on an unpositioned iterator moved")
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if n != 3 {
		t.Fatalf("%d keys, want 3", n)
	}
	if it.Valid() || it.Key() != nil || it.Value() != nil {
		t.Fatalf("iterator after the last Next: Valid %v Key %q Value %q", it.Valid(), it.Key(), it.Value())
	}
	if it.Next() {
		t.Fatal("Next past the end moved")
	}
	if !it.SeekGE([]byte("b")) || string(it.Key()) != "b" {
		t.Fatalf("SeekGE after the end: %q", it.Key())
	}
	if it.SeekGE([]byte("d")) || it.Key() != nil {
		t.Fatal("SeekGE past the last key")
	}
	if it.SeekLT([]byte("a")) || it.Key() != nil {
		t.Fatal("SeekLT before the first key")
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	for range 2 { // Close is idempotent
		if err := it.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	// Empty and disjoint bounds give an empty iterator, not an error.
	for _, o := range []*IterOptions{
		{LowerBound: []byte("a"), UpperBound: []byte("a")},
		{LowerBound: []byte{}, UpperBound: []byte{}},
		{Prefix: []byte("zz")},
		{Prefix: []byte("a"), LowerBound: []byte("b")},
		{Prefix: []byte("c"), UpperBound: []byte("b")},
		{Prefix: []byte{0xff, 0xff}},
	} {
		if got := scan(t, k, o); len(got) != 0 {
			t.Errorf("scan of %+v = %v, want nothing", o, got)
		}
	}
}

// TestBadOptions: out-of-range options are ErrBadOptions from Validate and
// from Open (which then creates nothing); negative values documented as
// "disables" are accepted.
func TestBadOptions(t *testing.T) {
	bad := []*Options{
		{PipelineDepth: -1},
		{PipelineDepth: 65},
		{CacheSize: -1},
		{MaxKeySize: -1},
		{MaxKeySize: 64<<10 + 1},
		{MaxValueSize: -1},
		{MaxValueSize: 1<<30 + 1},
		{MaxBits: 1<<40 + 1},
		{MaxBits: math.MaxUint64},
		{FlushCPUPercent: -1},
		{FlushCPUPercent: 101},
	}
	for _, o := range bad {
		if err := o.Validate(); !errors.Is(err, ErrBadOptions) {
			t.Errorf("Validate(%+v) = %v, want ErrBadOptions", *o, err)
		}
		dir := filepath.Join(t.TempDir(), "engine")
		if _, err := Open(dir, o); !errors.Is(err, ErrBadOptions) {
			t.Errorf("Open(%+v) = %v, want ErrBadOptions", *o, err)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("Open(%+v) with bad options created the directory", *o)
		}
	}
	t.Logf("%d inputs", len(bad))
	// Negative values that mean "disabled", and the largest allowed values.
	good := &Options{FlushInterval: -5, MaxPendingBytes: math.MinInt64, GroupWait: -1, PoolBytes: -1,
		PipelineDepth: 64, MaxKeySize: 64 << 10, MaxBits: 1 << 40, IngestThreshold: -1, ReadTierBytes: -1,
		FlushQuantum: -1, FlushCPUPercent: 100}
	if err := good.Validate(); err != nil {
		t.Fatalf("Validate(%+v): %v", *good, err)
	}
	db := openT(t, t.TempDir(), good)
	defer closeT(t, db)
	k := mustKV(t, db, "k")
	if err := k.Put(ctx, make([]byte, 64<<10), make([]byte, buffer1MiB), 1); err != nil {
		t.Fatalf("key and value at their limits: %v", err)
	}
	if err := k.Put(ctx, make([]byte, 64<<10+1), nil, 2); !errors.Is(err, ErrKeyTooLarge) {
		t.Fatalf("key over the limit: %v", err)
	}
	if err := k.Put(ctx, []byte("v"), make([]byte, buffer1MiB+1), 2); !errors.Is(err, ErrValueTooLarge) {
		t.Fatalf("value over the default limit: %v", err)
	}
	mustSet(t, mustBits(t, db, "b"), 1<<20, true, 2)
	if err := mustBits(t, db, "b").Set(ctx, 1<<40, true, 3); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("Set(2^40): %v", err)
	}
}

// buffer1MiB is the default MaxValueSize.
const buffer1MiB = 1 << 20
