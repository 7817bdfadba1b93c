package kvbuf

// Crash tests (contracts 2 and 4): a child process — this test binary,
// re-executed — writes KV and bit changes numbered 1, 2, 3, ... and flushes
// in a loop; the parent kills it with SIGKILL at a random moment, or the
// child kills itself at a chosen point (a failpoint inside bitslice, or a
// pebble WAL write or sync). After every kill the parent reopens the engine
// and checks:
//
//   - Open succeeds and the watermark wm is at least that of every Flush the
//     child saw succeed (an acknowledged flush is durable);
//   - the keyspace holds exactly the changes of ops 1..wm (the watermark is
//     in the same pebble batch as the data, so neither is ahead);
//   - every bit holds its value as of op wm or a value a later op wrote
//     (bitslices are flushed before the receipt, so they may be ahead of
//     it, never behind);
//   - wm is not ahead of anything the child had started.
//
// The child continues from wm+1, as a host replaying its log would; op n
// always makes the same change, so replaying is idempotent.
//
// Also here: the same workload in-process over vfs.NewCrashableMem, whose
// CrashClone keeps only what pebble synced (power-loss semantics for the
// store), taken at deterministic points inside pebble's WAL writes.

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/kvbuf/kvbuf/internal/failpoint"
)

var (
	crashIterations = flag.Int("crash.iterations", 20, "kills in TestCrashRecovery (env KVBUF_CRASH_ITERATIONS overrides; 1000 for a soak)")
	crashSeed       = flag.Uint64("crash.seed", 0, "seed of TestCrashRecovery and TestCrashableMemStore (0: time-based, printed)")
)

// Environment of a re-executed test binary. testChildEnv names its role.
const (
	testChildEnv   = "KVBUF_TEST_CHILD" // "crash", "lock"
	childDirEnv    = "KVBUF_CHILD_DIR"
	childSeedEnv   = "KVBUF_CHILD_SEED"
	childPointEnv  = "KVBUF_CHILD_POINT" // crash: "name:n" kills the child at the n-th hit of a point
	childFaultEnv  = "KVBUF_CHILD_FAULT" // crash: "error" makes the point fail from its n-th hit on instead
	crashKeyspace  = "crash"
	crashBitslice  = "crash"
	crashKeys      = 2000
	crashMaxBits   = 1 << 18
	crashWChunk    = 256 // ops promised per "W" line
	childLifetime  = 60 * time.Second
	crashWaitPoint = 5 * time.Second // a self-kill point not reached by then is killed from outside
)

// runTestChild runs the role of a re-executed test binary and returns its
// exit status, or -1 if this process is not a child.
func runTestChild() int {
	switch os.Getenv(testChildEnv) {
	case "":
		return -1
	case "crash":
		return crashChild()
	case "lock":
		return lockChild()
	}
	fmt.Fprintf(os.Stderr, "unknown %s=%q\n", testChildEnv, os.Getenv(testChildEnv))
	return 2
}

// reexec returns a command running this test binary as a child with role.
func reexec(t testing.TB, role string, env ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(append(os.Environ(), testChildEnv+"="+role), env...)
	return cmd
}

// crashOp is the change op n makes. It depends on n alone.
type crashOp struct {
	kind  byte // 'p' put, 'd' delete, 'b' bit
	key   string
	value string
	bit   uint64
	bv    bool
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func crashOpFor(n uint64) crashOp {
	h := splitmix(n)
	switch k := h % 10; {
	case k < 5:
		pad := strings.Repeat("x", int(h>>50%64))
		return crashOp{kind: 'p', key: fmt.Sprintf("key%04d", h>>8%crashKeys), value: fmt.Sprintf("v%d%s", n, pad)}
	case k < 7:
		return crashOp{kind: 'd', key: fmt.Sprintf("key%04d", h>>8%crashKeys)}
	default:
		// The index range widens with n, so flushes keep growing the file.
		return crashOp{kind: 'b', bit: h >> 20 % min(4096+n/2, crashMaxBits), bv: h>>40&1 == 1}
	}
}

// crashModel is the state after ops 1..upTo.
type crashModel struct {
	upTo uint64
	kv   map[string]string
	bits map[uint64]bool
}

func newCrashModel() *crashModel {
	return &crashModel{kv: map[string]string{}, bits: map[uint64]bool{}}
}

func (m *crashModel) advance(to uint64) {
	for n := m.upTo + 1; n <= to; n++ {
		switch o := crashOpFor(n); o.kind {
		case 'p':
			m.kv[o.key] = o.value
		case 'd':
			delete(m.kv, o.key)
		case 'b':
			m.bits[o.bit] = o.bv
		}
	}
	m.upTo = max(m.upTo, to)
}

// verifyCrashState opens dir and checks it against the model as described
// at the top of the file. acked is the highest watermark a successful Flush
// reported; maxOp bounds the ops any writer had started — over every
// incarnation, not just the last: bits written ahead of the watermark by an
// earlier writer survive its crash until a replay overwrites them.
func verifyCrashState(t testing.TB, dir string, opts *Options, m *crashModel, acked, maxOp uint64) (wm uint64) {
	t.Helper()
	db, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("reopen after crash: %v", err)
	}
	defer closeT(t, db)
	wm = db.Watermark()
	switch {
	case wm < acked:
		t.Fatalf("watermark %d after crash is behind the acknowledged flush of %d: a flushed write was lost", wm, acked)
	case wm > maxOp:
		t.Fatalf("watermark %d after crash is ahead of every op the writer started (<= %d)", wm, maxOp)
	case wm < m.upTo:
		t.Fatalf("watermark went backwards: %d after an earlier %d", wm, m.upTo)
	}
	m.advance(wm)
	if len(db.Keyspaces()) == 0 {
		if len(m.kv) != 0 {
			t.Fatalf("keyspace missing after crash with watermark %d", wm)
		}
	} else {
		k := mustKV(t, db, crashKeyspace)
		for i := range crashKeys {
			key := fmt.Sprintf("key%04d", i)
			want, ok := m.kv[key]
			got, err := k.Get([]byte(key))
			switch {
			case ok && (err != nil || string(got) != want):
				t.Fatalf("wm %d: Get(%s) = %.20q, %v; want %.20q", wm, key, got, err, want)
			case !ok && !errors.Is(err, ErrNotFound):
				t.Fatalf("wm %d: Get(%s) = %.20q, %v; want ErrNotFound (the data is ahead of the watermark)", wm, key, got, err)
			}
		}
		it, err := k.NewIter(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for ok := it.First(); ok; ok = it.Next() {
			if want, ok := m.kv[string(it.Key())]; !ok || want != string(it.Value()) {
				t.Fatalf("wm %d: scan found %s=%.20q, model has %.20q (present %v)", wm, it.Key(), it.Value(), want, ok)
			}
			n++
		}
		if err := errors.Join(it.Error(), it.Close()); err != nil {
			t.Fatal(err)
		}
		if n != len(m.kv) {
			t.Fatalf("wm %d: scan found %d keys, model has %d", wm, n, len(m.kv))
		}
	}
	// Bits: the value at wm, or one a later started op wrote.
	later := map[uint64][]bool{}
	for n := wm + 1; n <= maxOp; n++ {
		if o := crashOpFor(n); o.kind == 'b' {
			later[o.bit] = append(later[o.bit], o.bv)
		}
	}
	if slices.Contains(BitsNamesT(t, dir), crashBitslice) {
		b := mustBits(t, db, crashBitslice)
		check := func(i uint64) {
			got, err := b.Get(i)
			if err != nil {
				t.Fatal(err)
			}
			if got != m.bits[i] && !slices.Contains(later[i], got) {
				t.Fatalf("wm %d: bit %d = %v; the value at wm is %v and later ops wrote %v", wm, i, got, m.bits[i], later[i])
			}
		}
		for i := range m.bits {
			check(i)
		}
		for i := range later {
			check(i)
		}
		for i := uint64(0); i < crashMaxBits; i += 97 {
			check(i)
		}
	} else if len(m.bits) != 0 {
		t.Fatalf("bitslice file missing after crash with watermark %d", wm)
	}
	return wm
}

// BitsNamesT is BitsNames failing t on error.
func BitsNamesT(t testing.TB, dir string) []string {
	t.Helper()
	names, err := BitsNames(dir)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// crashWorkload runs ops from start on, flushing every 1..300 ops (rng),
// until stop returns true. acked(wm) is called after each successful Flush;
// promise(n) before op n-crashWChunk+1 promises no op above n starts before
// the next promise.
func crashWorkload(db *DB, start uint64, rng *rand.Rand, promise, acked func(uint64), stop func(n uint64) bool) error {
	k, err := db.KV(crashKeyspace)
	if err != nil {
		return err
	}
	b, err := db.Bits(crashBitslice)
	if err != nil {
		return err
	}
	ctx := context.Background()
	nextFlush := start + uint64(rng.IntN(300))
	for n := start; !stop(n); n++ {
		if (n-start)%crashWChunk == 0 {
			promise(n + crashWChunk - 1)
		}
		switch o := crashOpFor(n); o.kind {
		case 'p':
			err = k.Put(ctx, []byte(o.key), []byte(o.value), n)
		case 'd':
			err = k.Delete(ctx, []byte(o.key), n)
		case 'b':
			err = b.Set(ctx, o.bit, o.bv, n)
		}
		if err != nil {
			return fmt.Errorf("op %d: %w", n, err)
		}
		if n >= nextFlush {
			if err := db.Flush(ctx); err != nil {
				return fmt.Errorf("flush after op %d: %w", n, err)
			}
			acked(db.Watermark())
			nextFlush = n + 1 + uint64(rng.IntN(300))
		}
	}
	return nil
}

// crashChild is the re-executed writer. It prints "R <start>" once open,
// "W <n>" before it may start ops up to n, and "F <wm>" after each
// successful Flush, unbuffered, so every line written survives SIGKILL.
func crashChild() int {
	dir := os.Getenv(childDirEnv)
	seed, _ := strconv.ParseUint(os.Getenv(childSeedEnv), 10, 64)
	opts := &Options{FlushInterval: 2 * time.Millisecond}
	if p := os.Getenv(childPointEnv); p != "" {
		name, nth, _ := strings.Cut(p, ":")
		n, _ := strconv.Atoi(nth)
		var hits atomic.Int64
		failing := os.Getenv(childFaultEnv) == "error"
		kill := func() error {
			h := hits.Add(1)
			if failing && h >= int64(n) {
				return errorfs.ErrInjected
			}
			if h == int64(n) {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // SIGKILL is not delivered synchronously
			}
			return nil
		}
		if strings.HasPrefix(name, "pebble/") {
			opts.storeFS = errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
				if strings.HasSuffix(op.Path, ".log") && pebbleOpMatches(name, op.Kind) {
					return kill()
				}
				return nil
			}))
		} else {
			failpoint.Enable(name, kill)
		}
	}
	time.AfterFunc(childLifetime, func() { os.Exit(3) }) // an orphan must not run forever
	db, err := Open(dir, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 4
	}
	start := db.Watermark() + 1
	out := os.Stdout
	fmt.Fprintf(out, "R %d\n", start)
	rng := rand.New(rand.NewPCG(seed, start))
	err = crashWorkload(db, start, rng,
		func(n uint64) { fmt.Fprintf(out, "W %d\n", n) },
		func(wm uint64) { fmt.Fprintf(out, "F %d\n", wm) },
		func(uint64) bool { return false })
	fmt.Fprintln(os.Stderr, "workload:", err)
	return 4
}

// pebbleOpMatches says whether a WAL operation is the one a
// "pebble/wal-write" or "pebble/wal-sync" point names.
func pebbleOpMatches(point string, k errorfs.OpKind) bool {
	switch point {
	case "pebble/wal-write":
		return k == errorfs.OpFileWrite || k == errorfs.OpFileWriteAt
	case "pebble/wal-sync":
		return k == errorfs.OpFileSync || k == errorfs.OpFileSyncData || k == errorfs.OpFileSyncTo
	}
	return false
}

// crashPoints are the self-kill points the crash test cycles through after
// random-timing kills. Failpoints inside bitslice need -tags kvbuf_failpoints.
func crashPoints() []string {
	p := []string{"pebble/wal-write", "pebble/wal-sync"}
	if failpoint.Enabled {
		p = append(p, failpoint.BitsliceSyncMsync, failpoint.BitsliceSyncHeader,
			failpoint.BitsliceApplyWords, failpoint.BitsliceGrowAllocate, failpoint.BitsliceGrowHeader)
	}
	return p
}

func testSeed(t testing.TB, flagVal uint64) uint64 {
	t.Helper()
	seed := flagVal
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -crash.seed %d)", seed, seed)
	return seed
}

func TestCrashRecovery(t *testing.T) {
	iters := *crashIterations
	if s := os.Getenv("KVBUF_CRASH_ITERATIONS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("KVBUF_CRASH_ITERATIONS=%q: %v", s, err)
		}
		iters = n
	}
	if testing.Short() {
		iters = min(iters, 5)
	}
	seed := testSeed(t, *crashSeed)
	rng := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	m := newCrashModel()
	points := crashPoints()
	byMode := map[string]int{}
	var maxOp uint64 // highest op any child may have started
	for i := range iters {
		// Even iterations kill at a random moment; odd ones at a point.
		point := ""
		if i%2 == 1 {
			name, hits := points[(i/2)%len(points)], 40
			if strings.HasPrefix(name, "bitslice/grow/") {
				hits = 4 // growth gets rarer as the file grows: keep the point reachable
			}
			point = fmt.Sprintf("%s:%d", name, 1+rng.IntN(hits))
		}
		acked, childMax, how := runCrashChild(t, dir, seed+uint64(i), point, time.Duration(rng.IntN(250))*time.Millisecond)
		maxOp = max(maxOp, childMax)
		wm := verifyCrashState(t, dir, nil, m, acked, maxOp)
		mode := "random-timing"
		if point != "" {
			mode, _, _ = strings.Cut(point, ":")
		}
		byMode[mode+"/"+how]++
		if testing.Verbose() {
			t.Logf("kill %d (%s, %s): watermark %d, acknowledged %d, started <= %d", i+1, mode, how, wm, acked, maxOp)
		}
	}
	t.Logf("%d kills survived, seed %d: %v", iters, seed, byMode)
}

// runCrashChild runs one child until it dies: killed by us after delay (no
// point) or by itself at point (killed by us if it has not got there in
// crashWaitPoint). It returns the highest acknowledged watermark, the
// highest op the child may have started, and how it died.
func runCrashChild(t *testing.T, dir string, seed uint64, point string, delay time.Duration) (acked, maxOp uint64, how string) {
	t.Helper()
	cmd := reexec(t, "crash", childDirEnv+"="+dir, childSeedEnv+"="+strconv.FormatUint(seed, 10), childPointEnv+"="+point)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	lines := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		first := true
		for sc.Scan() {
			kind, num, _ := strings.Cut(sc.Text(), " ")
			n, _ := strconv.ParseUint(num, 10, 64)
			switch kind {
			case "R":
				maxOp = n - 1
			case "W":
				maxOp = max(maxOp, n)
			case "F":
				acked = max(acked, n)
			}
			if first {
				close(ready)
				first = false
			}
		}
		if first {
			close(ready)
		}
		_, _ = io.Copy(io.Discard, stdout)
		lines <- sc.Err()
	}()
	<-ready
	wait := delay
	if point != "" {
		wait = crashWaitPoint
	}
	timer := time.AfterFunc(wait, func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
	rerr := <-lines // EOF once the child is dead; Wait closes the pipe, so it comes second
	err = cmd.Wait()
	killedByUs := !timer.Stop()
	if rerr != nil {
		t.Fatal(rerr)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("crash child: %v\n%s", err, stderr.String())
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("crash child exited on its own (%v), not by SIGKILL:\n%s", err, stderr.String())
	}
	how = "self-kill"
	if killedByUs {
		how = "parent-kill"
	}
	return acked, maxOp, how
}

// TestCrashableMemStore runs the workload in-process with the store on
// vfs.NewCrashableMem. At a deterministic WAL write or sync (chosen from the
// seed) it takes a crash clone of the store — what was synced, plus a random
// share of what was not — and a copy of the bitslice file; the reopened
// engine over the clone must pass the same checks as after a SIGKILL.
func TestCrashableMemStore(t *testing.T) {
	seed := testSeed(t, *crashSeed)
	rounds := 24
	if testing.Short() {
		rounds = 6
	}
	for r := range rounds {
		rng := rand.New(rand.NewPCG(seed, uint64(r)))
		point := []string{"pebble/wal-write", "pebble/wal-sync"}[r%2]
		nth := 3 + rng.IntN(60)
		unsynced := []int{0, 50, 100}[r%3]
		t.Run(fmt.Sprintf("%s-%d-unsynced%d", point, nth, unsynced), func(t *testing.T) {
			crashableMemRound(t, rng, point, nth, unsynced)
		})
	}
}

func crashableMemRound(t *testing.T, rng *rand.Rand, point string, nth, unsyncedPct int) {
	dir := t.TempDir()
	mem := vfs.NewCrashableMem()
	bitsPath := filepath.Join(dir, BitsDir, crashBitslice+BitsExt)
	var (
		mu          sync.Mutex // guards the snapshot: the hook runs on pebble's goroutines
		hits        int
		clone       *vfs.MemFS
		bitsImage   []byte
		ackedAtSnap uint64
		taken       atomic.Bool
		acked       atomic.Uint64
		maxOp       atomic.Uint64
	)
	cloneRNG := rand.New(rand.NewPCG(rng.Uint64(), 0))
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if taken.Load() || !strings.HasSuffix(op.Path, ".log") || !pebbleOpMatches(point, op.Kind) {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if hits++; hits == nth {
			// Runs on a pebble goroutine, before the operation: the
			// clone is the store as a power cut here would leave it.
			ackedAtSnap = acked.Load()
			clone = mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: unsyncedPct, RNG: cloneRNG})
			img, err := os.ReadFile(bitsPath)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				panic(err)
			}
			bitsImage = img
			taken.Store(true)
		}
		return nil
	})
	// The engine directory exists, durably, in the MemFS too (the root
	// package makes it on the OS file system); the store inside it is made
	// by Open, which must make its entry durable before it acknowledges
	// anything.
	syncedMkdirAll(t, mem, dir)
	opts := &Options{FlushInterval: -1, storeFS: errorfs.Wrap(mem, inj)}
	db := openT(t, dir, opts)
	after := 0
	err := crashWorkload(db, 1, rng,
		func(n uint64) { maxOp.Store(n) },
		func(wm uint64) { acked.Store(wm) },
		func(n uint64) bool {
			if taken.Load() {
				after++ // run on a little past the crash point, then stop
			}
			return after > 500 || n > 200_000
		})
	if err != nil {
		t.Fatal(err)
	}
	closeT(t, db)
	mu.Lock()
	defer mu.Unlock()
	if clone == nil {
		t.Skipf("point %s:%d not reached", point, nth)
	}
	// The promise made before the snapshot bounds what had started by then;
	// maxOp now is an upper bound on it.
	if bitsImage != nil {
		if err := os.WriteFile(bitsPath, bitsImage, 0o600); err != nil {
			t.Fatal(err)
		}
	} else if err := os.Remove(bitsPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	wm := verifyCrashState(t, dir, &Options{storeFS: clone}, newCrashModel(), ackedAtSnap, maxOp.Load())
	t.Logf("watermark %d after the crash clone, acknowledged %d", wm, ackedAtSnap)
}

// syncedMkdirAll creates dir in fsys and syncs every directory on the way,
// so a crash clone keeps it.
func syncedMkdirAll(t testing.TB, fsys vfs.FS, dir string) {
	t.Helper()
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		f, err := fsys.OpenDir(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(f.Sync(), f.Close()); err != nil {
			t.Fatal(err)
		}
		if d == filepath.Dir(d) {
			return
		}
	}
}
