package bitslice

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseHeader feeds arbitrary header areas (b, zero-padded to the
// 4096-byte header area, as in a file) and file sizes to the header parser. It must never panic, and whatever it accepts must be
// self-consistent. The seed corpus (testdata/fuzz/FuzzParseHeader, made from
// the fixtures by TestFixtures -update) runs in every normal test run.
func FuzzParseHeader(f *testing.F) {
	f.Add([]byte{}, int64(0))
	f.Add(make([]byte, DataOffset), int64(DataOffset))
	f.Fuzz(func(t *testing.T, b []byte, size int64) {
		if len(b) < DataOffset {
			b = append(b, make([]byte, DataOffset-len(b))...)
		}
		p, err := parseHeader(b, size)
		if err != nil {
			return
		}
		if p.seq == 0 || p.nbits > MaxBits || size < dataSize(p.nbits) || (size-DataOffset)%8 != 0 {
			t.Fatalf("accepted inconsistent header %+v for size %d", p, size)
		}
		if p.valid < 1 || p.valid > 2 || p.slot != slotFor(p.seq) {
			t.Fatalf("accepted %+v", p)
		}
		enc := encodeSlot(p.header)
		if !bytes.Equal(enc[:], slotBytes(b, p.slot)) {
			t.Fatalf("accepted slot does not re-encode to its bytes: %+v", p)
		}
	})
}

// writeFuzzCorpus writes a seed for FuzzParseHeader from each fixture image.
func writeFuzzCorpus(t *testing.T, images map[string][]byte) {
	t.Helper()
	dir := filepath.Join("testdata", "fuzz", "FuzzParseHeader")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, img := range images {
		// Trailing zeros of the header area are cut: the target pads them back.
		hdr := bytes.TrimRight(img[:min(len(img), DataOffset)], "\x00")
		seed := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nint64(%d)\n", hdr, len(img))
		if err := os.WriteFile(filepath.Join(dir, name), []byte(seed), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
