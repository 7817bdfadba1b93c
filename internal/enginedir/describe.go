package enginedir

import (
	"errors"
	"io/fs"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// Info describes an engine directory (see Describe).
type Info struct {
	// Path is the directory, as given to Describe.
	Path string
	// State is Ready or Initialising.
	State State
	// FormatVersion is the manifest's format; 0 if initialisation stopped
	// before the manifest was written (only a LOCK file or temporary files
	// are there).
	FormatVersion int
	// Locked reports that an engine held the directory when Describe
	// looked.
	Locked bool
	// Bitslices are the names of the bitslice files, sorted; nil without
	// a bits directory.
	Bitslices []string
}

// Describe classifies the directory at path for tools (kvtool inspect)
// without locking it for longer than a probe and without writing anything.
// It fails like Open (kverr.ErrNotEngine, kverr.ErrCorruptDir, the OS's errors), and with
// kverr.ErrNotEngine for an empty directory, which is not an engine until Open
// makes it one. It does not look into the store: a ready manifest whose
// store is missing is reported Ready (opening the store says what is
// wrong). The lock probe is a shared flock taken and dropped at once: an
// engine opening the directory at that instant gets kverr.ErrLocked.
func Describe(path string) (Info, error) {
	l, err := readLayout(path)
	if err != nil {
		return Info{}, err
	}
	if l.state == 0 && !l.lock && len(l.leftovers) == 0 {
		return Info{}, kverr.Errorf("%s has no %s manifest: %w", path, ManifestName, kverr.ErrNotEngine)
	}
	info := Info{Path: path, State: l.state, FormatVersion: l.version}
	if info.State == 0 {
		info.State = Initialising
	}
	if info.Locked, err = probeLocked(path); err != nil {
		return Info{}, err
	}
	info.Bitslices, err = BitsNames(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Info{}, err
	}
	return info, nil
}
