package enginedir

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

var (
	raceRounds   = flag.Int("race.rounds", 40, "rounds per starting state in TestOpenRace")
	raceProcs    = flag.Int("race.procs", 8, "processes per round in TestOpenRaceProcesses")
	raceProcRuns = flag.Int("race.procrounds", 6, "rounds in TestOpenRaceProcesses")
)

// raceStart is a starting state of a racing Open.
type raceStart struct {
	name  string
	setup func(t testing.TB) string // the path to open
	// lock is what LOCK holds after the race.
	lock string
}

var raceStarts = []raceStart{
	{"absent directory", func(t testing.TB) string { return filepath.Join(t.TempDir(), "e") }, lockText},
	{"empty directory", func(t testing.TB) string { return t.TempDir() }, lockText},
	{"lone kvbuf LOCK", func(t testing.TB) string {
		d := t.TempDir()
		writeFile(t, filepath.Join(d, LockName), lockText)
		return d
	}, lockText},
	{"initialising manifest without LOCK", func(t testing.TB) string {
		d := t.TempDir()
		writeFile(t, filepath.Join(d, ManifestName), manifestInit)
		return d
	}, lockText},
	{"ready engine with an empty LOCK", func(t testing.TB) string {
		d := t.TempDir()
		makeEngine(t, d)
		return d
	}, ""},
	{"ready engine without LOCK", func(t testing.TB) string {
		d := t.TempDir()
		makeEngine(t, d)
		if err := os.Remove(filepath.Join(d, LockName)); err != nil {
			t.Fatal(err)
		}
		return d
	}, lockText},
}

// TestOpenRace races 16 Opens on one directory, round after round, from
// every starting state: exactly one wins (and finishes the initialisation
// while the others still try), every other gets kverr.ErrLocked, never another
// error, and afterwards the directory is exactly a ready engine.
func TestOpenRace(t *testing.T) {
	const openers = 16
	rounds := *raceRounds
	if testing.Short() {
		rounds = 5
	}
	for _, st := range raceStarts {
		t.Run(st.name, func(t *testing.T) {
			for round := range rounds {
				dir := st.setup(t)
				start := make(chan struct{})
				var wg sync.WaitGroup
				var mu sync.Mutex
				var winners []*Dir
				var others []error
				for range openers {
					wg.Go(func() {
						<-start
						d, err := Open(dir, nil)
						if err == nil {
							err = finishInit(d) // while the others are still racing
						}
						mu.Lock()
						if d != nil {
							winners = append(winners, d)
						}
						if err != nil {
							others = append(others, err)
						}
						mu.Unlock()
					})
				}
				close(start)
				wg.Wait()
				for _, d := range winners {
					closeT(t, d)
				}
				if len(winners) != 1 {
					t.Fatalf("round %d: %d Opens won", round, len(winners))
				}
				for _, err := range others {
					if !errors.Is(err, kverr.ErrLocked) {
						t.Fatalf("round %d: a losing Open got %v, want ErrLocked", round, err)
					}
				}
				checkReady(t, dir, st.lock)
			}
		})
	}
}

// checkReady checks that dir is exactly a ready engine whose LOCK holds
// lock, with nothing left over.
func checkReady(t testing.TB, dir, lock string) {
	t.Helper()
	wantEntries(t, dir, ManifestName, LockName, BitsDir, StoreDir)
	if got := readString(t, filepath.Join(dir, ManifestName)); got != manifestReady {
		t.Fatalf("manifest %q", got)
	}
	if got := readString(t, filepath.Join(dir, LockName)); got != lock {
		t.Fatalf("LOCK holds %q, want %q", got, lock)
	}
}

// TestOpenRaceForeign races Opens on foreign directories: every one gets
// kverr.ErrNotEngine and the directory is left byte for byte as it was.
func TestOpenRaceForeign(t *testing.T) {
	starts := map[string]func(t testing.TB, d string){
		"lone empty LOCK": func(t testing.TB, d string) { writeFile(t, filepath.Join(d, LockName), "") },
		"foreign file":    func(t testing.TB, d string) { writeFile(t, filepath.Join(d, "precious.txt"), "x") },
		"kvbuf LOCK and a foreign file": func(t testing.TB, d string) {
			writeFile(t, filepath.Join(d, LockName), lockText)
			writeFile(t, filepath.Join(d, "precious.txt"), "x")
		},
	}
	for name, setup := range starts {
		t.Run(name, func(t *testing.T) {
			for range 10 {
				dir := t.TempDir()
				setup(t, dir)
				before := hashTree(t, dir)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for range 16 {
					wg.Go(func() {
						<-start
						d, err := Open(dir, nil)
						if err == nil {
							d.Close()
							t.Error("Open of a foreign directory succeeded")
						} else if !errors.Is(err, kverr.ErrNotEngine) {
							t.Errorf("Open of a foreign directory: %v, want ErrNotEngine", err)
						}
					})
				}
				close(start)
				wg.Wait()
				if hashTree(t, dir) != before {
					t.Fatal("racing Opens changed a foreign directory")
				}
			}
		})
	}
}

// TestOpenRaceWithFailures races Opens on an empty directory that turns
// foreign just after the first of them takes the lock, and clean again as
// soon as another takes it (the hook). The first refuses and removes the
// LOCK it made while the others race on; some of them opened that LOCK
// before it was removed and lock it afterwards, which must not count as
// holding the engine lock. At most one Open wins, every other fails with
// kverr.ErrLocked or kverr.ErrNotEngine, and the directory ends up a ready engine
// or, if nobody won, as the foreign directory it was.
func TestOpenRaceWithFailures(t *testing.T) {
	defer func() { testHook = nil }()
	for round := range 100 {
		dir := t.TempDir()
		precious := filepath.Join(dir, "precious.txt")
		var calls atomic.Int32
		testHook = func(point, path string) {
			if point != "locked" {
				return
			}
			if calls.Add(1) == 1 {
				writeFile(t, precious, "x")
			} else if err := os.Remove(precious); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Error(err)
			}
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		var winners []*Dir
		for range 16 {
			wg.Go(func() {
				<-start
				d, err := Open(dir, nil)
				if err == nil {
					err = finishInit(d)
					mu.Lock()
					winners = append(winners, d)
					mu.Unlock()
				}
				if err != nil && !errors.Is(err, kverr.ErrLocked) && !errors.Is(err, kverr.ErrNotEngine) {
					t.Errorf("round %d: Open: %v", round, err)
				}
			})
		}
		close(start)
		wg.Wait()
		testHook = nil
		for _, d := range winners {
			closeT(t, d)
		}
		switch len(winners) {
		case 0:
			wantEntries(t, dir, "precious.txt")
		case 1:
			checkReady(t, dir, lockText)
		default:
			t.Fatalf("round %d: %d Opens won", round, len(winners))
		}
	}
}

// TestOpenRaceProcesses races Opens across processes: the test binary is
// re-executed once per opener, all are released at once, and exactly one
// may win while every other reports kverr.ErrLocked.
func TestOpenRaceProcesses(t *testing.T) {
	rounds := *raceProcRuns
	if testing.Short() {
		rounds = 2
	}
	for round := range rounds {
		dir := raceStarts[round%2].setup(t) // absent, then empty
		type child struct {
			cmd   *exec.Cmd
			stdin io.WriteCloser
			out   *bufio.Scanner
		}
		var children []child
		for range *raceProcs {
			cmd := reexec(t, "open", dir)
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			children = append(children, child{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)})
			t.Cleanup(func() { // after a failure: stop the children
				if cmd.ProcessState == nil {
					stdin.Close()
					_ = cmd.Wait()
				}
			})
		}
		readLine := func(c child) string {
			if !c.out.Scan() {
				return fmt.Sprintf("no output (%v)", c.out.Err())
			}
			return c.out.Text()
		}
		for _, c := range children {
			if l := readLine(c); l != "ready" {
				t.Fatalf("child: %q", l)
			}
		}
		for _, c := range children {
			if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
				t.Fatal(err)
			}
		}
		won := 0
		for _, c := range children {
			switch l := readLine(c); l {
			case "won":
				won++
				if l := readLine(c); l != "done" {
					t.Fatalf("round %d: winner: %q", round, l)
				}
			case "locked":
			default:
				t.Fatalf("round %d: a losing process got %q, want ErrLocked", round, l)
			}
		}
		for _, c := range children {
			c.stdin.Close()
			if err := c.cmd.Wait(); err != nil {
				t.Fatalf("child: %v", err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d processes won", round, won)
		}
		checkReady(t, dir, lockText)
	}
}
