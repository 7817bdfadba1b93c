package enginedir

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

func TestManifestTextsMatchFormatVersion(t *testing.T) {
	if want := manifestHeader + "format 2\n"; FormatVersion != 2 || manifestReady != want {
		t.Fatalf("FormatVersion %d, ready manifest %q: update the manifest texts with the version", FormatVersion, manifestReady)
	}
}

func TestOpenNewEngine(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "engine") // parents are created too
	d := openT(t, dir)
	if !d.Fresh() || d.Path() != dir {
		t.Fatalf("new engine: Fresh %v, Path %q", d.Fresh(), d.Path())
	}
	wantEntries(t, dir, ManifestName, LockName, BitsDir)
	if got := readString(t, filepath.Join(dir, ManifestName)); got != manifestInit {
		t.Fatalf("manifest %q, want the initialising one", got)
	}
	if got := readString(t, filepath.Join(dir, LockName)); got != lockText {
		t.Fatalf("LOCK holds %q, want %q", got, lockText)
	}
	if d.StorePath() != filepath.Join(dir, StoreDir) || d.BitsPath("x") != filepath.Join(dir, BitsDir, "x.bits") || d.BitsDirPath() != filepath.Join(dir, BitsDir) {
		t.Fatalf("paths: %s %s %s", d.StorePath(), d.BitsPath("x"), d.BitsDirPath())
	}
	// MarkReady refuses until the store exists.
	if err := d.MarkReady(); !errors.Is(err, fs.ErrNotExist) || !d.Fresh() {
		t.Fatalf("MarkReady without a store: %v (fresh %v)", err, d.Fresh())
	}
	wantEntries(t, dir, ManifestName, LockName, BitsDir)
	mkdir(t, d.StorePath())
	if err := d.MarkReady(); err != nil {
		t.Fatal(err)
	}
	if d.Fresh() {
		t.Fatal("Fresh after MarkReady")
	}
	if err := d.MarkReady(); err != nil { // nothing to do
		t.Fatal(err)
	}
	writeFile(t, d.BitsPath("x"), "")
	if err := d.SyncBitsDir(); err != nil {
		t.Fatal(err)
	}
	closeT(t, d)
	if err := d.MarkReady(); !errors.Is(err, errClosed) {
		t.Fatalf("MarkReady after Close: %v", err)
	}
	if got := readString(t, filepath.Join(dir, ManifestName)); got != manifestReady {
		t.Fatalf("manifest %q, want the ready one", got)
	}
	wantEntries(t, dir, ManifestName, LockName, BitsDir, StoreDir)
	before := hashTree(t, dir)
	d = openT(t, dir)
	if d.Fresh() {
		t.Fatal("a ready engine reopened Fresh")
	}
	closeT(t, d)
	if hashTree(t, dir) != before {
		t.Fatal("reopening a ready engine changed it")
	}
}

func TestOpenEmptyExistingDirectory(t *testing.T) {
	dir := t.TempDir()
	d := openT(t, dir)
	defer closeT(t, d)
	if !d.Fresh() {
		t.Fatal("an empty directory did not open Fresh")
	}
	wantEntries(t, dir, ManifestName, LockName, BitsDir)
}

// Directories made by earlier versions: an empty LOCK next to a ready
// manifest. They open, and nothing in them changes.
func TestOpenExistingFormat(t *testing.T) {
	dir := t.TempDir()
	makeEngine(t, dir)
	before := hashTree(t, dir)
	for range 2 {
		d := openT(t, dir)
		if d.Fresh() {
			t.Fatal("existing engine opened Fresh")
		}
		if _, err := Open(dir, nil); !errors.Is(err, kverr.ErrLocked) {
			t.Fatalf("second Open: %v, want ErrLocked", err)
		}
		closeT(t, d)
		if err := d.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if hashTree(t, dir) != before {
			t.Fatal("opening an existing engine changed it (the empty LOCK must stay empty)")
		}
	}
}

// A ready engine without a LOCK file (copied without it, or left by an
// older version's crash) opens and gets one; a failed Open, or Discard,
// removes it again.
func TestReadyEngineWithoutLock(t *testing.T) {
	dir := t.TempDir()
	makeEngine(t, dir)
	if err := os.Remove(filepath.Join(dir, LockName)); err != nil {
		t.Fatal(err)
	}
	before := hashTree(t, dir)
	d := openT(t, dir)
	if got := readString(t, filepath.Join(dir, LockName)); got != lockText {
		t.Fatalf("LOCK made for an engine without one holds %q", got)
	}
	if err := d.Discard(); err != nil {
		t.Fatal(err)
	}
	if err := d.Discard(); err != nil { // idempotent
		t.Fatal(err)
	}
	if hashTree(t, dir) != before {
		t.Fatal("Discard left something behind")
	}
	// Discard of an Open that found LOCK keeps it.
	writeFile(t, filepath.Join(dir, LockName), "")
	before = hashTree(t, dir)
	d = openT(t, dir)
	if err := d.Discard(); err != nil {
		t.Fatal(err)
	}
	if hashTree(t, dir) != before {
		t.Fatal("Discard removed a LOCK it did not make")
	}
}

func TestCloseIsIdempotentAndConcurrent(t *testing.T) {
	dir := t.TempDir()
	d := openT(t, dir)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := d.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			_ = d.Fresh()
		})
	}
	wg.Wait()
	closeT(t, openT(t, dir)) // the lock was released
}

// TestOpenRefusals: every refusal has its typed error, and the directory
// is left byte for byte as it was (LOCK included).
func TestOpenRefusals(t *testing.T) {
	ready := func(t *testing.T) string {
		d := t.TempDir()
		makeEngine(t, d)
		return d
	}
	cases := []struct {
		name  string
		setup func(t *testing.T) string
		want  []error
	}{
		{"path is a regular file", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "f")
			writeFile(t, p, "data")
			return p
		}, []error{kverr.ErrNotEngine}},
		{"path is a symlink to a file", func(t *testing.T) string {
			d := t.TempDir()
			writeFile(t, filepath.Join(d, "f"), "data")
			if err := os.Symlink(filepath.Join(d, "f"), filepath.Join(d, "l")); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(d, "l")
		}, []error{kverr.ErrNotEngine}},
		{"path is a device", func(t *testing.T) string { return "/dev/null" }, []error{kverr.ErrNotEngine}},
		{"parent is a file", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "f")
			writeFile(t, p, "")
			return filepath.Join(p, "engine")
		}, []error{syscall.ENOTDIR}},
		{"non-empty foreign directory", func(t *testing.T) string {
			d := t.TempDir()
			writeFile(t, filepath.Join(d, "precious.txt"), "x")
			return d
		}, []error{kverr.ErrNotEngine}},
		{"foreign directory with a subdirectory", func(t *testing.T) string {
			d := t.TempDir()
			mkdir(t, filepath.Join(d, StoreDir))
			return d
		}, []error{kverr.ErrNotEngine}},
		{"lone empty LOCK", func(t *testing.T) string {
			d := t.TempDir()
			writeFile(t, filepath.Join(d, LockName), "")
			return d
		}, []error{kverr.ErrNotEngine}},
		{"lone foreign LOCK", func(t *testing.T) string {
			d := t.TempDir()
			writeFile(t, filepath.Join(d, LockName), "pid 4242\n")
			return d
		}, []error{kverr.ErrNotEngine}},
		{"lone LOCK with kvbuf's text and more", func(t *testing.T) string {
			d := t.TempDir()
			writeFile(t, filepath.Join(d, LockName), lockText+"x")
			return d
		}, []error{kverr.ErrNotEngine}},
		{"lone LOCK directory", func(t *testing.T) string {
			d := t.TempDir()
			mkdir(t, filepath.Join(d, LockName))
			return d
		}, []error{kverr.ErrNotEngine}},
		{"lone LOCK symlink to kvbuf's text", func(t *testing.T) string {
			d := t.TempDir()
			writeFile(t, filepath.Join(d, "elsewhere"), lockText)
			mkdir(t, filepath.Join(d, "e"))
			if err := os.Symlink(filepath.Join(d, "elsewhere"), filepath.Join(d, "e", LockName)); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(d, "e")
		}, []error{kverr.ErrNotEngine}},
		{"kvbuf LOCK and a foreign file", func(t *testing.T) string {
			d := t.TempDir()
			writeFile(t, filepath.Join(d, LockName), lockText)
			writeFile(t, filepath.Join(d, "precious.txt"), "x")
			return d
		}, []error{kverr.ErrNotEngine}},
		{"kvbuf leftovers and a foreign file", func(t *testing.T) string {
			d := t.TempDir()
			writeFile(t, filepath.Join(d, lockTempPrefix+"0123456789abcdef"), lockText)
			writeFile(t, filepath.Join(d, legacyManifestTemp), manifestInit)
			writeFile(t, filepath.Join(d, "precious.txt"), "x")
			return d
		}, []error{kverr.ErrNotEngine}},
		{"kvbuf LOCK and a store but no manifest", func(t *testing.T) string {
			d := t.TempDir()
			writeFile(t, filepath.Join(d, LockName), lockText)
			mkdir(t, filepath.Join(d, StoreDir))
			return d
		}, []error{kverr.ErrNotEngine}},
		{"foreign manifest", func(t *testing.T) string {
			d := t.TempDir()
			writeFile(t, filepath.Join(d, ManifestName), "something else\n")
			return d
		}, []error{kverr.ErrNotEngine}},
		{"empty manifest", func(t *testing.T) string {
			d := t.TempDir()
			writeFile(t, filepath.Join(d, ManifestName), "")
			return d
		}, []error{kverr.ErrNotEngine}},
		{"manifest is a directory", func(t *testing.T) string {
			d := t.TempDir()
			mkdir(t, filepath.Join(d, ManifestName))
			return d
		}, []error{kverr.ErrNotEngine}},
		{"manifest is a symlink", func(t *testing.T) string {
			d := ready(t)
			writeFile(t, filepath.Join(d, "real"), manifestReady)
			if err := os.Remove(filepath.Join(d, ManifestName)); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("real", filepath.Join(d, ManifestName)); err != nil {
				t.Fatal(err)
			}
			return d // a symlink kvbuf never makes, next to store/ and bits/: damaged
		}, []error{kverr.ErrCorruptDir}},
		{"manifest is a FIFO", func(t *testing.T) string {
			d := t.TempDir()
			if err := syscall.Mkfifo(filepath.Join(d, ManifestName), 0o644); err != nil {
				t.Skip(err)
			}
			return d
		}, []error{kverr.ErrNotEngine}},
		{"manifest of a future format", func(t *testing.T) string {
			d := ready(t)
			writeFile(t, filepath.Join(d, ManifestName), manifestHeader+"format 3\n")
			return d
		}, []error{kverr.ErrCorruptDir}},
		{"truncated manifest", func(t *testing.T) string {
			d := ready(t)
			writeFile(t, filepath.Join(d, ManifestName), manifestHeader)
			return d
		}, []error{kverr.ErrCorruptDir}},
		{"manifest with garbage after it", func(t *testing.T) string {
			d := ready(t)
			writeFile(t, filepath.Join(d, ManifestName), manifestReady+strings.Repeat("x", 5000))
			return d
		}, []error{kverr.ErrCorruptDir}},
		{"ready manifest without a store", func(t *testing.T) string {
			d := ready(t)
			if err := os.RemoveAll(filepath.Join(d, StoreDir)); err != nil {
				t.Fatal(err)
			}
			return d
		}, []error{kverr.ErrCorruptDir, fs.ErrNotExist}},
		{"ready manifest without a store or LOCK", func(t *testing.T) string {
			d := ready(t)
			if err := os.RemoveAll(filepath.Join(d, StoreDir)); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(d, LockName)); err != nil {
				t.Fatal(err)
			}
			return d
		}, []error{kverr.ErrCorruptDir}}, // and the LOCK made meanwhile is gone again
		{"ready manifest without bits", func(t *testing.T) string {
			d := ready(t)
			if err := os.RemoveAll(filepath.Join(d, BitsDir)); err != nil {
				t.Fatal(err)
			}
			return d
		}, []error{kverr.ErrCorruptDir, fs.ErrNotExist}},
		{"store is a file", func(t *testing.T) string {
			d := ready(t)
			if err := os.RemoveAll(filepath.Join(d, StoreDir)); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(d, StoreDir), "x")
			return d
		}, []error{kverr.ErrCorruptDir, syscall.ENOTDIR}},
		{"bits is a file", func(t *testing.T) string {
			d := ready(t)
			if err := os.RemoveAll(filepath.Join(d, BitsDir)); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(d, BitsDir), "x")
			return d
		}, []error{kverr.ErrCorruptDir, syscall.ENOTDIR}},
		{"initialising, bits is a file, no LOCK", func(t *testing.T) string {
			d := t.TempDir()
			writeFile(t, filepath.Join(d, ManifestName), manifestInit)
			writeFile(t, filepath.Join(d, BitsDir), "x")
			return d
		}, []error{kverr.ErrCorruptDir, syscall.ENOTDIR}},
		{"LOCK is a directory", func(t *testing.T) string {
			d := ready(t)
			if err := os.Remove(filepath.Join(d, LockName)); err != nil {
				t.Fatal(err)
			}
			mkdir(t, filepath.Join(d, LockName))
			return d
		}, []error{kverr.ErrCorruptDir}},
		{"LOCK is a symlink", func(t *testing.T) string {
			d := ready(t)
			if err := os.Remove(filepath.Join(d, LockName)); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(d, "other"), "")
			if err := os.Symlink("other", filepath.Join(d, LockName)); err != nil {
				t.Fatal(err)
			}
			return d
		}, []error{kverr.ErrCorruptDir}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.setup(t)
			before := hashTree(t, path)
			d, err := Open(path, nil)
			if err == nil {
				d.Close()
				t.Fatal("Open succeeded")
			}
			checkIs(t, err, tc.want...)
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the path", err)
			}
			if after := hashTree(t, path); after != before {
				t.Fatalf("refused Open (%v) changed %s", err, path)
			}
		})
	}
}

// TestRefusalUnderLockRemovesLock: a directory that turns foreign between
// the first look and the look under the lock is refused, and the LOCK this
// Open made is removed again.
func TestRefusalUnderLockRemovesLock(t *testing.T) {
	dir := t.TempDir()
	testHook = func(point, path string) {
		if point == "locked" {
			writeFile(t, filepath.Join(path, "precious.txt"), "x")
		}
	}
	defer func() { testHook = nil }()
	_, err := Open(dir, nil)
	checkIs(t, err, kverr.ErrNotEngine)
	wantEntries(t, dir, "precious.txt")
}

// TestLockOnRemovedLockFile: an opener opens LOCK, the holder removes it
// (a refused or discarded Open) and unlocks, then the opener locks the
// removed file. That lock excludes nobody, so the opener must look again
// rather than win alongside whoever makes the next LOCK.
func TestLockOnRemovedLockFile(t *testing.T) {
	dir := t.TempDir()
	a := openT(t, dir) // makes LOCK, writes the initialising manifest
	opened, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	testHook = func(point, _ string) {
		if point == "opened" {
			once.Do(func() {
				close(opened)
				<-proceed
			})
		}
	}
	defer func() { testHook = nil }()
	type result struct {
		d   *Dir
		err error
	}
	res := make(chan result)
	go func() {
		d, err := Open(dir, nil)
		res <- result{d, err}
	}()
	<-opened
	if err := a.Discard(); err != nil { // removes LOCK, then unlocks
		t.Fatal(err)
	}
	close(proceed)
	r := <-res
	if r.err != nil {
		t.Fatalf("Open after the holder went away: %v", r.err)
	}
	defer closeT(t, r.d)
	if d, err := Open(dir, nil); !errors.Is(err, kverr.ErrLocked) {
		if d != nil {
			d.Close()
		}
		t.Fatalf("a second Open while the first holds the directory: %v, want ErrLocked", err)
	}
	wantEntries(t, dir, ManifestName, LockName, BitsDir)
}

// TestManifestAppearsDuringListing: an unlocked look that finds no
// manifest but store/ must look again before calling the directory
// foreign, because kvbuf makes the manifest before store/ (a directory
// listing does not promise to show entries in the order they were made).
func TestManifestAppearsDuringListing(t *testing.T) {
	dir := t.TempDir()
	mkdir(t, filepath.Join(dir, StoreDir))
	var once sync.Once
	testHook = func(point, path string) {
		if point == "listed" {
			once.Do(func() { writeFile(t, filepath.Join(path, ManifestName), manifestInit) })
		}
	}
	defer func() { testHook = nil }()
	d := openT(t, dir)
	defer closeT(t, d)
	if !d.Fresh() {
		t.Fatal("not Fresh")
	}
}

// TestEngineMadeDuringProbe: an unlocked look finds a foreign file and no
// manifest, and a racing opener then initialises the directory (manifest,
// bits/, store/) before the look checks for store/ and bits/. The look
// must find the manifest it missed and look again, never report an engine
// without a manifest: CI saw that report from TestOpenRaceWithFailures
// when the probes ran in the other order.
func TestEngineMadeDuringProbe(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "precious.txt"), "x")
	var once sync.Once
	testHook = func(point, path string) {
		if point == "probed" {
			once.Do(func() {
				writeFile(t, filepath.Join(path, ManifestName), manifestInit)
				mkdir(t, filepath.Join(path, BitsDir))
				mkdir(t, filepath.Join(path, StoreDir))
			})
		}
	}
	defer func() { testHook = nil }()
	l, err := readLayout(dir)
	if err != nil {
		t.Fatalf("readLayout while an engine is made: %v", err)
	}
	if l.state != Initialising {
		t.Fatalf("state %v, want %v", l.state, Initialising)
	}
}

func TestLockedAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	cmd := reexec(t, "hold", dir)
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
	line := make([]byte, 5)
	if _, err := io.ReadFull(stdout, line); err != nil || string(line) != "held\n" {
		stdin.Close()
		_ = cmd.Wait()
		t.Fatalf("child: %q, %v", line, err)
	}
	before := hashTree(t, dir)
	_, err = Open(dir, nil)
	checkIs(t, err, kverr.ErrLocked)
	info, err := Describe(dir)
	if err != nil || !info.Locked || info.State != Initialising {
		t.Errorf("Describe of a directory another process holds: %+v, %v", info, err)
	}
	if _, locked, err := ReadLock(dir); !locked || err != nil {
		t.Errorf("ReadLock of a held directory: locked %v, %v", locked, err)
	}
	if hashTree(t, dir) != before {
		t.Error("a locked-out Open changed the directory")
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	closeT(t, openT(t, dir))
}

func TestReadLock(t *testing.T) {
	dir := t.TempDir()
	// No LOCK: no lock needed, nothing created.
	release, locked, err := ReadLock(dir)
	if err != nil || locked {
		t.Fatalf("ReadLock of an empty directory: %v, %v", locked, err)
	}
	release()
	wantEntries(t, dir)

	makeEngine(t, dir)
	release, locked, err = ReadLock(dir)
	if err != nil || locked {
		t.Fatalf("ReadLock: %v, %v", locked, err)
	}
	release2, locked, err := ReadLock(dir) // readers share
	if err != nil || locked {
		t.Fatalf("second ReadLock: %v, %v", locked, err)
	}
	_, err = Open(dir, nil)
	checkIs(t, err, kverr.ErrLocked)
	release()
	release2()
	d := openT(t, dir)
	if _, locked, err := ReadLock(dir); !locked || err != nil {
		t.Fatalf("ReadLock of an open engine: %v, %v", locked, err)
	}
	closeT(t, d)
}

// TestSameFile: a lock taken on a LOCK file that was removed or replaced
// meanwhile is not the engine's lock.
func TestSameFile(t *testing.T) {
	dir := t.TempDir()
	lpath := filepath.Join(dir, LockName)
	writeFile(t, lpath, "")
	f, err := os.Open(lpath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := sameFile(f, lpath); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(lpath); err != nil {
		t.Fatal(err)
	}
	if err := sameFile(f, lpath); !errors.Is(err, errAgain) {
		t.Fatalf("removed LOCK: %v", err)
	}
	writeFile(t, lpath, "")
	if err := sameFile(f, lpath); !errors.Is(err, errAgain) {
		t.Fatalf("replaced LOCK: %v", err)
	}
}

// TestStoreFS: the store is looked for on the store's file system.
func TestStoreFS(t *testing.T) {
	dir := t.TempDir()
	mem := vfs.NewMem()
	d, err := Open(dir, &Options{StoreFS: mem})
	if err != nil {
		t.Fatal(err)
	}
	mkdir(t, d.StorePath()) // on the wrong file system
	if err := d.MarkReady(); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("MarkReady with the store on the OS file system only: %v", err)
	}
	if err := mem.MkdirAll(d.StorePath(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := d.MarkReady(); err != nil {
		t.Fatal(err)
	}
	closeT(t, d)
	if err := os.Remove(filepath.Join(dir, StoreDir)); err != nil {
		t.Fatal(err)
	}
	d, err = Open(dir, &Options{StoreFS: mem})
	if err != nil {
		t.Fatalf("store on the MemFS only: %v", err)
	}
	closeT(t, d)
	_, err = Open(dir, &Options{StoreFS: vfs.NewMem()})
	checkIs(t, err, kverr.ErrCorruptDir, fs.ErrNotExist)
	_, err = Open(dir, nil) // the OS file system has no store
	checkIs(t, err, kverr.ErrCorruptDir, fs.ErrNotExist)
}

func TestUnreadableDirectories(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads and writes every directory")
	}
	t.Run("unreadable engine", func(t *testing.T) {
		dir := t.TempDir()
		makeEngine(t, dir)
		if err := os.Chmod(dir, 0); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o755)
		_, err := Open(dir, nil)
		checkIs(t, err, fs.ErrPermission)
		_, err = Describe(dir)
		checkIs(t, err, fs.ErrPermission)
	})
	t.Run("read-only empty directory", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o755)
		_, err := Open(dir, nil)
		checkIs(t, err, fs.ErrPermission)
		wantEntries(t, dir)
	})
	t.Run("unreadable manifest", func(t *testing.T) {
		dir := t.TempDir()
		makeEngine(t, dir)
		before := hashTree(t, dir)
		mpath := filepath.Join(dir, ManifestName)
		if err := os.Chmod(mpath, 0); err != nil {
			t.Fatal(err)
		}
		_, err := Open(dir, nil)
		checkIs(t, err, fs.ErrPermission)
		if err := os.Chmod(mpath, 0o644); err != nil {
			t.Fatal(err)
		}
		if hashTree(t, dir) != before {
			t.Fatal("failed Open changed the directory")
		}
	})
	t.Run("unreadable lone LOCK", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, LockName), lockText)
		if err := os.Chmod(filepath.Join(dir, LockName), 0); err != nil {
			t.Fatal(err)
		}
		_, err := Open(dir, nil)
		checkIs(t, err, fs.ErrPermission)
		wantEntries(t, dir, LockName)
	})
	t.Run("unwritable parent", func(t *testing.T) {
		parent := t.TempDir()
		if err := os.Chmod(parent, 0o555); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(parent, 0o755)
		_, err := Open(filepath.Join(parent, "engine"), nil)
		checkIs(t, err, fs.ErrPermission)
	})
}

func TestCheckName(t *testing.T) {
	good := []string{"a", "A-z_0.9", "..a", strings.Repeat("x", MaxNameLen)}
	for _, n := range good {
		if err := CheckName("keyspace", n); err != nil {
			t.Errorf("CheckName(%q): %v", n, err)
		}
	}
	bad := []string{"", ".", "..", "a b", "a/b", "é", "@next", "a\x00", strings.Repeat("x", MaxNameLen+1)}
	for _, n := range bad {
		err := CheckName("bitslice", n)
		if !errors.Is(err, kverr.ErrBadName) || !strings.Contains(err.Error(), "bitslice name") {
			t.Errorf("CheckName(%q) = %v, want ErrBadName", n, err)
		}
	}
}

func TestBitsNames(t *testing.T) {
	dir := t.TempDir()
	if _, err := BitsNames(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("BitsNames without a bits directory: %v", err)
	}
	bits := filepath.Join(dir, BitsDir)
	mkdir(t, bits)
	for _, n := range []string{"b.bits", "a.bits", "notes.txt", "bad name.bits", ".bits", "c.bits.tmp"} {
		writeFile(t, filepath.Join(bits, n), "")
	}
	mkdir(t, filepath.Join(bits, "d.bits"))
	got, err := BitsNames(dir)
	if err != nil || strings.Join(got, ",") != "a,b" {
		t.Fatalf("BitsNames = %q, %v; want a,b", got, err)
	}
}

func TestDescribe(t *testing.T) {
	type want struct {
		state   State
		version int
		bits    []string
	}
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  want
		err   []error
	}{
		{"empty", func(t *testing.T, dir string) {}, want{}, []error{kverr.ErrNotEngine}},
		{"foreign", func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "x"), "") }, want{}, []error{kverr.ErrNotEngine}},
		{"lone empty LOCK", func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, LockName), "") }, want{}, []error{kverr.ErrNotEngine}},
		{"damaged manifest", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, ManifestName), manifestHeader+"format 9\n")
		}, want{}, []error{kverr.ErrCorruptDir}},
		{"lone kvbuf LOCK", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, LockName), lockText)
		}, want{state: Initialising}, nil},
		{"legacy temporary manifest", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, legacyManifestTemp), "kvbuf eng")
		}, want{state: Initialising}, nil},
		{"initialising", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, ManifestName), manifestInit)
			mkdir(t, filepath.Join(dir, BitsDir))
		}, want{state: Initialising, version: FormatVersion}, nil},
		{"ready", func(t *testing.T, dir string) { makeEngine(t, dir) }, want{state: Ready, version: FormatVersion, bits: []string{"live"}}, nil},
		{"ready, format 1", func(t *testing.T, dir string) {
			makeEngine(t, dir)
			writeFile(t, filepath.Join(dir, ManifestName), manifestReadyV1)
		}, want{state: Ready, version: 1, bits: []string{"live"}}, nil},
		{"ready without a store", func(t *testing.T, dir string) {
			makeEngine(t, dir)
			if err := os.RemoveAll(filepath.Join(dir, StoreDir)); err != nil {
				t.Fatal(err)
			}
		}, want{state: Ready, version: FormatVersion, bits: []string{"live"}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			before := hashTree(t, dir)
			info, err := Describe(dir)
			if hashTree(t, dir) != before {
				t.Fatal("Describe changed the directory")
			}
			if tc.err != nil {
				checkIs(t, err, tc.err...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if info.Path != dir || info.State != tc.want.state || info.FormatVersion != tc.want.version || info.Locked ||
				strings.Join(info.Bitslices, ",") != strings.Join(tc.want.bits, ",") {
				t.Fatalf("Describe = %+v, want %+v", info, tc.want)
			}
		})
	}
	t.Run("locked", func(t *testing.T) {
		dir := t.TempDir()
		d := openT(t, dir)
		defer closeT(t, d)
		info, err := Describe(dir)
		if err != nil || !info.Locked || info.State != Initialising || info.FormatVersion != FormatVersion {
			t.Fatalf("Describe of a directory being initialised: %+v, %v", info, err)
		}
	})
	t.Run("not a directory", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "f")
		writeFile(t, p, "")
		_, err := Describe(p)
		checkIs(t, err, kverr.ErrNotEngine)
		_, err = Describe(filepath.Join(t.TempDir(), "missing"))
		checkIs(t, err, fs.ErrNotExist)
	})
	if Ready.String() != "ready" || Initialising.String() != "initialising" || State(0).String() != "State(0)" {
		t.Error("State.String")
	}
}

// An engine directory of format 1 (kvbuf before engine ids and the
// bitslice catalog) opens, reports Version 1 and keeps its manifest until
// Upgrade replaces it; an initialising format-1 one is finished as the
// current format.
func TestFormat1UpgradedOnRequest(t *testing.T) {
	dir := t.TempDir()
	makeEngine(t, dir)
	writeFile(t, filepath.Join(dir, ManifestName), manifestReadyV1)
	d := openT(t, dir)
	if d.Version() != 1 || d.Fresh() {
		t.Fatalf("Version %d Fresh %v, want 1 and false", d.Version(), d.Fresh())
	}
	if got := readString(t, filepath.Join(dir, ManifestName)); got != manifestReadyV1 {
		t.Fatalf("Open rewrote the manifest: %q", got)
	}
	if err := d.Upgrade(); err != nil {
		t.Fatal(err)
	}
	if got := readString(t, filepath.Join(dir, ManifestName)); got != manifestReady || d.Version() != FormatVersion {
		t.Fatalf("after Upgrade: manifest %q, Version %d", got, d.Version())
	}
	if err := d.Upgrade(); err != nil { // nothing to do
		t.Fatal(err)
	}
	closeT(t, d)
	if err := d.Upgrade(); !errors.Is(err, errClosed) {
		t.Fatalf("Upgrade after Close: %v", err)
	}

	init := t.TempDir()
	writeFile(t, filepath.Join(init, ManifestName), manifestInitV1)
	d = openT(t, init)
	if !d.Fresh() {
		t.Fatal("an initialising format-1 directory is not Fresh")
	}
	mkdir(t, d.StorePath())
	if err := d.MarkReady(); err != nil {
		t.Fatal(err)
	}
	if got := readString(t, filepath.Join(init, ManifestName)); got != manifestReady || d.Version() != FormatVersion {
		t.Fatalf("finished initialisation: manifest %q, Version %d", got, d.Version())
	}
	closeT(t, d)
}

// Issue 20: a directory with store/ and bits/ but an empty, garbage or
// missing KVBUF was kverr.ErrNotEngine, so a host's "restore on corrupt" branch
// never ran. kvbuf makes store/ and bits/ only after its manifest: it is a
// damaged engine, kverr.ErrCorruptDir, and nothing is changed. With only one of
// them, or a foreign file, it stays kverr.ErrNotEngine.
func TestEngineDirsWithoutManifestAreCorrupt(t *testing.T) {
	cases := []struct {
		name     string
		manifest *string // nil: none
		dirs     []string
		want     error
	}{
		{"missing", nil, []string{StoreDir, BitsDir}, kverr.ErrCorruptDir},
		{"empty", ptr(""), []string{StoreDir, BitsDir}, kverr.ErrCorruptDir},
		{"garbage", ptr("\x00\x01garbage"), []string{StoreDir, BitsDir}, kverr.ErrCorruptDir},
		{"missing, only store", nil, []string{StoreDir}, kverr.ErrNotEngine},
		{"garbage, only bits", ptr("garbage"), []string{BitsDir}, kverr.ErrNotEngine},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, d := range tc.dirs {
				mkdir(t, filepath.Join(dir, d))
			}
			writeFile(t, filepath.Join(dir, StoreDir+"x"), "") // something else too
			if tc.manifest != nil {
				writeFile(t, filepath.Join(dir, ManifestName), *tc.manifest)
			}
			before := hashTree(t, dir)
			d, err := Open(dir, nil)
			if err == nil {
				closeT(t, d)
				t.Fatalf("Open succeeded, want %v", tc.want)
			}
			checkIs(t, err, tc.want)
			if tc.want == kverr.ErrCorruptDir && errors.Is(err, kverr.ErrNotEngine) {
				t.Fatalf("Open: %v matches ErrNotEngine too", err)
			}
			if _, err := Describe(dir); !errors.Is(err, tc.want) {
				t.Fatalf("Describe: %v, want %v", err, tc.want)
			}
			if hashTree(t, dir) != before {
				t.Fatal("a refused Open changed the directory")
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// A new engine directory is private to its owner: the directories 0700,
// the manifest and LOCK 0600, whatever the umask lets through of more (an
// existing directory keeps its mode).
func TestNewEngineModes(t *testing.T) {
	old := syscall.Umask(0) // the widest case: nothing masked
	defer syscall.Umask(old)
	parent := t.TempDir()
	dir := filepath.Join(parent, "a", "engine")
	d := openT(t, dir)
	defer closeT(t, d)
	for path, want := range map[string]os.FileMode{
		filepath.Join(parent, "a"):       DirMode,
		dir:                              DirMode,
		d.BitsDirPath():                  DirMode,
		filepath.Join(dir, ManifestName): FileMode,
		filepath.Join(dir, LockName):     FileMode,
	} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != want {
			t.Errorf("%s: mode %#o, want %#o", path, got, want)
		}
	}
}
