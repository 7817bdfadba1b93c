package fsutil

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

func TestSyncDir(t *testing.T) {
	if err := SyncDir(t.TempDir()); err != nil {
		t.Fatalf("SyncDir of a directory: %v", err)
	}
	if err := SyncDir(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("SyncDir of a missing directory: %v, want fs.ErrNotExist", err)
	}
}

// errSyncer fails its sync and its close, to show which error wins.
type errSyncer struct{ sync, close error }

func (e errSyncer) Sync() error  { return e.sync }
func (e errSyncer) Close() error { return e.close }

func TestSyncDirWithErrors(t *testing.T) {
	errSync, errClose := errors.New("sync"), errors.New("close")
	open := func(s errSyncer) func(string) (errSyncer, error) {
		return func(string) (errSyncer, error) { return s, nil }
	}
	if err := SyncDirWith(open(errSyncer{sync: errSync, close: errClose}), "d"); err != errSync {
		t.Fatalf("sync and close fail: %v, want the sync error", err)
	}
	if err := SyncDirWith(open(errSyncer{close: errClose}), "d"); err != errClose {
		t.Fatalf("close fails: %v, want the close error", err)
	}
}

// Both ways to publish refuse to replace a file, leave both files as they
// were when they refuse, move the file when they succeed, and report a
// missing temporary file as fs.ErrNotExist.
func TestPublishDoesNotReplace(t *testing.T) {
	for name, pub := range map[string]func(string, string) error{"Publish": Publish, "LinkPublish": LinkPublish} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			tmp, dst := filepath.Join(dir, "tmp"), filepath.Join(dir, "dst")
			write(t, tmp, "new")
			write(t, dst, "old")
			if err := pub(tmp, dst); !errors.Is(err, fs.ErrExist) {
				t.Fatalf("publish over an existing file: %v, want fs.ErrExist", err)
			}
			if read(t, dst) != "old" || read(t, tmp) != "new" {
				t.Fatal("a refused publish changed the files")
			}
			if err := os.Remove(dst); err != nil {
				t.Fatal(err)
			}
			if err := pub(tmp, dst); err != nil {
				t.Fatal(err)
			}
			if names := entries(t, dir); !slices.Equal(names, []string{"dst"}) {
				t.Fatalf("directory holds %v after publishing, want [dst]", names)
			}
			if read(t, dst) != "new" {
				t.Fatal("published file has the wrong content")
			}
			if err := pub(tmp, filepath.Join(dir, "x")); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("publish of a missing file: %v, want fs.ErrNotExist", err)
			}
		})
	}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

// A pebble store on ModeFS has the modes asked for, its files and
// directories included, whatever pebble asks and the umask lets through.
func TestModeFS(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "store")
	db, err := pebble.Open(dir, &pebble.Options{FS: ModeFS(0o700, 0o600)})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("k"), []byte("v"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	n := 0
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		st, err := d.Info()
		if err != nil {
			return err
		}
		want := os.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s: mode %#o, want %#o", p, st.Mode().Perm(), want)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 4 {
		t.Fatalf("only %d paths in the store", n)
	}
}
