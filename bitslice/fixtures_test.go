package bitslice

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// Regenerate with: go test ./bitslice -run TestFixtures -update
var update = flag.Bool("update", false, "rewrite testdata/bitslice fixtures")

const fixtureDir = "../testdata/bitslice"

// fixtureOnes is the set-bit pattern of valid.bits.
func fixtureBit(i uint64) bool { return i%3 == 0 && i%5 != 0 }

// makeFixtures builds every fixture image from scratch in dir.
func makeFixtures(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	f, err := Create(filepath.Join(dir, "valid.bits"), 300)
	if err != nil {
		t.Fatal(err)
	}
	for i := range uint64(300) {
		if fixtureBit(i) {
			if err := f.Set(i, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.SetWatermark(42)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	valid := readFile(t, f.Path())

	// torn: one more Sync (watermark 57, seq 3 in slot 0) whose header
	// write was torn after 32 bytes.
	g, err := Open(f.Path())
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Set(1, true); err != nil {
		t.Fatal(err)
	}
	g.SetWatermark(57)
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	torn := readFile(t, g.Path())
	copy(torn[32:64], bytes.Repeat([]byte{0xa5}, 32))

	badsum := bytes.Clone(valid)
	badsum[25] ^= 0x01 // length byte 1 in both slots, checksums unchanged
	badsum[slotStride+25] ^= 0x01
	badmagic := bytes.Clone(valid)
	copy(badmagic[0:], "NOTABITS")
	copy(badmagic[slotStride:], "NOTABITS")

	return map[string][]byte{
		"valid.bits":       valid,
		"torn.bits":        torn,
		"truncated.bits":   valid[:DataOffset+16],
		"badchecksum.bits": badsum,
		"badmagic.bits":    badmagic,
	}
}

func TestFixtures(t *testing.T) {
	images := makeFixtures(t, t.TempDir())
	if *update {
		writeFuzzCorpus(t, images)
	}
	for name, img := range images {
		path := filepath.Join(fixtureDir, name)
		if *update {
			if err := os.MkdirAll(fixtureDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, img, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if got := readFile(t, path); !bytes.Equal(got, img) {
			t.Errorf("%s differs from what the generator makes; rerun with -update if the format changed on purpose", path)
		}
	}

	var wantOnes uint64
	for i := range uint64(300) {
		if fixtureBit(i) {
			wantOnes++
		}
	}
	ok := map[string]Info{
		"valid.bits": {Version: 2, Len: 300, Ones: wantOnes, Watermark: 42, Seq: 2, Slot: 1, ValidSlots: 2, FileSize: DataOffset + 40},
		"torn.bits":  {Version: 2, Len: 300, Ones: wantOnes + 1, Watermark: 42, Seq: 2, Slot: 1, ValidSlots: 1, FileSize: DataOffset + 40},
	}
	bad := map[string]string{
		"truncated.bits":   "truncated: file is 4112 bytes, header (seq 2) says 300 bits, which needs 4136 bytes",
		"badchecksum.bits": "no valid header slot (slot 0: bad checksum",
		"badmagic.bits":    `no valid header slot (slot 0: bad magic "NOTABITS"`,
	}
	for name := range images {
		path := filepath.Join(fixtureDir, name)
		info, err := ReadInfo(path)
		if want, isOK := ok[name]; isOK {
			want.Path = path
			if err != nil || info != want {
				t.Errorf("ReadInfo(%s) = %+v, %v; want %+v", name, info, err, want)
			}
			continue
		}
		if !errors.Is(err, kverr.ErrCorruptBits) || !strings.Contains(err.Error(), bad[name]) {
			t.Errorf("ReadInfo(%s): %v; want ErrCorrupt saying %q", name, err, bad[name])
		}
	}
	// Open agrees with ReadInfo (on a copy: Open takes a write lock).
	cp := filepath.Join(t.TempDir(), "valid.bits")
	writeFile(t, cp, readFile(t, filepath.Join(fixtureDir, "valid.bits")))
	f, err := Open(cp)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := range uint64(300) {
		if f.Get(i) != fixtureBit(i) {
			t.Fatalf("valid.bits bit %d = %v", i, f.Get(i))
		}
	}
	if f.Watermark() != 42 {
		t.Fatalf("valid.bits watermark %d", f.Watermark())
	}
}

// A version-1 file (written before owners and generations existed, kept in
// testdata/bitslice/v1) reads with owner and generation 0, and its first
// Sync rewrites its header as version 2 with what was staged.
func TestVersion1File(t *testing.T) {
	src := filepath.Join(fixtureDir, "v1", "valid.bits")
	info, err := ReadInfo(src)
	if err != nil {
		t.Fatal(err)
	}
	if info.Version != 1 || info.Owner != 0 || info.Gen != 0 || info.Watermark != 42 || info.Len != 300 {
		t.Fatalf("ReadInfo(v1) = %+v", info)
	}
	cp := filepath.Join(t.TempDir(), "valid.bits")
	writeFile(t, cp, readFile(t, src))
	f, err := Open(cp)
	if err != nil {
		t.Fatal(err)
	}
	if f.Owner() != 0 || f.Gen() != 0 || f.Info().Version != 1 {
		t.Fatalf("opened v1: owner %d gen %d %+v", f.Owner(), f.Gen(), f.Info())
	}
	f.SetOwner(7)
	f.SetGen(3)
	f.SetGen(2) // lower: ignored
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	info, err = ReadInfo(cp)
	if err != nil {
		t.Fatal(err)
	}
	if info.Version != 2 || info.Owner != 7 || info.Gen != 3 || info.Watermark != 42 || info.Len != 300 {
		t.Fatalf("after Sync: %+v, want version 2, owner 7, gen 3, watermark 42", info)
	}
	g, err := Open(cp)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for i := range uint64(300) {
		if g.Get(i) != fixtureBit(i) {
			t.Fatalf("bit %d = %v after the upgrade", i, g.Get(i))
		}
	}
}

// A new generation or owner with the watermark unchanged is recorded by
// Sync (one header write); with nothing new Sync writes no header.
func TestSyncRecordsGenAndOwner(t *testing.T) {
	f, err := CreateOwned(filepath.Join(t.TempDir(), "o.bits"), 100, 11)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Owner() != 11 || f.Gen() != 0 {
		t.Fatalf("created: owner %d gen %d", f.Owner(), f.Gen())
	}
	seq := f.Info().Seq
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if f.Info().Seq != seq {
		t.Fatal("Sync with nothing new wrote a header")
	}
	if err := f.Set(5, true); err != nil {
		t.Fatal(err)
	}
	f.SetGen(4)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	info := f.Info()
	if info.Seq != seq+1 || info.Gen != 4 || info.Owner != 11 || info.Watermark != 0 {
		t.Fatalf("after SetGen(4): %+v", info)
	}
	if err := f.Grow(1000); err != nil {
		t.Fatal(err)
	}
	if info, err := ReadInfo(f.Path()); err != nil || info.Gen != 4 || info.Owner != 11 || info.Len != 1000 || info.Ones != 1 {
		t.Fatalf("after Grow: %+v, %v", info, err)
	}
}
