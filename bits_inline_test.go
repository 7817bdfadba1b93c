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
// It also checks that the direct path keeps its view reachable past the
// byte's load (runtime.KeepAlive after it, rule B12): no test can stop a
// goroutine between the address and the load, where a collection could
// otherwise unmap the byte (mutation 613).
func TestBitsGetInlines(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package with -gcflags=-m")
	}
	out, err := exec.Command("go", "build", "-gcflags=-m", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=-m: %v\n%s", err, out)
	}
	m2, err := exec.Command("go", "build", "-gcflags=-m=2", "./internal/buffer").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=-m=2 ./internal/buffer: %v\n%s", err, m2)
	}
	// The inlined body as the compiler prints it: the byte's load, then
	// the KeepAlive of the view it came from.
	if re := regexp.MustCompile(`(?m)can inline \(\*Bits\)\.Lookup with cost \d+ as: .*x := \*\(\*uint8\)\(unsafe\.Add\(v\.base, [^;]*\)\); runtime\.KeepAlive\(v\); return`); !re.Match(m2) {
		t.Errorf("buffer.(*Bits).Lookup's inlined body does not keep v alive past the byte's load (no match for %s)", re)
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
