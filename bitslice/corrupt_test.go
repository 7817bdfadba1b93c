package bitslice

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// validImage is the image of a 300-bit file with both slots valid
// (seq 1 in slot 0, seq 2 with watermark 42 in slot 1).
func validImage(t *testing.T) []byte {
	t.Helper()
	f := create(t, 300)
	f.SetWatermark(42)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return readFile(t, f.Path())
}

// reseal recomputes slot i's checksum after a deliberate edit.
func reseal(img []byte, i int) {
	s := slotBytes(img, i)
	binary.LittleEndian.PutUint32(s[crcOffset:], crc32.Checksum(s[:crcOffset], crcTable))
}

func TestOpenRejectsCorruptFiles(t *testing.T) {
	valid := validImage(t)
	cases := []struct {
		name string
		edit func(img []byte) []byte
		want string // in the error text
	}{
		{"empty file", func([]byte) []byte { return nil }, "file is 0 bytes, shorter than the 4096-byte header"},
		{"short file", func(img []byte) []byte { return img[:100] }, "file is 100 bytes, shorter than the 4096-byte header"},
		{"short foreign file", func([]byte) []byte { return []byte("#!/bin/sh\necho hi\n") }, `file is 18 bytes, shorter than the 4096-byte header and starts "#!/bin/s" (not a kvbuf bitslice file)`},
		{"header only, one byte short", func(img []byte) []byte { return img[:DataOffset-1] }, "shorter than the 4096-byte header"},
		{"foreign text file", func([]byte) []byte { return bytes.Repeat([]byte("hello, world\n"), 400) }, "bad magic"},
		{"zero header", func(img []byte) []byte { clear(img[:DataOffset]); return img }, "slot 0: never written; slot 1: never written"},
		{"bad magic", func(img []byte) []byte {
			copy(img[0:], "NOTMAGIC")
			copy(img[slotStride:], "NOTMAGIC")
			return img
		}, `bad magic "NOTMAGIC"`},
		{"bad checksum both", func(img []byte) []byte { img[25] ^= 1; img[slotStride+25] ^= 1; return img }, "bad checksum"},
		{"newer version", func(img []byte) []byte {
			binary.LittleEndian.PutUint32(img[slotStride+8:], 3)
			reseal(img, 1)
			return img
		}, "unsupported format version 3"},
		{"version 0", func(img []byte) []byte {
			for i := range 2 {
				binary.LittleEndian.PutUint32(img[i*slotStride+8:], 0)
				reseal(img, i)
			}
			return img
		}, "unsupported format version 0"},
		{"truncated data", func(img []byte) []byte { return img[:DataOffset+16] }, "truncated: file is 4112 bytes, header (seq 2) says 300 bits, which needs 4136 bytes"},
		{"partial word", func(img []byte) []byte { return append(img, 0, 0, 0) }, "not a whole number of 8-byte words"},
		{"absurd length", func(img []byte) []byte {
			for i := range 2 {
				binary.LittleEndian.PutUint64(img[i*slotStride+24:], 1<<62)
				reseal(img, i)
			}
			return img
		}, "exceeds the maximum"},
		{"length just over max", func(img []byte) []byte {
			for i := range 2 {
				binary.LittleEndian.PutUint64(img[i*slotStride+24:], MaxBits+1)
				reseal(img, i)
			}
			return img
		}, "exceeds the maximum"},
		{"length at max but file small", func(img []byte) []byte {
			binary.LittleEndian.PutUint64(img[slotStride+24:], MaxBits)
			reseal(img, 1)
			return img
		}, "truncated"},
		{"wrong data offset", func(img []byte) []byte {
			for i := range 2 {
				binary.LittleEndian.PutUint32(img[i*slotStride+12:], 8192)
				reseal(img, i)
			}
			return img
		}, "data offset 8192"},
		{"reserved bytes", func(img []byte) []byte {
			for i := range 2 {
				img[i*slotStride+57] = 1
				reseal(img, i)
			}
			return img
		}, "reserved bytes are not zero"},
		{"owner in a version-1 slot", func(img []byte) []byte {
			for i := range 2 {
				binary.LittleEndian.PutUint32(img[i*slotStride+8:], 1)
				img[i*slotStride+45] = 1 // version 1 reserves 40:60
				reseal(img, i)
			}
			return img
		}, "reserved bytes are not zero"},
		{"slots swapped", func(img []byte) []byte {
			s0 := bytes.Clone(slotBytes(img, 0))
			copy(img[0:slotSize], slotBytes(img, 1))
			copy(img[slotStride:], s0)
			return img
		}, "does not belong in slot"},
		{"sequence zero", func(img []byte) []byte {
			for i := range 2 {
				binary.LittleEndian.PutUint64(img[i*slotStride+16:], 0)
				reseal(img, i)
			}
			return img
		}, "sequence number 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.bits")
			img := tc.edit(bytes.Clone(valid))
			writeFile(t, path, img)
			for op, fn := range map[string]func() error{
				"Open":     func() error { f, err := Open(path); closeIf(f); return err },
				"ReadInfo": func() error { _, err := ReadInfo(path); return err },
			} {
				err := fn()
				if !errors.Is(err, kverr.ErrCorruptBits) {
					t.Fatalf("%s: %v, want ErrCorrupt", op, err)
				}
				if msg := err.Error(); !strings.Contains(msg, tc.want) || !strings.Contains(msg, path) {
					t.Fatalf("%s: %q does not say %q and the path", op, msg, tc.want)
				}
			}
			if got := readFile(t, path); !bytes.Equal(got, img) {
				t.Fatal("a failed Open changed the file")
			}
			// The lock was released on the way out.
			if f, err := Open(path); !errors.Is(err, kverr.ErrCorruptBits) {
				closeIf(f)
				t.Fatalf("second Open: %v, want ErrCorrupt again (not ErrLocked)", err)
			}
		})
	}
}

func closeIf(f *File) {
	if f != nil {
		f.Close()
	}
}

func TestOpenOtherErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "none.bits")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open missing: %v, want fs.ErrNotExist", err)
	}
	if _, err := ReadInfo(filepath.Join(dir, "none.bits")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadInfo missing: %v, want fs.ErrNotExist", err)
	}
	if _, err := Open(dir); err == nil {
		t.Fatal("Open of a directory succeeded")
	}
	if _, err := ReadInfo(dir); !errors.Is(err, kverr.ErrCorruptBits) || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("ReadInfo of a directory: %v, want ErrCorrupt (is a directory)", err)
	}
}

// A slot whose checksum is good but whose version is newer must not be
// skipped in favour of the older slot: that would silently drop updates.
func TestNewerVersionIsNotSkipped(t *testing.T) {
	img := validImage(t)
	binary.LittleEndian.PutUint32(img[8:], 9) // slot 0 (seq 1, older)
	reseal(img, 0)
	if _, err := parseHeader(img, int64(len(img))); !errors.Is(err, kverr.ErrCorruptBits) {
		t.Fatalf("older slot with a newer version: %v, want ErrCorrupt", err)
	}
}
