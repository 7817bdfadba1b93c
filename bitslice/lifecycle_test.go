package bitslice

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

func TestLockInProcess(t *testing.T) {
	f := create(t, 10)
	// flock locks belong to the open file description, so a second Open in
	// the same process conflicts just as another process would.
	if g, err := Open(f.Path()); !errors.Is(err, kverr.ErrLocked) {
		closeIf(g)
		t.Fatalf("second Open while created file is open: %v, want ErrLocked", err)
	}
	g := reopen(t, f)
	if h, err := Open(g.Path()); !errors.Is(err, kverr.ErrLocked) {
		closeIf(h)
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	h, err := Open(g.Path())
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	h.Close()
}

func TestLockOtherProcess(t *testing.T) {
	f := create(t, 10)
	run := func() int {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), lockHelperEnv+"="+f.Path())
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ee.ExitCode() == 4 {
				t.Logf("helper: %s", stderr.String())
			}
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	}
	if code := run(); code != 3 {
		t.Fatalf("other process opening a held file: exit %d, want 3 (ErrLocked)", code)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if code := run(); code != 0 {
		t.Fatalf("other process opening a released file: exit %d, want 0", code)
	}
}

func TestClose(t *testing.T) {
	f := create(t, 200)
	if err := f.Set(5, true); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := f.Close(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if f.Get(5) || f.Word(0) != 0 || f.CountOnes() != 0 {
		t.Fatal("reads after Close see data")
	}
	if f.Len() != 200 {
		t.Fatalf("Len after Close %d, want 200", f.Len())
	}
	for name, err := range map[string]error{
		"Set":        f.Set(1, true),
		"ApplyWords": f.ApplyWords([]WordChange{{0, 1, 1}}),
		"Grow":       f.Grow(1000),
		"Sync":       f.Sync(),
	} {
		if !errors.Is(err, kverr.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	f.SetWatermark(3) // harmless
	if info := f.Info(); info.Len != 200 || info.Ones != 0 {
		t.Fatalf("Info after Close: %+v", info)
	}
	h, err := Open(f.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if !h.Get(5) {
		t.Fatal("bit set before Close lost")
	}
}

// Close releases the lock at once and leaves the mappings in place: a View
// loaded before Close reads the file's words after it (never zeros), the
// file opens again while that View is still held, and every mapping goes
// once no View of it is reachable.
func TestCloseLeavesMappings(t *testing.T) {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip("no /proc/self/maps")
	}
	f := create(t, 1<<10)
	if err := f.Set(5, true); err != nil {
		t.Fatal(err)
	}
	old := f.View()                         // of the first mapping
	if err := f.Grow(1 << 24); err != nil { // forces a second mapping
		t.Fatal(err)
	}
	if err := f.Set(1<<24-1, true); err != nil {
		t.Fatal(err)
	}
	cur := f.View()
	live := f.live
	if n := live.Load(); n != 2 {
		t.Fatalf("%d mappings live, want 2", n)
	}
	maps, _ = os.ReadFile("/proc/self/maps")
	if c := bytes.Count(maps, []byte(f.Path())); c != 2 {
		t.Fatalf("/proc/self/maps lists the file %d times, want 2", c)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// Views loaded before Close read the file's words, through either
	// mapping (a read linearizable before Close).
	if w := atomic.LoadUint64(&old.Words()[0]); w != 1<<5 {
		t.Fatalf("old view's word 0 after Close: %#x, want %#x", w, uint64(1<<5))
	}
	cw := cur.Words()
	if w := atomic.LoadUint64(&cw[len(cw)-1]); w != 1<<63 {
		t.Fatalf("current view's last word after Close: %#x, want %#x", w, uint64(1<<63))
	}
	// The lock went with Close, though the mappings keep the open file
	// description alive.
	g, err := Open(f.Path())
	if err != nil {
		t.Fatalf("Open after Close while a view is held: %v", err)
	}
	glive := g.live
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(old)
	runtime.KeepAlive(cur)
	old, cur, cw = nil, nil, nil
	for i := 0; i < 100 && live.Load()+glive.Load() != 0; i++ {
		runtime.GC()
		runtime.Gosched()
	}
	if n := live.Load() + glive.Load(); n != 0 {
		t.Fatalf("%d mappings never unmapped", n)
	}
	maps, _ = os.ReadFile("/proc/self/maps")
	if bytes.Contains(maps, []byte(f.Path())) {
		t.Fatalf("file still mapped once no view is reachable:\n%s", maps)
	}
}

// A process killed with SIGKILL in the middle of a stream of Syncs leaves a
// file that opens, whose watermark is covered by the data, and whose lock
// went with the process.
func TestSIGKILLDuringSyncs(t *testing.T) {
	f := create(t, 1<<16)
	path := f.Path()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), syncLoopEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for n := 0; n < 200 && sc.Scan(); n++ { // kill mid-stream, after 200 syncs
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	g, err := Open(path)
	if err != nil {
		t.Fatalf("Open after SIGKILL: %v", err)
	}
	defer g.Close()
	wm := g.Watermark()
	if wm < 200 {
		t.Fatalf("watermark %d, but 200 syncs were reported done", wm)
	}
	for k := uint64(1); k <= wm; k++ {
		if !g.Get(k) {
			t.Fatalf("watermark %d is ahead of the data: bit %d not set", wm, k)
		}
	}
}
