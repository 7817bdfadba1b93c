//go:build !kvbuf_failpoints

package failpoint

import "os"

// Enabled reports whether this build has failpoints (the kvbuf_failpoints
// build tag). Tests that need them skip without.
const Enabled = false

// Hit is a failpoint. Without the kvbuf_failpoints tag it does nothing and
// returns nil.
func Hit(name string) error { return nil }

// Enable installs nothing without the kvbuf_failpoints tag: callers check
// Enabled first (and skip). It returns a no-op.
func Enable(name string, fn func() error) (disable func()) { return func() {} }

// EnableAll installs nothing without the kvbuf_failpoints tag. It returns a
// no-op.
func EnableAll(fn func(name string) error) (disable func()) { return func() {} }

// FileSynced does nothing without the kvbuf_failpoints tag.
func FileSynced(f *os.File, off, n int64) {}

// DirSynced does nothing without the kvbuf_failpoints tag.
func DirSynced(dir string) {}

// Observe installs nothing without the kvbuf_failpoints tag. It returns a
// no-op.
func Observe(o SyncObserver) (stop func()) { return func() {} }
