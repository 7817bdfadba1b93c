//go:build kvbuf_failpoints

package failpoint

import "sync"

// Enabled reports whether this build has failpoints (the kvbuf_failpoints
// build tag). Tests that need them skip without.
const Enabled = true

// table holds the installed callbacks. It is global only in failpoint
// builds, which are test builds.
var table struct {
	mu sync.Mutex
	fn map[string]func() error
}

// Hit runs the callback installed for name, if any, and returns its error.
func Hit(name string) error {
	table.mu.Lock()
	fn := table.fn[name]
	table.mu.Unlock()
	if fn == nil {
		return nil
	}
	return fn()
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
