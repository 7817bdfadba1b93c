package testutil

import (
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// HoldFS is a vfs.FS that, once armed, holds the creation of the first
// file Match accepts: it closes Held and waits, inside Create, until
// Release is closed. A test uses it to freeze pebble with one of its jobs
// in progress (a compaction whose output table is held), a state no
// public call can hold still. Create it with NewHoldFS.
type HoldFS struct {
	vfs.FS
	// Match says which file's creation to hold (by its name).
	Match func(name string) bool
	// Held is closed when a creation is held; Release, closed by the
	// test (Unhold), lets it go on.
	Held, Release chan struct{}

	mu      sync.Mutex
	armed   bool
	release sync.Once
}

// NewHoldFS returns a HoldFS over fs holding the first creation match
// accepts once armed; armed says whether it is armed from the start.
func NewHoldFS(fs vfs.FS, match func(name string) bool, armed bool) *HoldFS {
	return &HoldFS{FS: fs, Match: match, Held: make(chan struct{}), Release: make(chan struct{}), armed: armed}
}

// Arm makes the next creation Match accepts wait (once).
func (f *HoldFS) Arm() {
	f.mu.Lock()
	f.armed = true
	f.mu.Unlock()
}

// Unhold lets a held creation, and every later one, go on. It may be
// called more than once (a test's deferred cleanup and its own release).
func (f *HoldFS) Unhold() { f.release.Do(func() { close(f.Release) }) }

// IsHeld reports whether a creation has been held.
func (f *HoldFS) IsHeld() bool {
	select {
	case <-f.Held:
		return true
	default:
		return false
	}
}

// Create holds the creation if armed and name matches, then creates it.
func (f *HoldFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f.mu.Lock()
	hold := f.armed && f.Match(name)
	if hold {
		f.armed = false
		close(f.Held)
	}
	f.mu.Unlock()
	if hold {
		<-f.Release
	}
	return f.FS.Create(name, cat)
}
