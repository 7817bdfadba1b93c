package kvbuf

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvbuf/kvbuf/internal/enginedir"
)

// hostOpApply applies op n of a deterministic host log: a batch that puts
// a key, deletes another and sets and clears bits, so that every op
// matters to the final state.
func hostOpApply(ctx context.Context, db *DB, n uint64) error {
	k, err := db.KV("docs")
	if err != nil {
		return err
	}
	b, err := db.Bits("live")
	if err != nil {
		return err
	}
	return db.Update(ctx, n, func(bt *Batch) error {
		bt.Put(k, fmt.Appendf(nil, "k%02d", n%40), fmt.Appendf(nil, "v%d", n))
		bt.Delete(k, fmt.Appendf(nil, "k%02d", (n*7)%40))
		bt.Set(b, n%500, n%3 != 0)
		return nil
	})
}

// stateOf is engineState without the watermark and the bitslices'
// lengths (a length is the highest bit ever written or the file's length,
// which a replay onto a copy need not reproduce).
func stateOf(t *testing.T, db *DB) string {
	t.Helper()
	s := engineState(t, db)
	s = s[strings.Index(s, " ")+1:]
	return regexp.MustCompile(` len=\d+`).ReplaceAllString(s, "")
}

// TestCheckpointUnderLoad (issue 20): a checkpoint taken while writers and
// flushes run opens as an engine of its own whose watermark ties it to the
// host's log: replaying the log from its watermark + 1 gives exactly the
// state of the engine it was taken from.
func TestCheckpointUnderLoad(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, &Options{FlushInterval: time.Millisecond})
	var mu sync.Mutex // the host's log lock: numbers ops in order
	var next uint64   // the last op logged and applied
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				next++
				n := next
				err := hostOpApply(ctx, db, n)
				mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	logged := func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		return next
	}
	for logged() < 200 {
		time.Sleep(time.Millisecond)
	}
	cp := filepath.Join(t.TempDir(), "a", "cp")
	wm, err := db.Checkpoint(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	for logged() < wm+200 {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	want := stateOf(t, db)
	last := logged()
	closeT(t, db)

	c := openT(t, cp, nil)
	if got := c.Watermark(); got != wm {
		t.Fatalf("checkpoint opens at watermark %d, Checkpoint returned %d", got, wm)
	}
	for n := wm + 1; n <= last; n++ {
		if err := hostOpApply(ctx, c, n); err != nil {
			t.Fatalf("replay of op %d: %v", n, err)
		}
	}
	if got := stateOf(t, c); got != want {
		t.Fatalf("checkpoint + replay from %d:\n%s\nwant\n%s", wm+1, got, want)
	}
	closeT(t, c)
	t.Logf("checkpoint at watermark %d, %d ops in all", wm, last)
}

// The checkpoint is an engine of its own: its id differs, so a bitslice
// file moved between the two is foreign; writes to either do not reach
// the other.
func TestCheckpointIsIndependent(t *testing.T) {
	dir := newEngineDir(t)
	db := openT(t, dir, nil)
	cp := filepath.Join(t.TempDir(), "cp")
	wm, err := db.Checkpoint(ctx, cp)
	if err != nil || wm != 2 {
		t.Fatalf("Checkpoint = %d, %v; want 2", wm, err)
	}
	mustPut(t, mustKV(t, db, "k"), "only-original", "1", 3)
	closeT(t, db)
	c := openT(t, cp, nil)
	wantGet(t, mustKV(t, c, "k"), "a", "1")
	wantGet(t, mustKV(t, c, "k"), "only-original", "")
	wantBit(t, mustBits(t, c, "b"), 3, true)
	mustSet(t, mustBits(t, c, "b"), 9, true, 3)
	closeT(t, c)
	db = openT(t, dir, nil)
	wantBit(t, mustBits(t, db, "b"), 9, false)
	closeT(t, db)
	bits := func(d string) string { return filepath.Join(d, enginedir.BitsDir, "b"+enginedir.BitsExt) }
	writeFile(t, bits(dir), readFileT(t, bits(cp)))
	wantOpenCorrupt(t, dir, "belongs to another engine")
}

// Bad destinations are refused, and nothing is left behind.
func TestCheckpointRefusals(t *testing.T) {
	dir := newEngineDir(t)
	db := openT(t, dir, nil)
	other := newEngineDir(t)
	foreign := t.TempDir()
	writeFile(t, filepath.Join(foreign, "precious.txt"), []byte("x"))
	cases := []struct {
		name string
		dir  string
		want error
	}{
		{"an engine directory", other, fs.ErrExist},
		{"a foreign directory", foreign, ErrNotEngine},
		{"the engine's own directory", dir, ErrLocked},
	}
	for _, c := range cases {
		before := hashTree(t, c.dir, enginedir.StoreDir)
		if _, err := db.Checkpoint(ctx, c.dir); !errors.Is(err, c.want) {
			t.Errorf("Checkpoint to %s: %v, want %v", c.name, err, c.want)
		}
		if hashTree(t, c.dir, enginedir.StoreDir) != before {
			t.Errorf("Checkpoint to %s changed it: %v", c.name, listTree(c.dir))
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	target := filepath.Join(t.TempDir(), "cp")
	if _, err := db.Checkpoint(cancelled, target); !errors.Is(err, context.Canceled) {
		t.Errorf("Checkpoint with a cancelled context: %v", err)
	}
	closeT(t, db)
	if _, err := db.Checkpoint(ctx, target); !errors.Is(err, ErrClosed) {
		t.Errorf("Checkpoint after Close: %v", err)
	}
	if _, err := os.Stat(target); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("refused checkpoints left %s: %v", target, err)
	}
	// An empty directory is a fine destination.
	db = openT(t, dir, nil)
	defer closeT(t, db)
	empty := t.TempDir()
	if _, err := db.Checkpoint(ctx, empty); err != nil {
		t.Fatal(err)
	}
	c := openT(t, empty, nil)
	wantGet(t, mustKV(t, c, "k"), "a", "1")
	closeT(t, c)
}
