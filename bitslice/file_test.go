package bitslice

import (
	"bytes"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

func TestCreateOpenRoundTrip(t *testing.T) {
	f := create(t, 1000)
	if f.Len() != 1000 || f.CountOnes() != 0 || f.Watermark() != 0 {
		t.Fatalf("new file: Len %d, ones %d, watermark %d", f.Len(), f.CountOnes(), f.Watermark())
	}
	set := []uint64{0, 1, 63, 64, 500, 998, 999}
	for _, i := range set {
		if err := f.Set(i, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Set(500, false); err != nil {
		t.Fatal(err)
	}
	f.SetWatermark(7)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	g := reopen(t, f)
	want := map[uint64]bool{0: true, 1: true, 63: true, 64: true, 998: true, 999: true}
	for i := uint64(0); i < 1000; i++ {
		if g.Get(i) != want[i] {
			t.Errorf("Get(%d) = %v after reopen, want %v", i, g.Get(i), want[i])
		}
	}
	if g.Len() != 1000 || g.CountOnes() != 6 || g.Watermark() != 7 {
		t.Fatalf("reopened: Len %d, ones %d, watermark %d; want 1000, 6, 7", g.Len(), g.CountOnes(), g.Watermark())
	}
	if w := g.Word(0); w != 1|1<<1|1<<63 {
		t.Errorf("Word(0) = %#x", w)
	}
	if st, err := os.Stat(g.Path()); err != nil || st.Size() != DataOffset+16*8 {
		t.Errorf("file size %v (%v), want %d", st.Size(), err, DataOffset+16*8)
	}
}

func TestCreateZeroBits(t *testing.T) {
	f := create(t, 0)
	if f.Len() != 0 || f.Get(0) || f.Word(0) != 0 || f.CountOnes() != 0 {
		t.Fatal("empty file is not empty")
	}
	if err := f.Set(0, true); !errors.Is(err, kverr.ErrOutOfRange) {
		t.Fatalf("Set(0) on empty file: %v, want ErrOutOfRange", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Grow(100); err != nil {
		t.Fatal(err)
	}
	if err := f.Set(99, true); err != nil {
		t.Fatal(err)
	}
	g := reopen(t, f)
	if g.Len() != 100 || !g.Get(99) || g.CountOnes() != 1 {
		t.Fatalf("after grow from 0 and reopen: Len %d, Get(99) %v, ones %d", g.Len(), g.Get(99), g.CountOnes())
	}
}

func TestCreateRefusesExistingPath(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.bits")
	writeFile(t, path, []byte("precious"))
	if _, err := Create(path, 10); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Create over an existing file: %v, want fs.ErrExist", err)
	}
	if got := readFile(t, path); string(got) != "precious" {
		t.Fatalf("existing file changed to %q", got)
	}
	assertOnlyFiles(t, dir, "x.bits")
}

func TestCreateErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "big.bits")
	if _, err := Create(path, MaxBits+1); !errors.Is(err, kverr.ErrOutOfRange) {
		t.Fatalf("Create(MaxBits+1): %v, want ErrOutOfRange", err)
	}
	if _, err := Create(path, math.MaxUint64); !errors.Is(err, kverr.ErrOutOfRange) {
		t.Fatalf("Create(MaxUint64): %v, want ErrOutOfRange", err)
	}
	if _, err := Create(filepath.Join(dir, "missing", "x.bits"), 10); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Create in a missing directory: %v, want fs.ErrNotExist", err)
	}
	assertOnlyFiles(t, dir)
}

// assertOnlyFiles fails if dir holds anything but names (no temporaries left).
func assertOnlyFiles(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Fatalf("directory holds %q, want %q", got, names)
	}
}

func TestCreatedFileIsNotSparse(t *testing.T) {
	f := create(t, 1<<20)
	if err := f.Grow(1 << 23); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(f.Path())
	if err != nil {
		t.Fatal(err)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		t.Skip("no block count on this platform")
	}
	if alloc := sys.Blocks * 512; alloc < st.Size() {
		t.Fatalf("file of %d bytes has only %d bytes allocated: sparse", st.Size(), alloc)
	}
}

func TestGetSetBounds(t *testing.T) {
	f := create(t, 130)
	for _, i := range []uint64{130, 131, 191, 192, 1 << 40, math.MaxUint64} {
		if f.Get(i) {
			t.Errorf("Get(%d) = true past Len", i)
		}
		if err := f.Set(i, true); !errors.Is(err, kverr.ErrOutOfRange) || !strings.Contains(err.Error(), f.Path()) {
			t.Errorf("Set(%d): %v, want ErrOutOfRange naming the path", i, err)
		}
	}
	for _, w := range []uint64{3, 4, math.MaxUint64} {
		if f.Word(w) != 0 {
			t.Errorf("Word(%d) != 0 past the end", w)
		}
	}
	if f.CountOnes() != 0 {
		t.Fatal("out-of-range Set wrote something")
	}
	if err := f.Set(129, true); err != nil {
		t.Fatal(err)
	}
	if !f.Get(129) || f.Word(2) != 2 {
		t.Fatalf("last bit: Get %v, Word(2) %#x", f.Get(129), f.Word(2))
	}
}

// A corrupt tail (bits set past Len in the last word, stale words past the
// end) must be invisible to reads and cleared by Grow.
func TestStaleTailIsIgnoredAndClearedByGrow(t *testing.T) {
	f := create(t, 70)
	if err := f.Set(69, true); err != nil {
		t.Fatal(err)
	}
	path := f.Path()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	img := readFile(t, path)
	for i := DataOffset + 8; i < len(img); i++ { // word 1 holds bits 64..127
		img[i] |= 0xc0
	}
	img = append(img, bytes.Repeat([]byte{0xff}, 16)...) // two stale words past the end
	writeFile(t, path, img)

	g, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.Get(70) || g.Get(127) || g.Word(1) != 1<<5 || g.CountOnes() != 1 {
		t.Fatalf("stale bits visible: Get(70) %v, Word(1) %#x, ones %d", g.Get(70), g.Word(1), g.CountOnes())
	}
	if info, err := ReadInfo(path); err != nil || info.Ones != 1 {
		t.Fatalf("ReadInfo: %+v, %v; want 1 set bit", info, err)
	}
	if err := g.Grow(256); err != nil {
		t.Fatal(err)
	}
	if g.CountOnes() != 1 || !g.Get(69) {
		t.Fatalf("after Grow: %d set bits, Get(69) %v; want only bit 69", g.CountOnes(), g.Get(69))
	}
	for i := uint64(70); i < 256; i++ {
		if g.Get(i) {
			t.Fatalf("bit %d set after Grow", i)
		}
	}
}

func TestApplyWords(t *testing.T) {
	f := create(t, 130) // words 0, 1 full; word 2 holds bits 128, 129
	err := f.ApplyWords([]WordChange{
		{Word: 0, Mask: 0xff, Bits: 0x0f},
		{Word: 0, Mask: 0x01, Bits: 0},
		{Word: 2, Mask: 0b11, Bits: 0b10},
	})
	if err != nil {
		t.Fatal(err)
	}
	if f.Word(0) != 0x0e || f.Word(2) != 0b10 || !f.Get(129) || f.Get(128) {
		t.Fatalf("Word(0) %#x, Word(2) %#x", f.Word(0), f.Word(2))
	}
	// Bits outside Mask are left alone, whatever Bits says.
	if err := f.ApplyWords([]WordChange{{Word: 0, Mask: 0x10, Bits: ^uint64(0)}}); err != nil || f.Word(0) != 0x1e {
		t.Fatalf("masked apply: %v, Word(0) %#x, want 0x1e", err, f.Word(0))
	}
	for name, bad := range map[string][]WordChange{
		"word past end":      {{Word: 3, Mask: 1, Bits: 1}},
		"mask past Len":      {{Word: 1, Mask: 1, Bits: 1}, {Word: 2, Mask: 0b100, Bits: 0b100}},
		"unsorted":           {{Word: 1, Mask: 1, Bits: 1}, {Word: 0, Mask: 1, Bits: 1}},
		"huge word":          {{Word: math.MaxUint64, Mask: 1, Bits: 1}},
		"bits past Len only": {{Word: 2, Mask: ^uint64(0), Bits: 0}},
	} {
		if err := f.ApplyWords(bad); !errors.Is(err, kverr.ErrOutOfRange) {
			t.Errorf("%s: %v, want ErrOutOfRange", name, err)
		}
		if f.Word(0) != 0x1e || f.Word(1) != 0 || f.Word(2) != 0b10 {
			t.Errorf("%s: failed ApplyWords wrote words", name)
		}
	}
}

// ApplyMasked is ApplyWords for a run of consecutive words: every word
// whose mask is set changes (bits outside the mask left alone), a word
// whose mask is 0 is not touched, and a run past the end, a mask over the
// bits past Len, or bits and masks of different lengths fail with
// ErrOutOfRange before any word is written (mutation 260).
func TestApplyMasked(t *testing.T) {
	f := create(t, 130) // words 0, 1 full; word 2 holds bits 128, 129
	if err := f.Set(64, true); err != nil {
		t.Fatal(err)
	}
	err := f.ApplyMasked(0, []uint64{0xff, 0, 0b11}, []uint64{0x0f | 1<<40, ^uint64(0), 0b10})
	if err != nil {
		t.Fatal(err)
	}
	if f.Word(0) != 0x0f || f.Word(1) != 1 || f.Word(2) != 0b10 {
		t.Fatalf("Word(0) %#x, Word(1) %#x, Word(2) %#x; want 0xf, 0x1, 0x2", f.Word(0), f.Word(1), f.Word(2))
	}
	if err := f.ApplyMasked(1, []uint64{1}, []uint64{0}); err != nil || f.Word(1) != 0 {
		t.Fatalf("one word from word 1: %v, Word(1) %#x, want 0", err, f.Word(1))
	}
	if err := f.ApplyMasked(3, nil, nil); err != nil {
		t.Fatalf("an empty run at the end: %v", err)
	}
	for name, bad := range map[string]struct {
		first      uint64
		mask, bits []uint64
	}{
		"run past end":       {2, []uint64{1, 1}, []uint64{1, 1}},
		"first past end":     {4, nil, nil},
		"huge first":         {math.MaxUint64, []uint64{1}, []uint64{1}},
		"mask past Len":      {1, []uint64{1, 0b100}, []uint64{1, 0b100}},
		"bits past Len only": {2, []uint64{^uint64(0)}, []uint64{0}},
		"lengths differ":     {0, []uint64{1, 1}, []uint64{1}},
	} {
		if err := f.ApplyMasked(bad.first, bad.mask, bad.bits); !errors.Is(err, kverr.ErrOutOfRange) {
			t.Errorf("%s: %v, want ErrOutOfRange", name, err)
		}
		if f.Word(0) != 0x0f || f.Word(1) != 0 || f.Word(2) != 0b10 {
			t.Errorf("%s: failed ApplyMasked wrote words", name)
		}
	}
}

// WriteWords stores whole words with pwrite, which the mapping shares:
// reads through the file see them at once, the file's set bits count
// them, and a run past the end or a last word with bits past Len fails
// with ErrOutOfRange before anything is written.
func TestWriteWords(t *testing.T) {
	f := create(t, 130) // words 0, 1 full; word 2 holds bits 128, 129
	if err := f.WriteWords(1, []uint64{0xf0, 0b10}); err != nil {
		t.Fatal(err)
	}
	if f.Word(0) != 0 || f.Word(1) != 0xf0 || f.Word(2) != 0b10 || f.CountOnes() != 5 {
		t.Fatalf("Word(0) %#x, Word(1) %#x, Word(2) %#x, %d ones; want 0, 0xf0, 0x2, 5", f.Word(0), f.Word(1), f.Word(2), f.CountOnes())
	}
	if err := f.WriteWords(3, nil); err != nil {
		t.Fatalf("an empty run at the end: %v", err)
	}
	for name, bad := range map[string]struct {
		first uint64
		words []uint64
	}{
		"run past end":   {2, []uint64{1, 1}},
		"first past end": {4, nil},
		"huge first":     {math.MaxUint64, []uint64{1}},
		"bits past Len":  {1, []uint64{1, 0b100}},
	} {
		if err := f.WriteWords(bad.first, bad.words); !errors.Is(err, kverr.ErrOutOfRange) {
			t.Errorf("%s: %v, want ErrOutOfRange", name, err)
		}
		if f.Word(0) != 0 || f.Word(1) != 0xf0 || f.Word(2) != 0b10 {
			t.Errorf("%s: failed WriteWords wrote words", name)
		}
	}
	f = reopen(t, f)
	if f.Word(1) != 0xf0 || f.Word(2) != 0b10 {
		t.Fatalf("reopened: Word(1) %#x, Word(2) %#x", f.Word(1), f.Word(2))
	}
}

// TestStartWriteback: starting writeback changes no word, ignores words
// past the end, and the words it started are durable after a Sync.
func TestStartWriteback(t *testing.T) {
	f := create(t, 130)
	if err := f.WriteWords(0, []uint64{0xf, 0xf0, 0b1}); err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]uint64{{0, 3}, {1, 1}, {2, 100}, {3, 1}, {math.MaxUint64, 1}, {0, 0}} {
		if err := f.StartWriteback(r[0], r[1]); err != nil {
			t.Fatalf("StartWriteback(%d, %d): %v", r[0], r[1], err)
		}
	}
	if f.Word(0) != 0xf || f.Word(1) != 0xf0 || f.Word(2) != 0b1 {
		t.Fatalf("words %#x %#x %#x after StartWriteback", f.Word(0), f.Word(1), f.Word(2))
	}
	f.SetWatermark(7)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f = reopen(t, f)
	if f.Word(0) != 0xf || f.Word(1) != 0xf0 || f.Word(2) != 0b1 || f.Watermark() != 7 {
		t.Fatalf("reopened: words %#x %#x %#x, watermark %d", f.Word(0), f.Word(1), f.Word(2), f.Watermark())
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.StartWriteback(0, 1); !errors.Is(err, kverr.ErrClosed) {
		t.Fatalf("StartWriteback after Close: %v, want ErrClosed", err)
	}
}

func TestGrow(t *testing.T) {
	f := create(t, 100)
	for _, i := range []uint64{0, 99} {
		if err := f.Set(i, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Grow(50); err != nil || f.Len() != 100 {
		t.Fatalf("shrinking Grow: %v, Len %d", err, f.Len())
	}
	if err := f.Grow(MaxBits + 1); !errors.Is(err, kverr.ErrOutOfRange) || f.Len() != 100 {
		t.Fatalf("Grow(MaxBits+1): %v, Len %d", err, f.Len())
	}
	// 300 bits stays in the first mapping; 1<<22 bits needs several remaps.
	for _, n := range []uint64{300, 1 << 22, 1<<22 + 1} {
		if err := f.Grow(n); err != nil {
			t.Fatal(err)
		}
		if f.Len() != n || !f.Get(0) || !f.Get(99) || f.CountOnes() != 2 {
			t.Fatalf("after Grow(%d): Len %d, ones %d", n, f.Len(), f.CountOnes())
		}
		if err := f.Set(n-1, true); err != nil {
			t.Fatal(err)
		}
		if err := f.Set(n-1, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Set(1<<22, true); err != nil {
		t.Fatal(err)
	}
	g := reopen(t, f)
	if g.Len() != 1<<22+1 || !g.Get(1<<22) || g.CountOnes() != 3 {
		t.Fatalf("reopened after Grow: Len %d, ones %d", g.Len(), g.CountOnes())
	}
	if info := g.Info(); info.FileSize != dataSize(1<<22+1) {
		t.Fatalf("file size %d, want %d", info.FileSize, dataSize(1<<22+1))
	}
}

func TestWatermark(t *testing.T) {
	f := create(t, 10)
	f.SetWatermark(5)
	if f.Watermark() != 0 {
		t.Fatal("watermark persisted before Sync")
	}
	if err := f.Sync(); err != nil || f.Watermark() != 5 {
		t.Fatalf("Sync: %v, watermark %d, want 5", err, f.Watermark())
	}
	f.SetWatermark(3) // backwards: ignored
	if err := f.Sync(); err != nil || f.Watermark() != 5 {
		t.Fatalf("after SetWatermark(3): %v, watermark %d, want 5", err, f.Watermark())
	}
	f.SetWatermark(9)
	g := reopen(t, f) // Close does not sync: 9 was never persisted
	if g.Watermark() != 5 {
		t.Fatalf("watermark %d after reopen, want 5", g.Watermark())
	}
	g.SetWatermark(math.MaxUint64)
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
	if h := reopen(t, g); h.Watermark() != math.MaxUint64 {
		t.Fatalf("watermark %d, want MaxUint64", h.Watermark())
	}
}

func TestSyncAlternatesSlots(t *testing.T) {
	f := create(t, 64)
	for k := uint64(1); k <= 5; k++ {
		f.SetWatermark(k * 10)
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		img := readFile(t, f.Path())
		newSlot := slotFor(k + 1)
		h, err := decodeSlot(slotBytes(img, newSlot), newSlot)
		if err != nil || h.seq != k+1 || h.watermark != k*10 {
			t.Fatalf("sync %d: slot %d holds %+v, %v", k, newSlot, h, err)
		}
		old, err := decodeSlot(slotBytes(img, 1-newSlot), 1-newSlot)
		if err != nil || old.seq != k || old.watermark != (k-1)*10 {
			t.Fatalf("sync %d: previous slot holds %+v, %v", k, old, err)
		}
		if info := f.Info(); info.Seq != k+1 || info.Slot != newSlot || info.ValidSlots != 2 {
			t.Fatalf("Info %+v", info)
		}
	}
	// An unchanged watermark writes no header.
	seq := f.Info().Seq
	if err := f.Sync(); err != nil || f.Info().Seq != seq {
		t.Fatalf("idle Sync: %v, seq %d -> %d", err, seq, f.Info().Seq)
	}
}

// A header write torn by a crash leaves the previous header in charge.
func TestTornHeader(t *testing.T) {
	f := create(t, 256)
	if err := f.Set(3, true); err != nil {
		t.Fatal(err)
	}
	f.SetWatermark(5)
	if err := f.Sync(); err != nil { // seq 2, slot 1
		t.Fatal(err)
	}
	f.SetWatermark(9)
	if err := f.Sync(); err != nil { // seq 3, slot 0
		t.Fatal(err)
	}
	path := f.Path()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	img := readFile(t, path)
	good := bytes.Clone(img)
	// Tear the newest slot as a crash mid-write would: the first half new,
	// the rest from something else.
	copy(img[32:64], bytes.Repeat([]byte{0xa5}, 32))
	writeFile(t, path, img)

	g, err := Open(path)
	if err != nil {
		t.Fatalf("Open with one torn slot: %v", err)
	}
	if g.Watermark() != 5 || g.Len() != 256 || !g.Get(3) {
		t.Fatalf("torn newest slot: watermark %d, want the previous 5", g.Watermark())
	}
	if info := g.Info(); info.Seq != 2 || info.ValidSlots != 1 {
		t.Fatalf("Info %+v, want seq 2 with 1 valid slot", info)
	}
	// The next Sync overwrites the torn slot, never the good one.
	g.SetWatermark(11)
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
	h := reopen(t, g)
	if info := h.Info(); h.Watermark() != 11 || info.Seq != 3 || info.ValidSlots != 2 {
		t.Fatalf("after repair: watermark %d, %+v", h.Watermark(), info)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}

	// Both slots torn: corrupt.
	copy(good[32:64], bytes.Repeat([]byte{0xa5}, 32))
	copy(good[slotStride+32:slotStride+64], bytes.Repeat([]byte{0x5a}, 32))
	writeFile(t, path, good)
	if _, err := Open(path); !errors.Is(err, kverr.ErrCorruptBits) || !strings.Contains(err.Error(), "bad checksum") {
		t.Fatalf("both slots torn: %v, want ErrCorrupt with bad checksum", err)
	}
}

func TestHotPathsDoNotAllocate(t *testing.T) {
	f := create(t, 1<<12)
	var sink bool
	for name, fn := range map[string]func(){
		"Get":  func() { sink = sink != f.Get(77) },
		"Word": func() { sink = sink != (f.Word(1) == 0) },
		"Set":  func() { _ = f.Set(77, true) },
		"Apply": func() {
			_ = f.ApplyWords([]WordChange{{Word: 0, Mask: 1<<3 | 1<<4, Bits: 1 << 3}})
		},
	} {
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s allocates %v times per call", name, n)
		}
	}
}
