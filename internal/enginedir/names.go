package enginedir

import (
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// Layout of an engine directory.
const (
	// ManifestName is the file that marks a directory as a kvbuf engine.
	ManifestName = "KVBUF"
	// LockName is the file an open engine holds an exclusive flock on.
	LockName = "LOCK"
	// StoreDir is the subdirectory holding the pebble store.
	StoreDir = "store"
	// BitsDir is the subdirectory holding one file per bitslice.
	BitsDir = "bits"
	// BitsExt is the file name extension of a bitslice file.
	BitsExt = ".bits"

	// FormatVersion is the engine directory format this package writes
	// (the "format N" line of the manifest). Format 2 added the engine id,
	// the bitslice catalog and version-2 bitslice files; this package also
	// reads format 1, which the engine upgrades (Dir.Upgrade) once it has
	// recorded what format 2 needs. Earlier kvbuf versions refuse format 2
	// as damaged or newer (kverr.ErrCorruptDir) instead of misreading it.
	FormatVersion = 2

	// MaxNameLen is the longest keyspace or bitslice name, in bytes.
	MaxNameLen = 128
)

// CheckName enforces the keyspace and bitslice name rule: 1 to MaxNameLen
// bytes of [A-Za-z0-9._-], not "." or "..". kind ("keyspace", "bitslice")
// goes into the error, which wraps kverr.ErrBadName.
func CheckName(kind, name string) error {
	if name == "" || len(name) > MaxNameLen || name == "." || name == ".." {
		return kverr.Errorf("%s name %q: %w", kind, name, kverr.ErrBadName)
	}
	for i := 0; i < len(name); i++ {
		if !nameByte(name[i]) {
			return kverr.Errorf("%s name %q: byte %#x: %w", kind, name, name[i], kverr.ErrBadName)
		}
	}
	return nil
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// BitsNames returns the names of the bitslices in the bits directory of the
// engine directory at path, sorted. It takes no lock: an engine may be
// creating bitslices meanwhile. Files that are not regular, lack BitsExt
// or have a bad name are not bitslices and are skipped. A missing bits
// directory is an error wrapping fs.ErrNotExist.
func BitsNames(path string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(path, BitsDir))
	if err != nil {
		return nil, kverr.Errorf("list bitslices in %s: %w", path, err)
	}
	var names []string
	for _, e := range ents {
		n, ok := strings.CutSuffix(e.Name(), BitsExt)
		if !ok || !e.Type().IsRegular() || CheckName("bitslice", n) != nil {
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}
