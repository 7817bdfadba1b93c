package kvbuf

// Fault tests (contract 3): an injected I/O error fails the flush that hit
// it; Flush reports it, the watermark stays where it was, no pending change
// is lost, reads stay right throughout, and once the fault is gone the next
// flush succeeds and its data survives a reopen.
//
// What is recoverable in-process depends on where the fault is:
//
//   - bitslice msync, header write, growth (including ENOSPC), a panic in a
//     flush: recoverable. Bitslices are written before the store, so a
//     failed bitslice step leaves the store and the watermark as they were;
//     the frozen changes stay readable and the next flush writes them again.
//     See fault_failpoints_test.go (-tags kvbuf_failpoints) and
//     TestFaultDiskFullDuringGrowth (a real full tmpfs; needs root).
//   - a failed write or sync of pebble's WAL: not recoverable in-process.
//     pebble cannot write to a log that failed, so the storage package fails
//     the commit (ErrSyncFailed) and refuses every later one; reads
//     keep working. The engine's flushes then fail until Close, which
//     reports the error; the host reopens and replays from the watermark, as
//     after a crash (TestFaultWALFailure). The same must hold when a later
//     generation's commit is already on its way into pebble when the log
//     fails, which the pipeline makes possible
//     (TestFaultWALFailureRacingCommit). A write of the WAL that finds the
//     disk full (ENOSPC) is not such a failure: the store's guard waits for
//     space (diskfull_test.go).
//
// The workload is the crash test's (crashOpFor): ops of several writes, some
// batches, some single calls, over three keyspaces and two bitslices.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/kvbuf/kvbuf/internal/flush"
	"github.com/kvbuf/kvbuf/internal/testutil"
)

func init() { childRoles["wal-race"] = walRaceChild }

// faultEngine is an engine with the crash workload's model of everything
// written to it.
type faultEngine struct {
	t  testing.TB
	db *DB
	cw *crashWorker
	m  *crashModel // the state after every op applied (m.upTo is the last)
}

func openFaultEngine(t testing.TB, dir string, opts *Options) *faultEngine {
	t.Helper()
	db, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	// A test that fails early must still close the engine (Close is
	// idempotent): TestFaultDiskFullDuringGrowth cannot unmount its file
	// system under an open one.
	t.Cleanup(func() { _ = db.Close() })
	cw, err := newCrashWorker(db)
	if err != nil {
		t.Fatal(err)
	}
	return &faultEngine{t: t, db: db, cw: cw, m: newCrashModel()}
}

// apply applies op (whose number must follow the last op's) to the engine
// and the model.
func (fe *faultEngine) apply(op crashOp) {
	fe.t.Helper()
	if op.n != fe.m.upTo+1 {
		fe.t.Fatalf("op %d after op %d", op.n, fe.m.upTo)
	}
	if err := fe.cw.apply(context.Background(), op); err != nil {
		fe.t.Fatalf("op %d: %v", op.n, err)
	}
	for _, w := range op.writes {
		applyKV(fe.m.kv, w)
		applyBits(fe.m.bits, w)
	}
	fe.m.upTo = op.n
}

// run applies the next k ops of the crash workload.
func (fe *faultEngine) run(k int) {
	fe.t.Helper()
	for range k {
		fe.apply(crashOpFor(fe.m.upTo + 1))
	}
}

// flushAll declares every op applied so far complete, flushes, and checks
// that the watermark covers them all; it returns the watermark.
func (fe *faultEngine) flushAll(ctx context.Context, stage string) uint64 {
	fe.t.Helper()
	if err := fe.db.EndOp(ctx, fe.m.upTo); err != nil {
		fe.t.Fatal(err)
	}
	if err := fe.db.Flush(ctx); err != nil {
		fe.t.Fatalf("%s: flush: %v", stage, err)
	}
	wm := fe.db.Watermark()
	if wm != fe.m.upTo {
		fe.t.Fatalf("%s: watermark %d after flushing ops 1..%d", stage, wm, fe.m.upTo)
	}
	return wm
}

// recoverAndReopen is the end of a fault test, once the fault is gone: a
// flush makes every op durable and readable, the metrics recorded the
// failures (at least 3, the newest matching want), and the engine
// reopened from dir with opts holds exactly the model at that watermark
// and reports no failure of its own.
func (fe *faultEngine) recoverAndReopen(ctx context.Context, dir string, opts *Options, want error) {
	t := fe.t
	t.Helper()
	last := fe.flushAll(ctx, "recovery")
	fe.check("after recovery")
	if met := fe.db.Metrics(); met.Failures < 3 || !errors.Is(met.LastError, want) {
		t.Fatalf("Metrics: Failures %d, LastError %v; want >= 3 and %v", met.Failures, met.LastError, want)
	}
	if err := fe.db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}()
	if wm := db.Watermark(); wm != last {
		t.Fatalf("watermark %d after reopen, want %d", wm, last)
	}
	checkFaultState(t, "after reopen", db, fe.m)
	if met := db.Metrics(); met.Failures != 0 {
		t.Fatalf("a freshly opened engine reports %d failures", met.Failures)
	}
}

// check reads every keyspace and bitslice and compares them with the model:
// every write has returned, so every read must see it (contract 1).
func (fe *faultEngine) check(stage string) {
	fe.t.Helper()
	checkFaultState(fe.t, stage, fe.db, fe.m)
}

func checkFaultState(t testing.TB, stage string, db *DB, m *crashModel) {
	t.Helper()
	if got := readCrashKV(t, db); !kvEqual(got, m.kv) {
		t.Fatalf("%s: the keyspaces differ from every write made (ops 1..%d):\n%s", stage, m.upTo, kvDiff(got, m.kv))
	}
	none := newBitset()
	for i, name := range crashBitslices {
		b, err := db.Bits(name)
		if err != nil {
			t.Fatal(err)
		}
		checkCrashBits(t, db.Watermark(), b, m.bits[i], none, none, crashOp{})
	}
}

// TestFaultWALFailure fails pebble's WAL (a sync, or a write) under a flush
// and checks what the engine does: Flush returns an error wrapping
// ErrSyncFailed (and the injected error), repeatedly; the
// watermark does not move; everything written stays readable, and writes
// are still accepted; Close reports the error; a reopen recovers at a
// watermark at or above the acknowledged one with the state of the ops up to
// it, and replaying the log from there makes everything durable.
func TestFaultWALFailure(t *testing.T) {
	for _, point := range []string{"pebble/wal-sync", "pebble/wal-write"} {
		for _, depth := range []int{1, flush.MaxPipelineDepth} {
			t.Run(fmt.Sprintf("%s-depth%d", point, depth), func(t *testing.T) {
				walFailureRound(t, point, depth)
			})
		}
	}
}

func walFailureRound(t *testing.T, point string, depth int) {
	ctx := context.Background()
	dir := t.TempDir()
	var armed atomic.Bool
	var injected atomic.Int64
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if armed.Load() && isWAL(op.Path) && pebbleOpMatches(point, op.Kind) {
			injected.Add(1)
			return errorfs.ErrInjected
		}
		return nil
	})
	fe := openFaultEngine(t, dir, &Options{FlushInterval: -1, PipelineDepth: depth, storeFS: errorfs.Wrap(vfs.Default, inj)})
	db := fe.db
	fe.run(40)
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	acks := crashAcks{wm: db.Watermark(), done: fe.m.upTo}
	if acks.wm < fe.m.upTo-1 {
		t.Fatalf("watermark %d after a Flush that covered ops 1..%d", acks.wm, fe.m.upTo)
	}

	armed.Store(true)
	fe.run(30)
	for attempt := range 3 {
		err := db.Flush(ctx)
		switch {
		case err == nil:
			t.Fatalf("flush %d with the WAL failing (%d injected errors) returned nil", attempt, injected.Load())
		case !errors.Is(err, ErrSyncFailed) || !errors.Is(err, errorfs.ErrInjected):
			t.Fatalf("flush %d with the WAL failing = %v; want an error wrapping ErrSyncFailed and the injected error", attempt, err)
		}
		if wm := db.Watermark(); wm != acks.wm {
			t.Fatalf("flush %d failed, yet the watermark moved from %d to %d", attempt, acks.wm, wm)
		}
		fe.check(fmt.Sprintf("after failed flush %d", attempt))
		fe.run(5) // writes still go to the buffer
	}
	if injected.Load() == 0 {
		t.Fatal("no error was injected")
	}
	met := db.Metrics()
	if met.Failures < 3 || !errors.Is(met.LastError, ErrSyncFailed) {
		t.Fatalf("Metrics: Failures %d, LastError %v; want >= 3 and ErrSyncFailed", met.Failures, met.LastError)
	}
	lastOp := fe.m.upTo
	cerr := db.Close()
	if !errors.Is(cerr, ErrSyncFailed) {
		t.Fatalf("Close after the WAL failed = %v; want an error wrapping ErrSyncFailed", cerr)
	}
	if werr := db.Wait(ctx); werr != cerr {
		t.Fatalf("Wait = %v, Close = %v; want the same", werr, cerr)
	}
	if _, err := db.KV("ks0"); !errors.Is(err, ErrClosed) {
		t.Fatalf("KV after Close = %v, want ErrClosed", err)
	}
	armed.Store(false)

	// A reopen recovers: nothing acknowledged is lost, the state is that of
	// the ops up to the watermark found (with at most op wm+1 in part).
	m := newCrashModel()
	wm := verifyCrash(t, dir, nil, m, acks, lastOp, lastOp)
	t.Logf("%s, depth %d: %d errors injected; Close: %v; reopened at watermark %d (acknowledged %d, last op %d)",
		point, depth, injected.Load(), cerr, wm, acks.wm, lastOp)

	// The host replays its log from wm+1; then everything is durable.
	fe = openFaultEngine(t, dir, nil)
	if got := fe.db.Watermark(); got != wm {
		t.Fatalf("watermark %d on the second reopen, %d on the first", got, wm)
	}
	fe.m = m
	fe.run(int(lastOp - wm))
	if err := fe.db.EndOp(ctx, lastOp); err != nil {
		t.Fatal(err)
	}
	if err := fe.db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fe.db.Watermark(); got != lastOp {
		t.Fatalf("watermark %d after replaying to op %d", got, lastOp)
	}
	if err := fe.db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}()
	checkFaultState(t, "after the replay and a reopen", db, m)
}

// TestFaultDiskFullDuringGrowth puts the engine directory on a 1 MiB tmpfs
// (the store on a MemFS, so only the bitslices need the disk) and sets a bit
// that needs a 1.5 MiB file. The flush fails with ENOSPC, again and again;
// the watermark stays; nothing pending is lost; once the file system is
// made larger the next flush succeeds, and a reopen finds everything. It
// needs root (mount); it skips without.
func TestFaultDiskFullDuringGrowth(t *testing.T) {
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() {
		// The engine's Close leaves its bitslice files mapped until the
		// garbage collector finds no view of them (B12): collect first,
		// as a host that unmounts after Close does (DB's Caveats).
		unmapped(t, mnt)
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	ctx := context.Background()
	dir := filepath.Join(mnt, "engine")
	mem := vfs.NewMem()
	opts := &Options{FlushInterval: -1, storeFS: mem}
	fe := openFaultEngine(t, dir, opts)
	db := fe.db
	fe.run(60)
	good := fe.flushAll(ctx, "before the disk fills")

	const far = 12 << 20 // 1.5 MiB of data: more than the file system holds
	fe.apply(farBitsOp(fe.m.upTo+1, far))
	fe.run(10)
	for attempt := range 3 {
		err := db.Flush(ctx)
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("flush %d on a full disk = %v, want ENOSPC", attempt, err)
		}
		if wm := db.Watermark(); wm != good {
			t.Fatalf("flush %d failed, yet the watermark moved from %d to %d", attempt, good, wm)
		}
		fe.check(fmt.Sprintf("after ENOSPC %d", attempt))
		fe.run(5)
	}
	if out, err := exec.Command("mount", "-o", "remount,size=8m", mnt).CombinedOutput(); err != nil {
		t.Fatalf("remount: %v: %s", err, out)
	}
	fe.recoverAndReopen(ctx, dir, opts, syscall.ENOSPC)
}

// unmapped runs the garbage collector until no file under dir is mapped
// (at most 100 times), and fails t if one still is.
func unmapped(t testing.TB, dir string) {
	t.Helper()
	for range 100 {
		maps, err := os.ReadFile("/proc/self/maps")
		if err != nil || !bytes.Contains(maps, []byte(dir+"/")) {
			return
		}
		runtime.GC()
		runtime.Gosched()
	}
	t.Errorf("a file under %s is still mapped after 100 collections", dir)
}

// farBitsOp is op n: one batch that sets bits at far in both bitslices, so
// that its flush must grow the files.
func farBitsOp(n, far uint64) crashOp {
	return crashOp{n: n, batch: true, writes: []crashWrite{
		{kind: 's', bs: 0, lo: far, v: true},
		{kind: 'S', bs: 1, lo: far - 100, hiBit: far + 100, v: true},
	}}
}

// TestFaultWALFailureRacingCommit fails pebble's WAL while a later
// generation's commit is already inside pebble: the pipeline writes
// generation B while generation A waits for its WAL write and sync (the
// point of the pipeline), so B's commit can reach pebble after pebble's log
// writer failed and before the storage package has seen the failure
// (storage.Store.Commit refuses commits only once its syncer has recorded
// ErrSyncFailed). The contract is the same as in TestFaultWALFailure: the
// flushes fail, the process carries on, Close reports the error.
//
// The child (role "wal-race") makes the interleaving deterministic: A's WAL
// write blocks in the file system until B's commit, a batch larger than
// half a memtable (so that pebble rotates the WAL to commit it), is inside
// pebble's DB.rotateWAL, closing the failed log; then the write fails.
func TestFaultWALFailureRacingCommit(t *testing.T) {
	dir := t.TempDir()
	cmd := testutil.Reexec(t, "wal-race", crashDirEnv+"="+dir)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill() })
	err := cmd.Wait()
	timer.Stop()
	if err != nil {
		lines := strings.Split(stderr.String(), "\n")
		if len(lines) > 40 {
			lines = lines[:40]
		}
		t.Fatalf("the engine's process died after a WAL failure with a commit in flight (%v):\n%s", err, strings.Join(lines, "\n"))
	}
	t.Logf("child:\n%s", stderr.String())
	rep, err := testutil.ReadReport(strings.NewReader(stdout.String()), nil)
	if err != nil {
		t.Fatal(err)
	}
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatalf("reopen after the WAL failure: %v", err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}()
	if wm := db.Watermark(); wm < rep.AckedWM || wm > rep.MaxOp {
		t.Fatalf("watermark %d after reopen; acknowledged %d, ops written %d", wm, rep.AckedWM, rep.MaxOp)
	}
}

// walRaceChild is the child of TestFaultWALFailureRacingCommit. It exits 0
// if the engine survived with the expected errors; a crash of the process
// is the failure the parent reports.
func walRaceChild() int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
		return 1
	}
	var (
		armed    atomic.Bool
		once     sync.Once
		blocked  = make(chan struct{})
		release  = make(chan struct{})
		injected atomic.Int64
	)
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !armed.Load() || !isWAL(op.Path) ||
			!(pebbleOpMatches("pebble/wal-write", op.Kind) || pebbleOpMatches("pebble/wal-sync", op.Kind)) {
			return nil
		}
		once.Do(func() { close(blocked); <-release })
		injected.Add(1)
		return errorfs.ErrInjected
	})
	time.AfterFunc(childLifetime, func() { os.Exit(3) }) // an orphan must not run forever
	db, err := Open(os.Getenv(crashDirEnv), &Options{
		FlushInterval:   -1,
		MaxPendingBytes: 4 << 20, // a background flush starts above 2 MiB pending
		PipelineDepth:   flush.DefaultPipelineDepth,
		storeFS:         errorfs.Wrap(vfs.Default, inj),
	})
	if err != nil {
		return fail("open: %v", err)
	}
	rep := testutil.NewReporter(os.Stdout)
	rep.Ready(1)
	ctx := context.Background()
	k, err := db.KV("k")
	if err != nil {
		return fail("%v", err)
	}
	var op uint64
	small := func() error {
		op++
		rep.Promise(op)
		return k.Put(ctx, []byte("small"+strconv.FormatUint(op, 10)), []byte("v"), op)
	}
	for range 10 {
		if err := small(); err != nil {
			return fail("put: %v", err)
		}
	}
	if err := db.Flush(ctx); err != nil {
		return fail("flush: %v", err)
	}
	rep.Flushed(db.Watermark(), op)

	// Generation A: its WAL write blocks, then fails.
	armed.Store(true)
	if err := small(); err != nil {
		return fail("put: %v", err)
	}
	flushA := make(chan error, 1)
	go func() { flushA <- db.Flush(ctx) }()
	<-blocked
	fmt.Fprintln(os.Stderr, "generation A's WAL write is blocked")

	// Generation B: 2.7 MiB in one op, above half of pebble's 4 MiB
	// memtable, then a small write whose admission finds more than 2 MiB
	// pending and starts a background generation, written at once behind A.
	op++
	rep.Promise(op + 1)
	big := bytes.Repeat([]byte("x"), 900<<10)
	if err := db.Update(ctx, op, func(b *Batch) error {
		for i := range 3 {
			b.Put(k, []byte("big"+strconv.Itoa(i)), big)
		}
		return nil
	}); err != nil {
		return fail("big batch: %v", err)
	}
	if err := small(); err != nil {
		return fail("put: %v", err)
	}
	// Release A's write once B's commit is inside pebble's WAL rotation
	// (or after a bound, if it never gets there).
	buf := make([]byte, 1<<20)
	reached := false
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); runtime.Gosched() {
		if bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("(*DB).rotateWAL")) {
			reached = true
			break
		}
	}
	fmt.Fprintf(os.Stderr, "generation B's commit inside pebble's WAL rotation: %v; releasing A's write\n", reached)
	close(release)

	errA := <-flushA
	fmt.Fprintf(os.Stderr, "Flush of generation A: %v\n", errA)
	errF := db.Flush(ctx)
	fmt.Fprintf(os.Stderr, "next Flush: %v\n", errF)
	cerr := db.Close()
	fmt.Fprintf(os.Stderr, "Close: %v (%d errors injected)\n", cerr, injected.Load())
	switch {
	case !errors.Is(errA, ErrSyncFailed):
		return fail("Flush of generation A = %v, want ErrSyncFailed", errA)
	case !errors.Is(errF, ErrSyncFailed) && !errors.Is(errF, ErrPanicked):
		return fail("next Flush = %v, want ErrSyncFailed", errF)
	case cerr == nil:
		return fail("Close after the WAL failed returned nil")
	}
	return 0
}
