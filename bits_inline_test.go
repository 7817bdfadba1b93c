package kvbuf

import (
	"os/exec"
	"regexp"
	"testing"
)

// TestBitsGetInlines checks that Bits.Get stays inlinable with the
// overlay's direct path (buffer.Bits.Lookup) inlined in it, so that a host's
// lookup with nothing pending makes no call (issue 26, bitsget20): a change
// that pushes Get past the inliner's budget (all 80 with Go 1.26) costs
// W1's lookups a third of their speed and no other test would notice.
func TestBitsGetInlines(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package with -gcflags=-m")
	}
	out, err := exec.Command("go", "build", "-gcflags=-m", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=-m: %v\n%s", err, out)
	}
	for _, re := range []string{
		`(?m)^\./bits\.go:\d+:\d+: can inline \(\*Bits\)\.Get$`,
		`(?m)^\./bits\.go:\d+:\d+: inlining call to buffer\.\(\*Bits\)\.Lookup$`,
	} {
		if !regexp.MustCompile(re).Match(out) {
			t.Errorf("go build -gcflags=-m: no line matches %s", re)
		}
	}
}
