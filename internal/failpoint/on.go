//go:build kvbuf_failpoints

package failpoint

import (
	"os"
	"sync"
)

// Enabled reports whether this build has failpoints (the kvbuf_failpoints
// build tag). Tests that need them skip without.
const Enabled = true

// table holds the installed callbacks. It is global only in failpoint
// builds, which are test builds.
var table struct {
	mu  sync.Mutex
	fn  map[string]func() error
	all func(name string) error
	obs SyncObserver
}

// Hit runs the callback installed for every point (EnableAll), then the
// one installed for name, if any, and returns the first error.
func Hit(name string) error {
	table.mu.Lock()
	fn, all := table.fn[name], table.all
	table.mu.Unlock()
	if all != nil {
		if err := all(name); err != nil {
			return err
		}
	}
	if fn == nil {
		return nil
	}
	return fn()
}

// EnableAll installs fn at every point, called before the point's own
// callback, replacing any earlier one; it returns a function that removes
// it. fn runs as a point's callback does (see Enable).
func EnableAll(fn func(name string) error) (disable func()) {
	return install(&table.all, fn)
}

// install puts v in *slot, a field of table, and returns a function that
// clears it; both under table.mu.
func install[T any](slot *T, v T) (remove func()) {
	table.mu.Lock()
	defer table.mu.Unlock()
	*slot = v
	return func() {
		table.mu.Lock()
		defer table.mu.Unlock()
		var zero T
		*slot = zero
	}
}

// FileSynced tells the observer (Observe) that the bytes [off, off+n) of
// f (the whole file if n < 0) are durable: a sync of them returned nil.
func FileSynced(f *os.File, off, n int64) {
	table.mu.Lock()
	o := table.obs
	table.mu.Unlock()
	if o != nil {
		o.FileSynced(f, off, n)
	}
}

// DirSynced tells the observer that the entries of directory dir are
// durable: an fsync of it returned nil.
func DirSynced(dir string) {
	table.mu.Lock()
	o := table.obs
	table.mu.Unlock()
	if o != nil {
		o.DirSynced(dir)
	}
}

// Observe installs o as the sync observer, replacing any earlier one, and
// returns a function that removes it.
func Observe(o SyncObserver) (stop func()) {
	return install(&table.obs, o)
}

// Enable installs fn at the point name, replacing any earlier callback, and
// returns a function that removes it. fn runs on the goroutine that reaches
// the point, with the instrumented code's locks held: it may block, return
// an error, panic or end the process, but must not call back into the
// instrumented object.
func Enable(name string, fn func() error) (disable func()) {
	table.mu.Lock()
	defer table.mu.Unlock()
	if table.fn == nil {
		table.fn = make(map[string]func() error)
	}
	table.fn[name] = fn
	return func() {
		table.mu.Lock()
		defer table.mu.Unlock()
		delete(table.fn, name)
	}
}
