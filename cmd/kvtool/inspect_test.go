package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/internal/enginedir"
	"github.com/kvbuf/kvbuf/internal/kverr"
	"github.com/kvbuf/kvbuf/storage"
)

// setCatalogMeta overwrites the keyspace catalog of the engine in dir.
func setCatalogMeta(t *testing.T, dir, catalog string) {
	t.Helper()
	st, err := storage.Open(filepath.Join(dir, enginedir.StoreDir), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := st.NewBatch()
	b.SetMeta(enginedir.CatalogMeta, []byte(catalog))
	if err := errors.Join(st.Apply(b), st.Close()); err != nil {
		t.Fatal(err)
	}
}

func TestInspectKeyspaces(t *testing.T) {
	dir := copyFixture(t)
	setCatalogMeta(t, dir, "users 1\nevents 4\n@dropped 2\n@dropped 3\n@next 6\n")
	code, out, errOut := runCLI(t, "inspect", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"keyspaces:         2\n",
		"  events:          id 4\n",
		"  users:           id 1\n",
		"dropped keyspaces: 2 awaiting deletion (ids 2, 3)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out)
		}
	}
	e := inspectJSONOf(t, dir)
	want := []keyspaceJSON{{"events", 4}, {"users", 1}}
	if !slices.Equal(e.Keyspaces, want) || !slices.Equal(e.DroppedKeyspaces, []uint32{2, 3}) {
		t.Errorf("inspect --json: keyspaces %v, dropped %v", e.Keyspaces, e.DroppedKeyspaces)
	}
}

func TestInspectCorruptCatalog(t *testing.T) {
	dir := copyFixture(t)
	setCatalogMeta(t, dir, "users 1\nevents 1\n")
	code, out, errOut := runCLI(t, "inspect", dir)
	checkError(t, code, out, errOut, "keyspace catalog")
	if !strings.Contains(errOut, kverr.Trim(kvbuf.ErrCorruptDir.Error())) {
		t.Errorf("stderr %q does not say the directory is corrupt", errOut)
	}
}

func TestInspectUnfinishedInitialisation(t *testing.T) {
	// In progress: an engine directory package holds it, mid-initialisation.
	dir := filepath.Join(t.TempDir(), "e")
	d, err := enginedir.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"inspect", dir}, {"flush", dir}} {
		code, out, errOut := runCLI(t, args...)
		checkError(t, code, out, errOut, "engine initialisation is in progress")
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	// Interrupted after the manifest was written.
	code, out, errOut := runCLI(t, "inspect", dir)
	checkError(t, code, out, errOut, "engine initialisation was interrupted (format 2)")
	// Interrupted before: only kvbuf's LOCK is there.
	dir = t.TempDir()
	write(t, filepath.Join(dir, enginedir.LockName), "kvbuf engine lock\n")
	code, out, errOut = runCLI(t, "inspect", dir)
	checkError(t, code, out, errOut, "engine initialisation was interrupted (before its manifest was written)")
	// A lone LOCK that kvbuf did not write is foreign.
	write(t, filepath.Join(dir, enginedir.LockName), "")
	code, out, errOut = runCLI(t, "inspect", dir)
	checkError(t, code, out, errOut, "not a kvbuf directory")
}

// inspect pointed at a kvraft node's data directory (instead of its engine
// directory) says which directory to inspect.
func TestInspectKvraftDataDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "IDENTITY"), []byte("kvraft data directory\ncluster 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"log", "engine-00000000000000000042", "engine-00000000000000000050.staging"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr strings.Builder
	code := runInspect(context.Background(), []string{dir}, &stdout, &stderr)
	want := "kvtool inspect: " + dir + " is a kvraft node's data directory, not an engine directory: inspect " + filepath.Join(dir, "engine-00000000000000000042") + "\n"
	if code != 1 || stderr.String() != want {
		t.Fatalf("inspect of a kvraft data directory: exit %d, %q; want 1, %q", code, stderr.String(), want)
	}
}

// TestDirSizeMovingDirectory: inspect sums the sizes of a directory that a
// running engine may be changing (a locked engine's store deletes obsolete
// files at any time); files and directories removed during the walk are
// skipped, never an error (CI once failed TestLockedEngine on an OPTIONS
// file pebble removed between the walk's read of the directory and its
// stat).
func TestDirSizeMovingDirectory(t *testing.T) {
	dir := t.TempDir()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			sub := filepath.Join(dir, fmt.Sprintf("d%d", i%4))
			_ = os.MkdirAll(sub, 0o755)
			for j := range 8 {
				_ = os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%d", j)), []byte("x"), 0o644)
			}
			_ = os.RemoveAll(sub)
		}
	}()
	deadline := time.Now().Add(300 * time.Millisecond)
	walks := 0
	for ; time.Now().Before(deadline) || walks < 100; walks++ {
		if _, err := dirSize(dir); err != nil {
			close(stop)
			<-done
			t.Fatalf("walk %d of a changing directory: %v", walks, err)
		}
	}
	close(stop)
	<-done
	if _, err := dirSize(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("dirSize of a missing directory: no error")
	}
}
