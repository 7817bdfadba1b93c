package kvbuf

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvbuf/kvbuf/internal/enginedir"
)

// TestOpenStepErrors breaks each step of the open path (open.go) in turn and
// checks that Open fails with the step's sentinel and a text naming the
// file or directory concerned, and leaves the directory openable once the
// damage is undone where it can be (the lock). The texts of the other
// steps' refusals are pinned by TestErrorTexts.
func TestOpenStepErrors(t *testing.T) {
	seen := func(dir string) string { return filepath.Join(dir, enginedir.BitsDir, "seen"+enginedir.BitsExt) }
	cases := []struct {
		step    string
		breakIt func(t *testing.T, dir string)
		want    error
		path    func(dir string) string // what the text must name
	}{
		{"2 directory: lock", func(t *testing.T, dir string) {
			errDB(t, dir, nil) // holds the lock until the test ends
		}, ErrLocked, func(dir string) string { return filepath.Join(dir, enginedir.LockName) }},
		{"3 store: missing under a ready manifest", func(t *testing.T, dir string) {
			if err := os.RemoveAll(filepath.Join(dir, enginedir.StoreDir)); err != nil {
				t.Fatal(err)
			}
		}, ErrCorruptDir, func(dir string) string { return dir }},
		{"4 keyspace catalog", func(t *testing.T, dir string) {
			setMeta(t, dir, enginedir.CatalogMeta, "users\n")
		}, ErrCorruptDir, func(dir string) string { return dir }},
		{"5 identity: engine id", func(t *testing.T, dir string) {
			setMeta(t, dir, enginedir.EngineIDMeta, "x")
		}, ErrCorruptDir, func(dir string) string { return dir }},
		{"5 identity: bitslice catalog", func(t *testing.T, dir string) {
			setMeta(t, dir, enginedir.BitsCatalogMeta, "x")
		}, ErrCorruptDir, func(dir string) string { return dir }},
		{"5 bitslices: a catalogued file missing", func(t *testing.T, dir string) {
			if err := os.Remove(seen(dir)); err != nil {
				t.Fatal(err)
			}
		}, ErrCorruptDir, seen},
		{"7 flusher: highest op record", func(t *testing.T, dir string) {
			setMeta(t, dir, enginedir.HighestOpMeta, "abc")
		}, ErrCorruptBlock, func(dir string) string { return dir }},
	}
	for _, c := range cases {
		t.Run(c.step, func(t *testing.T) {
			dir := t.TempDir()
			withEngine(t, dir)
			c.breakIt(t, dir)
			db, err := Open(dir, nil)
			if err == nil {
				_ = db.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, c.want) {
				t.Errorf("Open: %v, want %v", err, c.want)
			}
			if p := c.path(dir); !strings.Contains(err.Error(), p) {
				t.Errorf("Open: %q does not name %s", err, p)
			}
		})
	}
}
