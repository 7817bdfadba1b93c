package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvbuf/kvbuf/bench"
)

// runMainEnv makes the test binary run kvtool's main instead of the tests
// (TestBenchSIGTERM runs it as a child process to signal it).
const runMainEnv = "KVTOOL_TEST_RUN_MAIN"

func init() {
	if os.Getenv(runMainEnv) == "1" {
		main()
	}
}

// cancelOn is a progress writer that cancels the context once the
// progress line names a workload: the workloads before it have finished.
type cancelOn struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	marker string
	cancel context.CancelFunc
}

func (c *cancelOn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(p)
	if strings.Contains(c.buf.String(), c.marker) {
		c.cancel()
	}
	return len(p), nil
}

// TestBenchInterrupted: a bench interrupted once W4/flush-g1 is done
// prints the table of the rows it finished, removes its temporary
// directory and exits 1 with one line on stderr.
func TestBenchInterrupted(t *testing.T) {
	tmp := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	progress := &cancelOn{marker: "W4/flush-g4/", cancel: cancel}
	var stdout bytes.Buffer
	code := runContext(ctx, []string{"bench", "--workload", "W4", "--scale", "0.0005", "--per-goroutine", "2",
		"--rounds", "2", "--dir", tmp, "--progress"}, &stdout, progress)
	out := stdout.String()
	if code != exitError {
		t.Errorf("exit %d, want %d", code, exitError)
	}
	errOut := progress.buf.String() // the progress bar (redrawn after \r), then the error line
	last := errOut[strings.LastIndexAny(strings.TrimSuffix(errOut, "\n"), "\r\n")+1:]
	if !strings.HasPrefix(last, "kvtool bench: interrupted") || strings.Count(last, "\n") != 1 || strings.Contains(errOut, "100%") {
		t.Errorf("stderr ends with %q, want one 'interrupted' line (and no 100%%)", last)
	}
	if !strings.Contains(out, "W4/flush-g1 ") || !strings.Contains(out, "careful-group-commit") || strings.Contains(out, "W4/flush-g64") {
		t.Errorf("table of finished rows:\n%s", out)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("interrupted bench left %v in %s", left, tmp)
	}
}

// TestBenchSIGTERM runs kvtool bench --json as a child process, sends it
// SIGTERM once it printed its first row, and checks that it prints no more
// than the rows it finished, removes its temporary directory and exits 1.
func TestBenchSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	tmp := t.TempDir()
	cmd := exec.Command(os.Args[0], "bench", "--json", "--workload", "W4", "--scale", "0.0005", "--per-goroutine", "20",
		"--rounds", "3", "--dir", tmp)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var rows []map[string]any
	signalled := false
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		rows = append(rows, r)
		if !signalled {
			signalled = true
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("bench did not stop within 2 minutes of SIGTERM; stderr %q", stderr.String())
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitError {
		t.Errorf("exit: %v, want status %d; stderr %q", err, exitError, stderr.String())
	}
	if !strings.HasPrefix(stderr.String(), "kvtool bench: interrupted") || strings.Count(stderr.String(), "\n") != 1 {
		t.Errorf("stderr %q, want one 'interrupted' line", stderr.String())
	}
	if len(rows) == 0 || len(rows) >= 5*4 {
		t.Errorf("%d rows printed, want those of the workloads finished before SIGTERM", len(rows))
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("bench left %v in %s after SIGTERM", left, tmp)
	}
}

// TestREADMECommands checks the README's command table against the
// commands and their flag sets: every command has a row, and a row lists
// exactly the flags the command's -h lists.
func TestREADMECommands(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "\n## Commands\n")
	if start < 0 {
		t.Fatal("README has no Commands section")
	}
	section := readme[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	rowRe := regexp.MustCompile("(?m)^\\| `([a-z]+)[^|]*\\|[^|]*\\|([^\\n]*)\\|$")
	flagRe := regexp.MustCompile("`-{1,2}([a-z][a-z0-9-]*)")
	rows := map[string][]string{}
	for _, m := range rowRe.FindAllStringSubmatch(section, -1) {
		var flags []string
		for _, f := range flagRe.FindAllStringSubmatch(m[2], -1) {
			flags = append(flags, f[1])
		}
		slices.Sort(flags)
		rows[m[1]] = flags
	}
	for _, c := range commands() {
		var out bytes.Buffer
		if code := run([]string{c.name, "-h"}, &out, io.Discard); code != exitOK {
			t.Fatalf("%s -h: exit %d", c.name, code)
		}
		_, flagsPart, ok := strings.Cut(out.String(), "\nFlags:\n")
		if !ok {
			t.Fatalf("%s -h lists no flags", c.name)
		}
		var want []string
		for _, line := range strings.Split(flagsPart, "\n") {
			if f, ok := strings.CutPrefix(line, "  --"); ok {
				want = append(want, strings.Fields(f)[0])
			}
		}
		slices.Sort(want)
		got, ok := rows[c.name]
		if !ok {
			t.Errorf("README's command table has no row for %s", c.name)
			continue
		}
		if !slices.Equal(got, want) {
			t.Errorf("README lists %s's flags as %v; kvtool %s -h lists %v", c.name, got, c.name, want)
		}
		delete(rows, c.name)
	}
	for name := range rows {
		t.Errorf("README's command table has a row for %s, which is not a command", name)
	}
}

// TestBenchCPUProfile: --cpuprofile writes a profile pprof can read (a
// gzipped protocol buffer) covering the run; a path that cannot be created
// fails the run before anything is measured.
func TestBenchCPUProfile(t *testing.T) {
	tmp := t.TempDir()
	prof := filepath.Join(tmp, "cpu.prof")
	var stdout, stderr bytes.Buffer
	args := []string{"bench", "--workload", "W4/flush-g1", "--scale", "0.0005", "--per-goroutine", "2",
		"--rounds", "1", "--dir", tmp, "--cpuprofile", prof}
	if code := runContext(t.Context(), args, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	b, err := os.ReadFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("profile of %d bytes is not gzipped", len(b))
	}
	stdout.Reset()
	stderr.Reset()
	args[len(args)-1] = filepath.Join(tmp, "missing", "cpu.prof")
	if code := runContext(t.Context(), args, &stdout, &stderr); code != exitError || !strings.Contains(stderr.String(), "cpu profile") {
		t.Fatalf("unwritable profile path: exit %d, stderr %q", code, stderr.String())
	}
	if stdout.Len() != 0 {
		t.Fatalf("a refused run printed:\n%s", stdout.String())
	}
}

// TestBenchQuickReadsBackEverything: --quick makes every write row read
// back every value it wrote (package bench's TestBrokenBaselineFails shows
// that one dropped or stale value then fails the run); a run whose write
// row read back something else exits 1 with one line naming the row, and
// prints no table.
func TestBenchQuickReadsBackEverything(t *testing.T) {
	var stdout, stderr bytes.Buffer
	a, _, done := parseBench([]string{"--quick"}, &stdout, &stderr)
	if done || a.cfg.ReadBack >= 0 || a.rounds != 3 {
		t.Fatalf("--quick: read back %d values per round, %d rounds (done %t); want every value, 3 rounds", a.cfg.ReadBack, a.rounds, done)
	}
	if a, _, _ = parseBench(nil, &stdout, &stderr); a.cfg.ReadBack != 0 || a.rounds != 0 || roundsFor(a.rounds, 3) != bench.DefaultRounds || roundsFor(a.rounds, 12) != 12 {
		t.Fatalf("defaults: read back %d, rounds %d", a.cfg.ReadBack, a.rounds)
	}
	defer func(f func(context.Context, string, *bench.Config) (*bench.Suite, error)) { openSuite = f }(openSuite)
	var cfgSeen bench.Config
	openSuite = func(_ context.Context, name string, cfg *bench.Config) (*bench.Suite, error) {
		cfgSeen = *cfg
		ok := bench.RoundFunc(func(context.Context, int) (bench.RoundResult, error) {
			return bench.RoundResult{Ops: 1, Checks: 1, ReadBack: 1}, nil
		})
		broken := bench.RoundFunc(func(context.Context, int) (bench.RoundResult, error) {
			return bench.RoundResult{Ops: 1, Checks: 1}, fmt.Errorf("%w: broken-baseline: key 01 was written (02) but is missing", bench.ErrReadBack)
		})
		return &bench.Suite{Name: name, Workloads: []*bench.Workload{{Name: "W8/batch-64-puts", Unit: "put", Writes: true,
			Impls: []bench.Impl{{Name: "kvbuf", Round: ok}, {Name: "broken-baseline", Round: broken}}}}}, nil
	}
	stdout.Reset()
	stderr.Reset()
	code := runContext(t.Context(), []string{"bench", "--quick", "--workload", "W8/batch-64-puts"}, &stdout, &stderr)
	if code != exitError || cfgSeen.ReadBack >= 0 {
		t.Errorf("exit %d (want %d), suite opened with read back %d", code, exitError, cfgSeen.ReadBack)
	}
	if e := stderr.String(); !strings.Contains(e, "broken-baseline") || !strings.Contains(e, "read back something other") || strings.Count(e, "\n") != 1 {
		t.Errorf("stderr %q, want one line naming the broken row", e)
	}
	if stdout.Len() != 0 {
		t.Errorf("a failed run printed a table:\n%s", stdout.String())
	}
}

// TestBenchTableBusyNote: a row whose quiesce or settle step found a store
// still busy at its deadline says so in its NOTE, with or without a disk
// figure or a label, and the table explains the note; a table without
// such a row has neither.
func TestBenchTableBusyNote(t *testing.T) {
	row := func(impl, label string, busy int) bench.Row {
		return bench.Row{Workload: "W2/get", Impl: impl, Label: label, Unit: "get", Rounds: 3, NsPerOp: []float64{1, 1, 1}, Median: 1, Min: 1, Max: 1, BusyRounds: busy}
	}
	var b strings.Builder
	printBenchTable(&b, []bench.Row{row("kvbuf", "", 2), row("pebble", "write only", 1), row("mutex+map", "", 0)}, bench.Config{}, 3)
	out := b.String()
	for _, want := range []string{"  store busy 2/3 rounds\n", "  write only; store busy 1/3 rounds\n", "STORE BUSY N/M ROUNDS"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "store busy") != 2 {
		t.Errorf("busy notes on rows without busy rounds:\n%s", out)
	}
	b.Reset()
	printBenchTable(&b, []bench.Row{row("kvbuf", "", 0)}, bench.Config{}, 3)
	if out := b.String(); strings.Contains(strings.ToLower(out), "store busy") {
		t.Errorf("a table without busy rounds mentions them:\n%s", out)
	}
}
