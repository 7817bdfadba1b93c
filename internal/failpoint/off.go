//go:build !kvbuf_failpoints

package failpoint

// Enabled reports whether this build has failpoints (the kvbuf_failpoints
// build tag). Tests that need them skip without.
const Enabled = false

// Hit is a failpoint. Without the kvbuf_failpoints tag it does nothing and
// returns nil.
func Hit(name string) error { return nil }

// Enable installs nothing without the kvbuf_failpoints tag: callers check
// Enabled first (and skip). It returns a no-op.
func Enable(name string, fn func() error) (disable func()) { return func() {} }
