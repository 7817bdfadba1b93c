// Package testutil holds test scaffolding shared by kvbuf's test suites:
// re-executing the test binary as a child process with a role (crash
// children, a second process holding a lock), and the line protocol such
// children use to report to their parent. It is imported by tests only.
package testutil

import (
	"os"
	"os/exec"
	"testing"
)

// ChildEnv names the role of a re-executed test binary; empty in the parent.
const ChildEnv = "KVBUF_TEST_CHILD"

// Roles maps child roles to their main functions, which return the child's
// exit status. A test package registers its roles (in init functions) and
// calls RunChild first thing in TestMain.
type Roles map[string]func() int

// RunChild runs the role named by ChildEnv and reports its exit status, or
// ok = false if this process is not a child. An unknown role exits with 2.
func (r Roles) RunChild() (code int, ok bool) {
	role := os.Getenv(ChildEnv)
	if role == "" {
		return 0, false
	}
	main, found := r[role]
	if !found {
		os.Stderr.WriteString("testutil: unknown child role " + role + "\n")
		return 2, true
	}
	return main(), true
}

// Reexec returns a command that runs this test binary as a child with role
// (running no tests of its own), with env added to this process's
// environment.
func Reexec(t testing.TB, role string, env ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(append(os.Environ(), ChildEnv+"="+role), env...)
	return cmd
}
