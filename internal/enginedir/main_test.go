package enginedir

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"go.uber.org/goleak"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// childEnv makes the re-executed test binary play a role instead of
// running tests: "open" (openChild), "hold" (holdChild).
const (
	childEnv    = "ENGINEDIR_TEST_CHILD"
	childDirEnv = "ENGINEDIR_TEST_DIR"
)

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
	case "open":
		os.Exit(openChild(os.Getenv(childDirEnv)))
	case "hold":
		os.Exit(holdChild(os.Getenv(childDirEnv)))
	default:
		fmt.Fprintf(os.Stderr, "unknown %s=%q\n", childEnv, os.Getenv(childEnv))
		os.Exit(2)
	}
	goleak.VerifyTestMain(m)
}

// openChild prints "ready", waits for a line on stdin, opens dir and
// prints the outcome: "won" (then it finishes the initialisation, prints
// "done" and holds the directory until stdin closes), "locked", or
// "error ..." for anything else.
func openChild(dir string) int {
	in := bufio.NewScanner(os.Stdin)
	fmt.Println("ready")
	if !in.Scan() {
		return 2
	}
	d, err := Open(dir, nil)
	switch {
	case errors.Is(err, kverr.ErrLocked):
		fmt.Println("locked")
		return 0
	case err != nil:
		fmt.Printf("error %v\n", err)
		return 0
	}
	fmt.Println("won")
	if err := finishInit(d); err != nil {
		fmt.Printf("error %v\n", err)
	} else {
		fmt.Println("done")
	}
	for in.Scan() {
	}
	if err := d.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	return 0
}

// holdChild opens dir, prints "held" (or the error) and holds the lock
// until stdin closes.
func holdChild(dir string) int {
	d, err := Open(dir, nil)
	if err != nil {
		fmt.Printf("error %v\n", err)
		return 4
	}
	fmt.Println("held")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
	}
	if err := d.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	return 0
}

// reexec returns a command running this test binary in role for dir.
func reexec(t testing.TB, role, dir string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	// A race-enabled binary otherwise sleeps a second at exit.
	cmd.Env = append(os.Environ(), childEnv+"="+role, childDirEnv+"="+dir, "GORACE=atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	cmd.Stderr = os.Stderr
	return cmd
}

// finishInit does what the engine does with a Fresh directory: create the
// store (here an empty directory) and mark the engine ready.
func finishInit(d *Dir) error {
	if !d.Fresh() {
		return nil
	}
	if err := os.Mkdir(d.StorePath(), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return d.MarkReady()
}

// hashTree describes everything under root (names, types, modes, file
// contents): equal hashes mean nothing was created, removed or changed.
func hashTree(t testing.TB, root string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root {
				fmt.Fprintf(h, "unreadable root: %v\n", err)
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %v\n", rel, info.Mode())
		if info.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%d %q\n", len(b), b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// entries lists the names in dir, sorted.
func entries(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

func wantEntries(t testing.TB, dir string, want ...string) {
	t.Helper()
	sort.Strings(want)
	if got := entries(t, dir); !slices.Equal(got, want) {
		t.Fatalf("%s holds %q, want %q", dir, got, want)
	}
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t testing.TB, path string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

func readString(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// makeEngine builds, by hand, an engine directory as earlier kvbuf
// versions left it: a ready manifest, an empty LOCK, a store with a file
// in it and a bitslice.
func makeEngine(t testing.TB, dir string) {
	t.Helper()
	mkdir(t, filepath.Join(dir, StoreDir))
	mkdir(t, filepath.Join(dir, BitsDir))
	writeFile(t, filepath.Join(dir, ManifestName), manifestReady)
	writeFile(t, filepath.Join(dir, LockName), "")
	writeFile(t, filepath.Join(dir, StoreDir, "MANIFEST-000001"), "pebble")
	writeFile(t, filepath.Join(dir, BitsDir, "live"+BitsExt), "bits")
}

func openT(t testing.TB, dir string) *Dir {
	t.Helper()
	d, err := Open(dir, nil)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return d
}

func closeT(t testing.TB, d *Dir) {
	t.Helper()
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// checkIs fails unless err matches every one of want.
func checkIs(t testing.TB, err error, want ...error) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", want)
	}
	for _, w := range want {
		if !errors.Is(err, w) {
			t.Fatalf("error %q does not match %v", err, w)
		}
	}
}
