package enginedir

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

const (
	manifestHeader = "kvbuf engine directory\n"
	// manifestReady marks a complete engine: store and bits exist.
	manifestReady = manifestHeader + "format 2\n"
	// manifestInit marks an engine whose store and bits directories may
	// not exist yet; MarkReady replaces it with manifestReady.
	manifestInit = manifestReady + "initialising\n"
	// The same for format 1 (read, never written).
	manifestReadyV1 = manifestHeader + "format 1\n"
	manifestInitV1  = manifestReadyV1 + "initialising\n"
	// lockText is what a LOCK file made by this package holds, so that a
	// lone LOCK left by a crashed initialisation is told from a foreign one.
	lockText = "kvbuf engine lock\n"

	// maxManifest bounds how much of a manifest (or of a LOCK file) is
	// read: anything longer is not kvbuf's.
	maxManifest = 1024

	lockTempPrefix     = LockName + ".tmp."
	manifestTempPrefix = ManifestName + ".tmp."
	legacyManifestTemp = ManifestName + ".tmp"
)

// State is how far an engine directory's initialisation got.
type State int

const (
	// Ready: the manifest says the engine is complete.
	Ready State = iota + 1
	// Initialising: initialisation started and did not finish. It is in
	// progress if the directory is locked, else a crash cut it short and
	// the next Open finishes it.
	Initialising
)

// String returns the state's lower-case name ("ready", "initialising"), or
// "State(n)" for a value that is neither.
func (s State) String() string {
	switch s {
	case Ready:
		return "ready"
	case Initialising:
		return "initialising"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// layout is what a look at an engine directory found.
type layout struct {
	state   State // 0: no manifest (an empty directory or init leftovers)
	version int   // the manifest's format; 0 without a manifest
	lock    bool  // a LOCK entry exists
	// leftovers are temporary files of an interrupted initialisation or
	// manifest update (or of an opener racing this one).
	leftovers []string
}

// isLeftover reports whether name is one of kvbuf's temporary files.
func isLeftover(name string) bool {
	return name == legacyManifestTemp || strings.HasPrefix(name, manifestTempPrefix) || strings.HasPrefix(name, lockTempPrefix)
}

// errAgain means the directory changed while it was being read (an opener
// racing this one published its manifest): read it again.
var errAgain = errors.New("enginedir: directory changed while being read")

// readLayout classifies the directory at path (which exists) without
// writing anything. See the package documentation, step 2.
func readLayout(path string) (layout, error) {
	for attempt := 0; ; attempt++ {
		l, err := readLayoutOnce(path)
		// The manifest is never removed, so a reader that saw it appear
		// sees it next time: one more look settles it. More tries only
		// matter if something else than kvbuf keeps changing the
		// directory.
		if errors.Is(err, errAgain) && attempt < 8 {
			continue
		}
		if errors.Is(err, errAgain) {
			return layout{}, kverr.Errorf("%s keeps changing while it is read", path)
		}
		return l, err
	}
}

func readLayoutOnce(path string) (layout, error) {
	st, err := os.Stat(path)
	if err != nil {
		return layout{}, kverr.Errorf("%w", err) // a *PathError naming path
	}
	if !st.IsDir() {
		return layout{}, kverr.Errorf("%s is not a directory: %w", path, kverr.ErrNotEngine)
	}
	mpath := filepath.Join(path, ManifestName)
	var l layout
	l.state, l.version, err = readManifest(mpath)
	if errors.Is(err, kverr.ErrNotEngine) && hasEngineDirs(path) {
		// An empty, garbage or foreign KVBUF next to store/ and bits/:
		// kvbuf's own directory whose manifest was damaged, so that a
		// host's "restore on corrupt" branch runs.
		b, _ := readSmallFile(mpath)
		return layout{}, kverr.Errorf("%s has %s/ and %s/ but its %s manifest is damaged (%d bytes: %.40q): %w",
			path, StoreDir, BitsDir, ManifestName, len(b), b, kverr.ErrCorruptDir)
	}
	if err != nil {
		return layout{}, err
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return layout{}, kverr.Errorf("list %s: %w", path, err)
	}
	hook("listed", path)
	var foreign string
	var lockErr error
	for _, e := range ents {
		switch n := e.Name(); {
		case n == ManifestName:
			if l.state == 0 {
				return layout{}, errAgain // published since readManifest
			}
		case n == LockName:
			l.lock = true
			if l.state == 0 {
				lockErr = checkLoneLock(path)
			}
		case isLeftover(n):
			l.leftovers = append(l.leftovers, n)
		case foreign == "":
			foreign = n
		}
	}
	if l.state != 0 {
		return l, nil
	}
	if errors.Is(lockErr, errAgain) {
		return layout{}, errAgain
	}
	if foreign == "" && lockErr == nil {
		return l, nil
	}
	// kvbuf makes nothing but LOCK and temporary files before the
	// manifest, so an entry like store/ means the manifest exists now.
	// The engine directories are looked at before the manifest, never
	// after: an opener racing this one writes the manifest, then bits/,
	// then store/, so directories seen before a look that finds no
	// manifest really lack one, while directories seen after it may have
	// been made since (with their manifest).
	engineDirs := hasEngineDirs(path)
	hook("probed", path)
	if _, err := os.Lstat(mpath); err == nil {
		return layout{}, errAgain
	}
	if engineDirs {
		// kvbuf creates store/ and bits/ only after the manifest, which is
		// never removed: an engine whose manifest was lost.
		return layout{}, kverr.Errorf("%s has %s/ and %s/ but no %s manifest: %w", path, StoreDir, BitsDir, ManifestName, kverr.ErrCorruptDir)
	}
	if lockErr != nil {
		return layout{}, lockErr
	}
	return layout{}, kverr.Errorf("%s has %q but no %s: %w", path, foreign, ManifestName, kverr.ErrNotEngine)
}

// hasEngineDirs reports whether path holds both a store and a bits
// directory: what only kvbuf makes, and only after its manifest.
func hasEngineDirs(path string) bool {
	for _, d := range []string{StoreDir, BitsDir} {
		st, err := os.Lstat(filepath.Join(path, d))
		if err != nil || !st.IsDir() {
			return false
		}
	}
	return true
}

// readManifest reads and classifies the manifest at mpath: state 0 if
// there is none, kverr.ErrNotEngine if it is not kvbuf's, kverr.ErrCorruptDir if it is
// kvbuf's but damaged or of a newer format.
func readManifest(mpath string) (State, int, error) {
	b, err := readSmallFile(mpath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return 0, 0, nil
	case errors.Is(err, errNotRegular):
		return 0, 0, kverr.Errorf("%s is not a regular file (kvbuf never makes one): %w", mpath, kverr.ErrNotEngine)
	case err != nil:
		return 0, 0, kverr.Errorf("read %s: %w", mpath, err)
	}
	switch string(b) {
	case manifestReady:
		return Ready, FormatVersion, nil
	case manifestInit:
		return Initialising, FormatVersion, nil
	case manifestReadyV1:
		return Ready, 1, nil
	case manifestInitV1:
		return Initialising, 1, nil
	}
	if !bytes.HasPrefix(b, []byte(manifestHeader)) {
		return 0, 0, kverr.Errorf("%s: foreign manifest %.40q: %w", mpath, b, kverr.ErrNotEngine)
	}
	return 0, 0, kverr.Errorf("%s: unsupported or damaged manifest %.80q (this kvbuf reads formats 1 and %d): %w", mpath, b, FormatVersion, kverr.ErrCorruptDir)
}

// checkLoneLock checks the LOCK file of a directory without a manifest: it
// must be one this package made (holding lockText), which only an
// interrupted initialisation leaves alone.
func checkLoneLock(path string) error {
	lpath := filepath.Join(path, LockName)
	b, err := readSmallFile(lpath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return errAgain // removed since the listing by a refusing opener
	case errors.Is(err, errNotRegular):
		return kverr.Errorf("%s has a %s that is not a regular file and no %s manifest: %w", path, LockName, ManifestName, kverr.ErrNotEngine)
	case err != nil:
		return kverr.Errorf("read %s: %w", lpath, err)
	}
	if string(b) != lockText {
		return kverr.Errorf("%s has a %s file kvbuf did not write (%.40q) and no %s manifest: %w", path, LockName, b, ManifestName, kverr.ErrNotEngine)
	}
	return nil
}

var errNotRegular = errors.New("not a regular file")

// readSmallFile reads up to maxManifest+1 bytes of the regular file at
// path. It never opens anything else (a FIFO would block, a device could
// have side effects): errNotRegular.
func readSmallFile(path string) ([]byte, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, errNotRegular
	}
	// O_NONBLOCK: should a FIFO have been swapped in since the Lstat, the
	// open does not wait for a writer.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return nil, err
	} else if !st.Mode().IsRegular() {
		return nil, errNotRegular
	}
	return io.ReadAll(io.LimitReader(f, maxManifest+1))
}
