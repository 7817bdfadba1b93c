package testutil

import (
	"errors"
	"io"
	"path/filepath"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// CrashableMem is pebble's crashable memory file system
// (vfs.NewCrashableMem) for tests that take crash clones while an engine
// runs on it.
//
// pebble v2.1.7's MemFS takes its clone lock twice, as a reader, in Lock,
// Link and ReuseForWrite; Go's RWMutex lets a waiting writer (CrashClone)
// block the second read lock, so a clone racing one of the three deadlocks
// (cockroachdb/pebble#5993, fixed upstream after the last v2 release). The
// power-cut soak met it once in 1,384 rounds: a checkpoint's store Open
// (LockDirectory) against a cut. CrashableMem keeps a clone from beginning
// while one of the three runs, which is what the fixed MemFS does.
type CrashableMem struct {
	*vfs.MemFS
	mu sync.RWMutex
}

// NewCrashableMem returns an empty CrashableMem.
func NewCrashableMem() *CrashableMem {
	return &CrashableMem{MemFS: vfs.NewCrashableMem()}
}

// Lock is MemFS.Lock, never begun while a CrashClone is.
func (m *CrashableMem) Lock(name string) (io.Closer, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.MemFS.Lock(name)
}

// Link is MemFS.Link, never begun while a CrashClone is.
func (m *CrashableMem) Link(oldname, newname string) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.MemFS.Link(oldname, newname)
}

// ReuseForWrite is MemFS.ReuseForWrite, never begun while a CrashClone is.
func (m *CrashableMem) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.MemFS.ReuseForWrite(oldname, newname, category)
}

// CrashClone is MemFS.CrashClone, begun only when none of Lock, Link and
// ReuseForWrite is running.
func (m *CrashableMem) CrashClone(cfg vfs.CrashCloneCfg) *vfs.MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.MemFS.CrashClone(cfg)
}

// MkdirDurable makes dir, and every directory above it, in fs, and syncs
// each of them, so that a crash clone keeps the whole path (the power-cut
// tests' stores live in directories the model made, which must survive
// every cut).
func MkdirDurable(fs vfs.FS, dir string) error {
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for d := dir; ; d = filepath.Dir(d) {
		f, err := fs.OpenDir(d)
		if err != nil {
			return err
		}
		if err := errors.Join(f.Sync(), f.Close()); err != nil {
			return err
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}
