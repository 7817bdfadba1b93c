// Package invariants holds run-time checks of kvbuf's internal invariants
// (a ticket ended twice, a watermark going backwards, a released table
// written, a retry loop spinning without bound). They are compiled in with
// the build tag "invariants" (CI runs the test suite that way as well) and
// cost nothing otherwise: Enabled is a constant, so the compiler drops every
// guarded check.
package invariants

import "fmt"

// Check panics with the formatted message if cond is false and the checks
// are enabled. Keep arguments cheap: they are evaluated even when disabled
// unless the call is guarded by Enabled.
func Check(cond bool, format string, args ...any) {
	if Enabled && !cond {
		panic(fmt.Sprintf("kvbuf invariant violated: "+format, args...))
	}
}

// In hot paths guard calls with Enabled, so that the arguments are not even
// evaluated in a normal build:
//
//	if invariants.Enabled {
//		invariants.Check(spins < maxSpins, "retried %d times", spins)
//	}
