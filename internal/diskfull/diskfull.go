// Package diskfull is the engine's guard for its store against a full disk:
// a vfs.FS that waits for space, instead of failing, where pebble cannot
// survive a failed write, and tells its owner when the disk fills and when
// space returns.
//
// pebble treats a failed write of its write-ahead log as final (the log
// writer keeps the error: every later commit fails until the store is
// reopened) and a failed write of its MANIFEST as fatal (it ends the
// process). On a full disk both would turn a condition an operator repairs
// (delete files, grow the volume) into a restart or a crash. The guard
// keeps pebble from seeing ENOSPC on those files: a write (or a file
// creation) of a write-ahead log, a MANIFEST or a marker file that fails
// with ENOSPC is retried, after a wait that doubles from Options.RetryMin
// to Options.RetryMax, until it succeeds, so to pebble the write only took
// long. Other files (sstables, blob files, OPTIONS, temporary files) fail
// at once: pebble cleans up after a failed table write and tries again
// later.
//
// Syncs are never retried: after a failed fsync the kernel may have dropped
// the dirty pages, and a second fsync would report success for data that is
// not on disk (PostgreSQL's "fsyncgate"). A sync that fails with ENOSPC is
// reported (Full) and returned.
//
// Only files under the guarded directory are guarded; the same file system
// used for anything else (a checkpoint's destination) fails at once.
//
// # Owner's view
//
// Options.Full is called when a guarded write first fails with ENOSPC after
// a time with space (an episode begins), Options.Space when a write
// succeeds again after one. Write-ahead log writes wait only between Resume
// and Abort: a guard starts aborted (the engine's Open fails on a full disk
// instead of hanging), Resume starts the waiting once the engine is open,
// and Abort stops it: every write waiting, and every later one, of a
// write-ahead log fails with its ENOSPC error (the engine closing on a full
// disk, which reports that error instead of waiting forever). MANIFEST and
// marker writes always wait, because failing them would end the process.
package diskfull

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Options configures New. A nil *Options means defaults.
type Options struct {
	// Full is called, on the goroutine of the write that found the disk
	// full, when an episode begins. It must not block for long. Optional.
	Full func(err error)
	// Waiting is called, on the goroutine of the write, each time a write
	// begins to wait for space. It must not block for long. Optional.
	Waiting func(err error)
	// Space is called when a write succeeds after an episode. Optional.
	Space func()
	// RetryMin is the first wait before a retry; it doubles up to
	// RetryMax. Defaults: 1ms and 1s.
	RetryMin, RetryMax time.Duration
}

// FS is the guard. Its methods are safe for concurrent use.
type FS struct {
	vfs.FS
	dir  string // guarded: dir and everything under it
	opts Options

	// fullFlag mirrors full, so that the writes of a healthy disk (all
	// but a few) learn that nothing is to be reported without the mutex.
	fullFlag atomic.Bool

	mu      sync.Mutex
	full    bool          // an episode is on
	aborted chan struct{} // closed while log writes do not wait (before Resume, after Abort)
	waiting int           // writes waiting for space now
}

// New returns fs guarding the files under dir (cleaned).
func New(fs vfs.FS, dir string, opts *Options) *FS {
	g := &FS{FS: fs, dir: filepath.Clean(dir), aborted: make(chan struct{})}
	close(g.aborted) // until Resume
	if opts != nil {
		g.opts = *opts
	}
	if g.opts.RetryMin <= 0 {
		g.opts.RetryMin = time.Millisecond
	}
	if g.opts.RetryMax < g.opts.RetryMin {
		g.opts.RetryMax = max(time.Second, g.opts.RetryMin)
	}
	return g
}

// Unwrap returns the file system under the guard.
func (g *FS) Unwrap() vfs.FS { return g.FS }

// Resume starts the waiting of write-ahead log writes (see the package
// documentation).
func (g *FS) Resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.aborted:
		g.aborted = make(chan struct{})
	default:
	}
}

// Abort stops the waiting of write-ahead log writes (see the package
// documentation). It is idempotent.
func (g *FS) Abort() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.aborted:
	default:
		close(g.aborted)
	}
}

// Waiting returns the number of writes waiting for space now.
func (g *FS) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}

// policy says what the guard does with a file's ENOSPC.
type policy int

const (
	unguarded  policy = iota // not under dir: returned as it is, not reported
	failFast                 // reported and returned
	waitLog                  // waited out until Abort
	waitAlways               // waited out, Abort or not
)

func (g *FS) policyFor(name string) policy {
	name = filepath.Clean(name)
	if name != g.dir && !strings.HasPrefix(name, g.dir+string(filepath.Separator)) {
		return unguarded
	}
	base := filepath.Base(name)
	switch {
	case strings.HasSuffix(base, ".log"):
		return waitLog
	case strings.HasPrefix(base, "MANIFEST-"), strings.HasPrefix(base, "marker."):
		return waitAlways
	}
	return failFast
}

func isENOSPC(err error) bool { return err != nil && errors.Is(err, syscall.ENOSPC) }

// failed records an ENOSPC of a guarded file; it reports whether an
// episode began.
func (g *FS) failed(err error) bool {
	g.mu.Lock()
	begins := !g.full
	g.full = true
	g.fullFlag.Store(true)
	g.mu.Unlock()
	if begins && g.opts.Full != nil {
		g.opts.Full(err)
	}
	return begins
}

// succeeded records a successful write of a guarded file.
func (g *FS) succeeded() {
	if !g.fullFlag.Load() {
		return
	}
	g.mu.Lock()
	ends := g.full
	g.full = false
	g.fullFlag.Store(false)
	g.mu.Unlock()
	if ends && g.opts.Space != nil {
		g.opts.Space()
	}
}

// retry runs op until it succeeds or fails otherwise than with ENOSPC, or,
// for a waitLog file, until Abort; it returns op's last error.
func (g *FS) retry(p policy, op func() error) error { return g.retryAfter(p, op(), op) }

// retryAfter is retry after a first attempt that returned err.
func (g *FS) retryAfter(p policy, err error, op func() error) error {
	if p == unguarded {
		return err
	}
	if !isENOSPC(err) {
		if err == nil {
			g.succeeded()
		}
		return err
	}
	g.failed(err)
	if p == failFast {
		return err
	}
	if p == waitLog {
		g.mu.Lock()
		aborted := g.aborted
		g.mu.Unlock()
		select {
		case <-aborted:
			return err // not waiting now (before Resume, after Abort)
		default:
		}
	}
	g.mu.Lock()
	g.waiting++
	g.mu.Unlock()
	if g.opts.Waiting != nil {
		g.opts.Waiting(err)
	}
	defer func() {
		g.mu.Lock()
		g.waiting--
		g.mu.Unlock()
	}()
	wait := g.opts.RetryMin
	for {
		var aborted chan struct{} // nil: never (waitAlways)
		if p == waitLog {
			g.mu.Lock()
			aborted = g.aborted
			g.mu.Unlock()
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-aborted:
			t.Stop()
			return err
		}
		wait = min(2*wait, g.opts.RetryMax)
		if err = op(); !isENOSPC(err) {
			if err == nil {
				g.succeeded()
			}
			return err
		}
		// Another write may have succeeded meanwhile and ended the
		// episode (Space): this one still waits, so it begins another.
		if g.failed(err) && g.opts.Waiting != nil {
			g.opts.Waiting(err)
		}
	}
}

func (g *FS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if f == nil || err != nil || g.policyFor(name) == unguarded {
		return f, err
	}
	return &file{File: f, g: g, p: g.policyFor(name)}, nil
}

// Create implements vfs.FS.
func (g *FS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	var f vfs.File
	err := g.retry(g.policyFor(name), func() (err error) {
		f, err = g.FS.Create(name, category)
		return err
	})
	return g.wrap(name, f, err)
}

// ReuseForWrite implements vfs.FS (pebble recycles old logs with it).
func (g *FS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	var f vfs.File
	err := g.retry(g.policyFor(newname), func() (err error) {
		f, err = g.FS.ReuseForWrite(oldname, newname, category)
		return err
	})
	return g.wrap(newname, f, err)
}

// OpenReadWrite implements vfs.FS.
func (g *FS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := g.FS.OpenReadWrite(name, category, opts...)
	return g.wrap(name, f, err)
}

// Link implements vfs.FS: a failure is reported, not waited out.
func (g *FS) Link(oldname, newname string) error {
	p := g.policyFor(newname)
	return g.retry(min(p, failFast), func() error { return g.FS.Link(oldname, newname) })
}

// Rename implements vfs.FS (pebble's marker moves rename a new marker
// into place): waited out for the files waited out.
func (g *FS) Rename(oldname, newname string) error {
	return g.retry(g.policyFor(newname), func() error { return g.FS.Rename(oldname, newname) })
}

// MkdirAll implements vfs.FS: a failure is reported, not waited out.
func (g *FS) MkdirAll(dir string, perm os.FileMode) error {
	return g.retry(min(g.policyFor(dir), failFast), func() error { return g.FS.MkdirAll(dir, perm) })
}

// Lock implements vfs.FS.
func (g *FS) Lock(name string) (io.Closer, error) { return g.FS.Lock(name) }

// file is a guarded file.
type file struct {
	vfs.File
	g *FS
	p policy
}

func (f *file) Write(b []byte) (int, error) {
	n, err := f.File.Write(b)
	if err == nil { // the healthy disk's path: no closure, no lock
		f.g.succeeded()
		return n, nil
	}
	err = f.g.retryAfter(f.p, err, func() error {
		m, err := f.File.Write(b[n:])
		n += m
		return err
	})
	return n, err
}

func (f *file) WriteAt(b []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(b, off)
	if err == nil {
		f.g.succeeded()
		return n, nil
	}
	err = f.g.retryAfter(f.p, err, func() error {
		m, err := f.File.WriteAt(b[n:], off+int64(n))
		n += m
		return err
	})
	return n, err
}

// sync reports an ENOSPC of a sync, never retries it.
func (f *file) sync(err error) error {
	if isENOSPC(err) {
		f.g.failed(err)
	}
	return err
}

func (f *file) Sync() error     { return f.sync(f.File.Sync()) }
func (f *file) SyncData() error { return f.sync(f.File.SyncData()) }
func (f *file) SyncTo(length int64) (bool, error) {
	full, err := f.File.SyncTo(length)
	return full, f.sync(err)
}
