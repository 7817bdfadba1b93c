//go:build !kvbuf_yield

package yield

// Enabled reports whether Point yields (the kvbuf_yield build tag).
const Enabled = false

// Point does nothing without the kvbuf_yield build tag.
func Point() {}
