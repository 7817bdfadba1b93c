// Package testutil holds test scaffolding shared by kvbuf's test suites:
// re-executing the test binary as a child process with a role (crash
// children, a second process holding a lock), the line protocol such
// children use to report to their parent, pebble's crashable memory file system
// (CrashableMem) and a file system that holds a file's creation (HoldFS). It is
// imported by tests only.
package testutil

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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

// RunAndKill starts cmd, a child that reports with the report protocol,
// waits for its first report line, SIGKILLs it once wait has passed (unless
// it died first) and returns its report, its standard error and whether the
// kill was ours (false: it killed itself). It fails t if the child's report
// is malformed, if it died before it was ready, or if it died otherwise
// than by SIGKILL. cmd's Stdout and Stderr must be unset.
func RunAndKill(t testing.TB, cmd *exec.Cmd, wait time.Duration) (rep *Report, stderr string, killedByUs bool) {
	t.Helper()
	rep, stderr, killedByUs = RunAndKillEarly(t, cmd, wait)
	if !rep.Ready {
		t.Fatalf("child died before it was ready:\n%s", stderr)
	}
	return rep, stderr, killedByUs
}

// RunAndKillEarly is RunAndKill for a child whose self-kill points are
// armed while it opens its engine, so that a crash during Open is a
// legitimate outcome: a child killed by SIGKILL before its R line is
// returned (rep.Ready false, killedByUs false), not failed. Such a kill is
// the child's own (or the system's): the parent arms its timer only after
// the first line, or after the child's output closed. The caller checks
// the state the child left, knowing it started no op.
func RunAndKillEarly(t testing.TB, cmd *exec.Cmd, wait time.Duration) (rep *Report, stderr string, killedByUs bool) {
	t.Helper()
	var errOut strings.Builder
	cmd.Stderr = &errOut
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	type result struct {
		rep *Report
		err error
	}
	res := make(chan result, 1)
	go func() {
		rep, err := ReadReport(stdout, func() { close(ready) })
		res <- result{rep, err}
	}()
	<-ready
	timer := time.AfterFunc(wait, func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
	r := <-res // EOF once the child is dead; Wait closes the pipe, so it comes second
	err = cmd.Wait()
	killedByUs = !timer.Stop()
	if r.err != nil {
		t.Fatalf("child: %v\nstderr:\n%s", r.err, errOut.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child: %v\n%s", err, errOut.String())
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child exited on its own (%v), not by SIGKILL:\n%s", err, errOut.String())
	}
	if !r.rep.Ready {
		// Our timer, armed at EOF, may have fired (wait 0) at the
		// zombie; the kill was not ours.
		killedByUs = false
	}
	return r.rep, errOut.String(), killedByUs
}

// EnvInt returns the integer in environment variable name, or def if it is
// unset; a value that is not an integer fails t.
func EnvInt(t testing.TB, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return n
}
