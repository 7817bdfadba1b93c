package storage

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

const helperEnv = "KVBUF_STORAGE_HOLD_LOCK_DIR"

// holdLock runs in a child process: it opens the store in dir, says so on
// stdout and keeps it open until stdin closes.
func holdLock(dir string) int {
	s, err := Open(dir, nil)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("locked")
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := s.Close(); err != nil {
		return 1
	}
	return 0
}

func TestLockedSameProcess(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		s2, err := Open(dir, &Options{ReadOnly: ro})
		if !errors.Is(err, kverr.ErrLocked) {
			if s2 != nil {
				s2.Close()
			}
			t.Fatalf("second Open(ReadOnly=%v) = %v, want ErrLocked", ro, err)
		}
		if !strings.Contains(err.Error(), dir) {
			t.Fatalf("error does not name the directory: %v", err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The lock is released by Close.
	s, err = Open(dir, nil)
	if err != nil {
		t.Fatalf("reopen after Close: %v", err)
	}
	s.Close()
}

func TestLockedMemFS(t *testing.T) {
	fs := vfs.NewMem()
	s, err := Open("db", &Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := Open("db", &Options{FS: fs}); !errors.Is(err, kverr.ErrLocked) {
		t.Fatalf("second Open = %v, want ErrLocked", err)
	}
}

func TestLockedByOtherProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "locked\n" {
		stdin.Close()
		_ = cmd.Wait()
		t.Fatalf("child: %q, %v", line, err)
	}
	s, err := Open(dir, nil)
	if !errors.Is(err, kverr.ErrLocked) {
		if s != nil {
			s.Close()
		}
		t.Errorf("Open while another process holds it = %v, want ErrLocked", err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	s, err = Open(dir, nil)
	if err != nil {
		t.Fatalf("Open after child exit: %v", err)
	}
	s.Close()
}

func TestOpenFileAsDir(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(path, []byte("not a store"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, opts := range []*Options{nil, {ReadOnly: true}, {ErrorIfNotExists: true}} {
		s, err := Open(path, opts)
		if err == nil {
			s.Close()
			t.Fatalf("Open(file, %+v) succeeded", opts)
		}
		if errors.Is(err, kverr.ErrLocked) || errors.Is(err, kverr.ErrCorruptBlock) {
			t.Fatalf("Open(file) = %v: misclassified", err)
		}
		if !strings.Contains(err.Error(), path) {
			t.Fatalf("error does not name the path: %v", err)
		}
	}
	s, err := Open(filepath.Join(path, "sub"), nil)
	if err == nil {
		s.Close()
		t.Fatal("Open(file/sub) succeeded")
	}
	if b, _ := os.ReadFile(path); string(b) != "not a store" {
		t.Fatalf("file modified: %q", b)
	}
}

func TestOpenModes(t *testing.T) {
	mem := vfs.NewMem()
	if _, err := Open("missing", &Options{FS: mem, ReadOnly: true}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadOnly Open of missing dir = %v, want fs.ErrNotExist", err)
	}
	if _, err := mem.Stat("missing"); err == nil {
		t.Fatal("read-only Open created the directory")
	}
	if _, err := Open("missing", &Options{FS: mem, ErrorIfNotExists: true}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ErrorIfNotExists Open of missing dir = %v, want fs.ErrNotExist", err)
	}
	if err := mem.MkdirAll("empty", 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Open("empty", &Options{FS: mem, ErrorIfNotExists: true}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ErrorIfNotExists Open of empty dir = %v, want fs.ErrNotExist", err)
	}
	if _, err := Open("empty", &Options{FS: mem, ReadOnly: true}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadOnly Open of empty dir = %v, want fs.ErrNotExist", err)
	}

	s, err := Open("db", &Options{FS: mem, ErrorIfExists: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open("db", &Options{FS: mem, ErrorIfExists: true}); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("ErrorIfExists Open of existing store = %v, want fs.ErrExist", err)
	}
	s, err = Open("db", &Options{FS: mem, ErrorIfNotExists: true})
	if err != nil {
		t.Fatalf("ErrorIfNotExists Open of existing store: %v", err)
	}
	s.Close()
}

// snapshotDir returns name → contents of every file in dir except LOCK.
func snapshotDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		if e.Name() == "LOCK" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

func TestReadOnly(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := s.NewBatch()
	b.Put(ks1, []byte("flushed"), []byte("1"))
	b.SetMeta("catalog", []byte("c"))
	b.SetWatermark(5)
	mustApply(t, s, b)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	// Left in the WAL only: a read-only open must replay it without writing.
	b.Put(ks1, []byte("wal-only"), []byte("2"))
	b.SetWatermark(6)
	mustApply(t, s, b)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before := snapshotDir(t, dir)

	ro, err := Open(dir, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	wantGet(t, ro, "flushed", "1")
	wantGet(t, ro, "wal-only", "2")
	wantWatermark(t, ro, 6)
	if v, err := ro.GetMeta("catalog"); err != nil || string(v) != "c" {
		t.Fatalf("GetMeta = %q, %v", v, err)
	}
	if got := scan(t, ro, nil, nil); !slices.Equal(got, []string{"flushed=1", "wal-only=2"}) {
		t.Fatalf("scan = %q", got)
	}
	if _, err := ro.Metrics(); err != nil {
		t.Fatal(err)
	}
	b = ro.NewBatch()
	b.Put(ks1, []byte("x"), []byte("y"))
	if err := ro.Apply(b); !errors.Is(err, kverr.ErrReadOnly) {
		t.Fatalf("Apply on read-only = %v", err)
	}
	if err := ro.Flush(); !errors.Is(err, kverr.ErrReadOnly) {
		t.Fatalf("Flush on read-only = %v", err)
	}
	b.Put(ks1, []byte("x"), []byte("y"))
	if _, err := ro.Commit(b); !errors.Is(err, kverr.ErrReadOnly) {
		t.Fatalf("Commit on read-only = %v", err)
	}
	sn, err := ro.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	wantGet(t, sn, "wal-only", "2")
	if got := scanReverse(t, sn, ks1, nil, nil); !slices.Equal(got, []string{"flushed=1", "wal-only=2"}) {
		t.Fatalf("snapshot reverse scan = %q", got)
	}
	// Left open: Close closes it.
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	after := snapshotDir(t, dir)
	if !maps.Equal(before, after) {
		t.Fatalf("read-only open modified the directory:\nbefore %v\nafter  %v",
			slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)))
	}
}

// makeStore creates a real-directory store with flushed data and one value
// in the WAL, and returns its directory.
func makeStore(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := s.NewBatch()
	for i := range 2000 {
		b.Put(ks1, fmt.Appendf(nil, "key%05d", i), []byte(strings.Repeat("v", 100)))
	}
	b.SetWatermark(1)
	mustApply(t, s, b)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func filesWithPrefix(t *testing.T, dir, prefix, suffix string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) && strings.HasSuffix(e.Name(), suffix) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	if len(out) == 0 {
		t.Fatalf("no %s*%s file in %s", prefix, suffix, dir)
	}
	return out
}

// corrupt overwrites n bytes at off (negative: from the end) with junk.
func corrupt(t *testing.T, path string, off int64, n int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if off < 0 {
		off += fi.Size()
	}
	junk := make([]byte, n)
	for i := range junk {
		junk[i] = byte(0xa5 ^ i)
	}
	if _, err := f.WriteAt(junk, off); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptOpen damages the files of a store in ways pebble detects at
// Open; each must give kverr.ErrCorruptBlock and leave no lock behind.
func TestCorruptOpen(t *testing.T) {
	each := func(t *testing.T, dir, prefix, suffix string, f func(path string)) {
		for _, p := range filesWithPrefix(t, dir, prefix, suffix) {
			f(p)
		}
	}
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string)
	}{
		{"manifest-garbage", func(t *testing.T, dir string) {
			each(t, dir, "MANIFEST-", "", func(p string) { corrupt(t, p, 0, 64) })
		}},
		{"manifest-truncated", func(t *testing.T, dir string) {
			each(t, dir, "MANIFEST-", "", func(p string) { _ = os.Truncate(p, 30) })
		}},
		{"manifest-empty", func(t *testing.T, dir string) {
			each(t, dir, "MANIFEST-", "", func(p string) { _ = os.Truncate(p, 0) })
		}},
		{"manifest-missing", func(t *testing.T, dir string) {
			each(t, dir, "MANIFEST-", "", func(p string) { _ = os.Remove(p) })
		}},
		{"table-missing", func(t *testing.T, dir string) {
			each(t, dir, "", ".sst", func(p string) { _ = os.Remove(p) })
		}},
		{"table-truncated", func(t *testing.T, dir string) {
			each(t, dir, "", ".sst", func(p string) { _ = os.Truncate(p, 10) })
		}},
		{"options-garbage", func(t *testing.T, dir string) {
			each(t, dir, "OPTIONS-", "", func(p string) { _ = os.WriteFile(p, []byte("garbage[[[\n\x00"), 0o644) })
		}},
		{"format-version-unknown", func(t *testing.T, dir string) {
			each(t, dir, "marker.format-version.", "", func(p string) {
				_ = os.Rename(p, filepath.Join(dir, "marker.format-version.000099.999"))
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := makeStore(t)
			tc.damage(t, dir)
			for _, ro := range []bool{true, false} {
				s, err := Open(dir, &Options{ReadOnly: ro})
				if err == nil {
					s.Close()
					t.Fatalf("Open(ReadOnly=%v) of a damaged store succeeded", ro)
				}
				if !errors.Is(err, kverr.ErrCorruptBlock) || !strings.Contains(err.Error(), dir) {
					t.Fatalf("Open(ReadOnly=%v) = %v, want ErrCorrupt naming the dir", ro, err)
				}
			}
		})
	}
}

func TestCorruptTable(t *testing.T) {
	dir := makeStore(t)
	for _, sst := range filesWithPrefix(t, dir, "", ".sst") {
		// The data blocks are at the start; the footer and index at the end.
		corrupt(t, sst, 200, 512)
	}
	s, err := Open(dir, nil)
	if err != nil {
		if !errors.Is(err, kverr.ErrCorruptBlock) {
			t.Fatalf("Open = %v, want nil or ErrCorrupt", err)
		}
		return
	}
	defer s.Close()
	var sawCorrupt bool
	for i := range 2000 {
		_, err := s.Get(ks1, fmt.Appendf(nil, "key%05d", i))
		if err != nil {
			if !errors.Is(err, kverr.ErrCorruptBlock) {
				t.Fatalf("Get = %v, want nil or ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("key%05d", i)) {
				t.Fatalf("error does not name the key: %v", err)
			}
			sawCorrupt = true
			break
		}
	}
	if !sawCorrupt {
		t.Fatal("no Get reported the corruption")
	}
	it, err := s.NewIter(ks1, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for it.First(); it.Valid(); it.Next() {
	}
	if err := it.Error(); !errors.Is(err, kverr.ErrCorruptBlock) {
		t.Fatalf("Iter.Error = %v, want ErrCorrupt", err)
	}
	if err := it.Close(); !errors.Is(err, kverr.ErrCorruptBlock) {
		t.Fatalf("Iter.Close = %v, want ErrCorrupt", err)
	}
}

func TestCorruptWatermark(t *testing.T) {
	fs := vfs.NewMem()
	db, err := pebble.Open("db", &pebble.Options{FS: fs, Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte(watermarkKey), []byte("short"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = Open("db", &Options{FS: fs})
	if !errors.Is(err, kverr.ErrCorruptBlock) {
		t.Fatalf("Open with a 5-byte watermark = %v, want ErrCorrupt", err)
	}
	// The failed open released the lock.
	db, err = pebble.Open("db", &pebble.Options{FS: fs, Logger: quietLogger{}})
	if err != nil {
		t.Fatalf("reopen after failed Open: %v", err)
	}
	db.Close()
}

// TestOpenNoStoreLeavesNothing: ReadOnly and ErrorIfNotExists opens of a
// directory that exists but holds no store (empty, or holding other files)
// fail with fs.ErrNotExist and leave the directory exactly as it was: no
// LOCK file (pebble.LockDirectory would create one before pebble.Open
// noticed there is no store). The directory can then become a store.
func TestOpenNoStoreLeavesNothing(t *testing.T) {
	for _, files := range []map[string]string{
		{},
		{"notes.txt": "not a store", "data.bin": "\x00\x01"},
	} {
		for _, opts := range []*Options{{ReadOnly: true}, {ErrorIfNotExists: true}} {
			dir := t.TempDir()
			for name, body := range files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			s, err := Open(dir, opts)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%+v) of a directory without a store succeeded", opts)
			}
			if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("Open(%+v) = %v, want fs.ErrNotExist naming the directory", opts, err)
			}
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			if want := slices.Sorted(maps.Keys(files)); !slices.Equal(names, want) {
				t.Fatalf("Open(%+v) left %q, want %q", opts, names, want)
			}
			s, err = Open(dir, nil)
			if err != nil {
				t.Fatalf("creating a store after the failed open: %v", err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}

	mem := vfs.NewMem()
	if err := mem.MkdirAll("empty", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, opts := range []*Options{{FS: mem, ReadOnly: true}, {FS: mem, ErrorIfNotExists: true}} {
		if _, err := Open("empty", opts); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Open = %v", err)
		}
		if ls, err := mem.List("empty"); err != nil || len(ls) != 0 {
			t.Fatalf("MemFS directory after a failed open: %q, %v", ls, err)
		}
	}
}

// TestPebbleOptions: PebbleOptions documents the store's configuration:
// defaults for nil, the caller's values otherwise, a fresh value each call,
// the corruption handler that does not exit, and no format upgrade on a
// read-only open.
func TestPebbleOptions(t *testing.T) {
	po := PebbleOptions(nil)
	if po.FS != vfs.Default || po.CacheSize != 8<<20 || po.MemTableSize != 4<<20 ||
		po.FormatMajorVersion != pebble.FormatNewest || po.ReadOnly || po.ErrorIfExists || po.ErrorIfNotExists {
		t.Fatalf("PebbleOptions(nil) = %+v", po)
	}
	if _, ok := po.Logger.(quietLogger); !ok {
		t.Fatalf("default logger %T", po.Logger)
	}
	if po.EventListener == nil || po.EventListener.DataCorruption == nil {
		t.Fatal("no DataCorruption handler")
	}
	po.EventListener.DataCorruption(pebble.DataCorruptionInfo{}) // logs, does not exit
	if PebbleOptions(nil) == po {
		t.Fatal("PebbleOptions returned the same value twice")
	}
	mem := vfs.NewMem()
	po = PebbleOptions(&Options{FS: mem, MemTableSize: 1 << 20,
		FormatMajorVersion: pebble.FormatNewest - 1, ErrorIfExists: true})
	if po.FS != mem || po.CacheSize != 8<<20 || po.MemTableSize != 1<<20 ||
		po.FormatMajorVersion != pebble.FormatNewest-1 || !po.ErrorIfExists {
		t.Fatalf("PebbleOptions(custom) = %+v", po)
	}
	if _, err := Open(t.TempDir(), &Options{CacheSize: -1}); !errors.Is(err, kverr.ErrBadOptions) {
		t.Fatalf("Open with CacheSize -1: %v, want ErrBadOptions", err)
	}
	po = PebbleOptions(&Options{ReadOnly: true, FormatMajorVersion: pebble.FormatNewest})
	if !po.ReadOnly || po.FormatMajorVersion != 0 {
		t.Fatalf("read-only PebbleOptions = %+v", po)
	}
}

// TestBloomFilters: every level's sstables get a Bloom filter of
// BloomBitsPerKey bits (10 by default), none when it is negative; more
// than 64 is kverr.ErrBadOptions; and a store written with filters answers
// point reads (present and absent keys) after its memtables went to L0.
func TestBloomFilters(t *testing.T) {
	for _, c := range []struct {
		opts *Options
		want pebble.FilterPolicy
	}{
		{nil, bloom.FilterPolicy(10)},
		{&Options{BloomBitsPerKey: 16}, bloom.FilterPolicy(16)},
		{&Options{BloomBitsPerKey: -1}, nil},
	} {
		po := PebbleOptions(c.opts)
		for i, l := range po.Levels {
			if l.FilterPolicy != c.want {
				t.Fatalf("PebbleOptions(%+v): level %d filter %v, want %v", c.opts, i, l.FilterPolicy, c.want)
			}
		}
	}
	if _, err := Open(t.TempDir(), &Options{BloomBitsPerKey: 65}); !errors.Is(err, kverr.ErrBadOptions) {
		t.Fatalf("Open with BloomBitsPerKey 65: %v, want ErrBadOptions", err)
	}
	st, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b := st.NewBatch()
	for i := range 1000 {
		b.Put(1, fmt.Appendf(nil, "key-%04d", 2*i), []byte("v"))
	}
	c, err := st.Commit(b)
	if err == nil {
		err = c.Wait()
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		_, err := st.Get(1, fmt.Appendf(nil, "key-%04d", i))
		if i%2 == 0 && err != nil || i%2 == 1 && !errors.Is(err, kverr.ErrNotFound) {
			t.Fatalf("Get(key-%04d) after the flush: %v", i, err)
		}
	}
}

// TestBackgroundJobs: the count of pebble's flushes and compactions in
// progress drops back to 0 once a flush is done and its compactions end,
// and is 0 after Close.
func TestBackgroundJobs(t *testing.T) {
	st, err := Open(t.TempDir(), &Options{MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for round := range 8 { // enough L0 files for a compaction to start
		putAndFlush(t, st, round, 5000, make([]byte, 64))
	}
	deadline := time.Now().Add(time.Minute)
	for st.BackgroundJobs() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("BackgroundJobs still %d a minute after the last flush", st.BackgroundJobs())
		}
		time.Sleep(time.Millisecond)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if n := st.BackgroundJobs(); n != 0 {
		t.Fatalf("BackgroundJobs after Close = %d", n)
	}
}

// TestCompact: Compact moves every table to the last level and keeps every
// key readable; it is refused after Close and on a read-only store, and
// does nothing to an empty store.
func TestCompact(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	st, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Compact(ctx); err != nil {
		t.Fatalf("Compact of an empty store: %v", err)
	}
	for round := range 3 {
		putAndFlush(t, st, round, 100, []byte("v"))
	}
	if err := st.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := st.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range m.Levels[:6] {
		if l.Files != 0 {
			t.Fatalf("after Compact L%d holds %d files: %+v", i, l.Files, m.Levels)
		}
	}
	if m.Levels[6].Files == 0 {
		t.Fatalf("after Compact the last level is empty: %+v", m.Levels)
	}
	if _, err := st.Get(1, []byte("key-1-000050")); err != nil {
		t.Fatalf("Get after Compact: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Compact(ctx); !errors.Is(err, kverr.ErrClosed) {
		t.Fatalf("Compact after Close: %v, want ErrClosed", err)
	}
	ro, err := Open(dir, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := ro.Compact(ctx); !errors.Is(err, kverr.ErrReadOnly) {
		t.Fatalf("Compact of a read-only store: %v, want ErrReadOnly", err)
	}
}

// putAndFlush commits n puts of keys "key-<round>-<i>" (i zero-padded to 6
// digits) with value v in keyspace 1 as one batch, waits for it, then
// flushes the memtable: one more L0 table.
func putAndFlush(t *testing.T, st *Store, round, n int, v []byte) {
	t.Helper()
	b := st.NewBatch()
	for i := range n {
		b.Put(1, fmt.Appendf(nil, "key-%d-%06d", round, i), v)
	}
	c, err := st.Commit(b)
	if err == nil {
		err = c.Wait()
	}
	if err == nil {
		err = st.Flush()
	}
	if err != nil {
		t.Fatal(err)
	}
}
