package bitslice

import (
	"os"
	"path/filepath"
	"testing"
)

// create makes a file of nbits bits in a temporary directory, closed at the
// end of the test.
func create(t testing.TB, nbits uint64) *File {
	t.Helper()
	f, err := Create(filepath.Join(t.TempDir(), "t.bits"), nbits)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// reopen closes f and opens its file again.
func reopen(t testing.TB, f *File) *File {
	t.Helper()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g, err := Open(f.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// slotBytes returns slot i of a file image.
func slotBytes(img []byte, i int) []byte { return img[i*slotStride : i*slotStride+slotSize] }
