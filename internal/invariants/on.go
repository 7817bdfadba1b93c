//go:build invariants

package invariants

// Enabled reports whether invariant checks are compiled in (build tag
// "invariants").
const Enabled = true
