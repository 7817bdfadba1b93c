package kvbuf

// Issue 20, "nothing silently lost": every bitslice is recorded in the
// engine's catalog with the engine id, its length and the write generation
// of its last flush, so that a missing, older or foreign file fails Open
// with ErrCorrupt (and changes nothing) instead of losing bits without a
// word.

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/internal/enginedir"
)

// bitsEngine makes an engine with bitslice "load": ops 1..n set bit op*7 as
// batches, flushing every 500 ops; it returns the directory, closed.
func bitsEngine(t *testing.T, n uint64) string {
	t.Helper()
	dir := t.TempDir()
	growBits(t, dir, 1, n)
	return dir
}

// growBits applies ops from..to to the engine in dir (see bitsEngine).
func growBits(t *testing.T, dir string, from, to uint64) {
	t.Helper()
	db := openT(t, dir, &Options{FlushInterval: -1})
	b := mustBits(t, db, "load")
	for op := from; op <= to; op++ {
		if err := db.Update(ctx, op, func(bt *Batch) error { bt.Set(b, op*7, true); return nil }); err != nil {
			t.Fatal(err)
		}
		if op%500 == 0 {
			mustFlush(t, db)
		}
	}
	closeT(t, db)
}

// wantOpenCorrupt checks that Open of dir fails with ErrCorrupt saying
// want, and changes nothing in the directory.
func wantOpenCorrupt(t *testing.T, dir, want string) {
	t.Helper()
	before, dump := hashTree(t, dir, enginedir.StoreDir), storeDump(t, dir)
	db, err := Open(dir, nil)
	if err == nil {
		closeT(t, db)
		t.Fatalf("Open succeeded, want ErrCorrupt saying %q", want)
	}
	if !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotEngine) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open: %v, want ErrCorrupt saying %q", err, want)
	}
	if hashTree(t, dir, enginedir.StoreDir) != before || storeDump(t, dir) != dump {
		t.Fatalf("the refused Open changed the directory: %v", listTree(dir))
	}
}

func loadBits(dir string) string {
	return filepath.Join(dir, enginedir.BitsDir, "load"+enginedir.BitsExt)
}

// After `kvtool load -n 2000 e1` and `rm e1/bits/load.bits`, the engine
// opened, and the next DB.Bits("load") recreated the bitslice empty while
// the watermark said nothing needed replaying.
func TestMissingBitsliceIsCorrupt(t *testing.T) {
	dir := bitsEngine(t, 2000)
	if err := os.Remove(loadBits(dir)); err != nil {
		t.Fatal(err)
	}
	wantOpenCorrupt(t, dir, `bitslice "load" is in the engine's catalog`)
}

// An older copy of the same file (header watermark 3000, engine at 5000)
// was accepted and 133 bits came back wrong. With ops tracked or not.
func TestOlderBitsliceCopyIsCorrupt(t *testing.T) {
	dir := bitsEngine(t, 3000)
	old, err := os.ReadFile(loadBits(dir))
	if err != nil {
		t.Fatal(err)
	}
	growBits(t, dir, 3001, 5000)
	writeFile(t, loadBits(dir), old)
	wantOpenCorrupt(t, dir, "an older copy")

	// A host that tracks no ops: the watermark stays 0, the generation
	// still tells the copies apart.
	dir = t.TempDir()
	db := openT(t, dir, &Options{FlushInterval: -1})
	b := mustBits(t, db, "load")
	mustSet(t, b, 1, true, 0)
	mustFlush(t, db)
	closeT(t, db)
	old, err = os.ReadFile(loadBits(dir))
	if err != nil {
		t.Fatal(err)
	}
	db = openT(t, dir, &Options{FlushInterval: -1})
	mustSet(t, mustBits(t, db, "load"), 2, true, 0)
	closeT(t, db)
	writeFile(t, loadBits(dir), old)
	wantOpenCorrupt(t, dir, "an older copy")
}

// A .bits file of another engine was adopted, under its own name or under
// the name of one of this engine's bitslices.
func TestForeignBitsliceIsCorrupt(t *testing.T) {
	other := bitsEngine(t, 10)
	foreign, err := os.ReadFile(loadBits(other))
	if err != nil {
		t.Fatal(err)
	}
	dir := bitsEngine(t, 10)
	writeFile(t, filepath.Join(dir, enginedir.BitsDir, "extra"+enginedir.BitsExt), foreign)
	wantOpenCorrupt(t, dir, `bitslice "extra": the file belongs to another engine`)
	if err := os.Remove(filepath.Join(dir, enginedir.BitsDir, "extra"+enginedir.BitsExt)); err != nil {
		t.Fatal(err)
	}
	writeFile(t, loadBits(dir), foreign)
	wantOpenCorrupt(t, dir, `bitslice "load": the file belongs to another engine`)

	// A standalone file (no owner), or one of format 1, is not the
	// engine's either.
	standalone := filepath.Join(t.TempDir(), "s.bits")
	f, err := bitslice.Create(standalone, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	dir = bitsEngine(t, 10)
	writeFile(t, filepath.Join(dir, enginedir.BitsDir, "s"+enginedir.BitsExt), readFileT(t, standalone))
	wantOpenCorrupt(t, dir, "belongs to another engine (owner 0000000000000000")
	dir = bitsEngine(t, 10)
	writeFile(t, filepath.Join(dir, enginedir.BitsDir, "v1"+enginedir.BitsExt), readFileT(t, "testdata/bitslice/v1/valid.bits"))
	wantOpenCorrupt(t, dir, `bitslice "v1": a format-1 file this engine never had`)
}

// A shorter file than the catalog records (a truncated restore) is refused.
func TestShorterBitsliceIsCorrupt(t *testing.T) {
	dir := bitsEngine(t, 10)
	f, err := bitslice.Open(loadBits(dir))
	if err != nil {
		t.Fatal(err)
	}
	info := f.Info()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// A copy made by another engine state with the same generation but
	// fewer bits: rebuild the file at a smaller length with the same owner
	// and generation.
	short := filepath.Join(t.TempDir(), "short.bits")
	g, err := bitslice.CreateOwned(short, info.Len-64, info.Owner)
	if err != nil {
		t.Fatal(err)
	}
	g.SetGen(info.Gen)
	if err := errors.Join(g.Sync(), g.Close()); err != nil {
		t.Fatal(err)
	}
	writeFile(t, loadBits(dir), readFileT(t, short))
	wantOpenCorrupt(t, dir, "bits long, the engine recorded")
}

// A bitslice the engine created and no flush recorded (a crash right after
// DB.Bits) is the engine's own: adopted at Open, and recorded by the next
// flush, after which its loss is caught like any other.
func TestUnrecordedOwnBitsliceAdopted(t *testing.T) {
	dir := bitsEngine(t, 10)
	db := openT(t, dir, &Options{FlushInterval: -1})
	mustBits(t, db, "young")
	crashed := crashCopy(t, dir)
	closeT(t, db)
	db = openT(t, crashed, &Options{FlushInterval: -1})
	if got := strings.Join(db.Bitslices(), ","); got != "load,young" {
		t.Fatalf("Bitslices %s, want load,young", got)
	}
	mustSet(t, mustBits(t, db, "young"), 5, true, 11)
	closeT(t, db)
	if err := os.Remove(filepath.Join(crashed, enginedir.BitsDir, "young"+enginedir.BitsExt)); err != nil {
		t.Fatal(err)
	}
	wantOpenCorrupt(t, crashed, `bitslice "young" is in the engine's catalog`)
}

// An engine of format 1 (kvbuf before engine ids: the committed fixture
// testdata/engine-v1, made by `kvtool load -n 400 -seed 7` then) opens:
// its bitslices are catalogued as they are and stamped with a new engine
// id, its manifest says format 2, its data is intact; from then on a lost
// file is caught.
func TestFormat1EngineUpgraded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "e")
	if err := copyDir("cmd/kvtool/testdata/engine-v1", dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, enginedir.LockName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	info, err := bitslice.ReadInfo(filepath.Join(dir, enginedir.BitsDir, "live.bits"))
	if err != nil || info.Version != 1 {
		t.Fatalf("fixture bitslice: %+v, %v; want version 1", info, err)
	}
	db := openT(t, dir, nil)
	live := mustBits(t, db, "live")
	n, _ := live.Count()
	if n != info.Ones || db.Watermark() != 400 {
		t.Fatalf("after the upgrade: %d bits set (want %d), watermark %d (want 400)", n, info.Ones, db.Watermark())
	}
	users := mustKV(t, db, "users")
	before := scan(t, users, nil)
	closeT(t, db)
	if b, err := os.ReadFile(filepath.Join(dir, enginedir.ManifestName)); err != nil || string(b) != manifestReadyText {
		t.Fatalf("manifest after the upgrade: %q, %v", b, err)
	}
	up, err := bitslice.ReadInfo(filepath.Join(dir, enginedir.BitsDir, "live.bits"))
	if err != nil || up.Version != 2 || up.Owner == 0 || up.Ones != info.Ones {
		t.Fatalf("bitslice after the upgrade: %+v, %v", up, err)
	}
	db = openT(t, dir, nil)
	if got := scan(t, mustKV(t, db, "users"), nil); strings.Join(got, ",") != strings.Join(before, ",") {
		t.Fatal("keyspace changed across the upgrade")
	}
	closeT(t, db)
	if err := os.Remove(filepath.Join(dir, enginedir.BitsDir, "live.bits")); err != nil {
		t.Fatal(err)
	}
	wantOpenCorrupt(t, dir, `bitslice "live" is in the engine's catalog`)
}

// Issue 20: store/ and bits/ with an empty, garbage or missing KVBUF was
// ErrNotEngine, so a host's "restore on corrupt" branch never ran.
func TestDamagedManifestIsCorrupt(t *testing.T) {
	for _, m := range []*[]byte{nil, ptrTo([]byte{}), ptrTo([]byte("\x00garbage\n"))} {
		dir := newEngineDir(t)
		p := filepath.Join(dir, enginedir.ManifestName)
		if m == nil {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		} else {
			writeFile(t, p, *m)
		}
		_, err := Open(dir, nil)
		if !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotEngine) {
			t.Fatalf("Open with manifest %q: %v, want ErrCorrupt (not ErrNotEngine)", bytesOrNil(m), err)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

func bytesOrNil(b *[]byte) []byte {
	if b == nil {
		return []byte("<none>")
	}
	return *b
}

func readFileT(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(b)
}
