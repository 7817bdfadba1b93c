package kvbuf

// Fault tests (contract 3): an injected I/O error fails the flush that hit
// it; the flush reports it, no pending change is lost, reads stay right
// throughout, and the next flush succeeds once the fault is gone.
//
// What is recoverable depends on where the fault is:
//
//   - bitslice msync, header write, growth (including ENOSPC): recoverable.
//     Bitslices are applied before the store, so a failed bitslice step
//     leaves the store and the watermark as they were; the frozen changes
//     stay readable and the next flush retries them. See
//     fault_failpoints_test.go (needs -tags kvbuf_failpoints) and
//     TestFaultDiskFullDuringGrowth (a real full tmpfs, needs root).
//   - pebble WAL write or sync during a commit: NOT recoverable in-process.
//     pebble v2.1.7's DB.Apply calls Logger.Fatalf("pebble: fatal commit
//     error") when the commit pipeline fails (db.go, DB.Apply), and the
//     storage package's default logger prints and exits, as pebble's does.
//     A process that continued would have a wedged commit pipeline. So the
//     contract there is the crash contract: the process exits with status
//     1, and the reopened engine holds every acknowledged flush and a
//     watermark that is not ahead of the data (TestFaultPebbleCommitIsFatal).

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestFaultPebbleCommitIsFatal(t *testing.T) {
	seed := testSeed(t, *crashSeed)
	dir := t.TempDir()
	m := newCrashModel()
	var maxOp uint64
	for i, point := range []string{"pebble/wal-sync:5", "pebble/wal-write:9", "pebble/wal-sync:30"} {
		cmd := reexec(t, "crash", childDirEnv+"="+dir, childSeedEnv+"="+strconv.FormatUint(seed+uint64(i), 10),
			childPointEnv+"="+point, childFaultEnv+"=error")
		acked, childMax, stderr, err := runFaultChild(t, cmd)
		maxOp = max(maxOp, childMax) // over every child: see verifyCrashState
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("%s: child ended with %v, want exit status 1 from pebble's Fatalf; stderr:\n%s", point, err, stderr)
		}
		if !strings.Contains(stderr, "pebble: fatal commit error") {
			t.Fatalf("%s: stderr does not show pebble's fatal commit error:\n%s", point, stderr)
		}
		wm := verifyCrashState(t, dir, nil, m, acked, maxOp)
		t.Logf("%s: exit status 1 (pebble Fatalf); reopened at watermark %d, acknowledged %d", point, wm, acked)
	}
}

// runFaultChild runs a crash child that is expected to end by itself and
// parses its progress lines.
func runFaultChild(t *testing.T, cmd *exec.Cmd) (acked, maxOp uint64, stderr string, err error) {
	t.Helper()
	var out, serr strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &serr
	timer := time.AfterFunc(crashWaitPoint, func() { _ = cmd.Process.Kill() })
	err = cmd.Run()
	timer.Stop()
	for _, line := range strings.Split(out.String(), "\n") {
		kind, num, _ := strings.Cut(line, " ")
		n, _ := strconv.ParseUint(num, 10, 64)
		switch kind {
		case "R":
			maxOp = n - 1
		case "W":
			maxOp = max(maxOp, n)
		case "F":
			acked = max(acked, n)
		}
	}
	return acked, maxOp, serr.String(), err
}

// TestFaultDiskFullDuringGrowth puts the engine directory on a 1 MiB tmpfs
// (the store on a MemFS, so only the bitslice needs the disk), sets a bit
// that needs a 2 MiB file, and checks that the flush fails with ENOSPC,
// nothing pending is lost, reads are right, and once the file system is
// made larger the next flush succeeds. It needs root (mount); it skips
// without.
func TestFaultDiskFullDuringGrowth(t *testing.T) {
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	dir := filepath.Join(mnt, "engine")
	mem := vfs.NewMem()
	opts := &Options{FlushInterval: -1, storeFS: mem}
	db := openT(t, dir, opts)
	k, b := mustKV(t, db, "k"), mustBits(t, db, "b")
	ctx := context.Background()
	for i := range uint64(100) {
		if err := b.Set(ctx, i*7, true, i+1); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.Put(ctx, []byte("before"), []byte("1"), 101); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	const far = 16 << 20 // 2 MiB of data: more than the file system holds
	if err := b.Set(ctx, far, true, 102); err != nil {
		t.Fatal(err)
	}
	if err := k.Put(ctx, []byte("during"), []byte("2"), 103); err != nil {
		t.Fatal(err)
	}
	err := db.Flush(ctx)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Flush on a full disk = %v, want ENOSPC", err)
	}
	if wm := db.Watermark(); wm != 101 {
		t.Fatalf("watermark after the failed flush = %d, want 101", wm)
	}
	checkReads := func(stage string) {
		t.Helper()
		for i := range uint64(100) {
			if v, err := b.Get(i * 7); err != nil || !v {
				t.Fatalf("%s: bit %d = %v, %v; want true", stage, i*7, v, err)
			}
		}
		if v, err := b.Get(far); err != nil || !v {
			t.Fatalf("%s: pending bit %d = %v, %v; want true", stage, far, v, err)
		}
		wantGet(t, k, "before", "1")
		wantGet(t, k, "during", "2")
	}
	checkReads("after ENOSPC")
	if err := k.Put(ctx, []byte("after"), []byte("3"), 104); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(ctx); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("second Flush on a full disk = %v, want ENOSPC", err)
	}
	if out, err := exec.Command("mount", "-o", "remount,size=8m", mnt).CombinedOutput(); err != nil {
		t.Fatalf("remount: %v: %s", err, out)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatalf("Flush once there is room: %v", err)
	}
	if wm := db.Watermark(); wm != 104 {
		t.Fatalf("watermark = %d, want 104", wm)
	}
	checkReads("after recovery")
	closeT(t, db)
	db = openT(t, dir, opts)
	defer closeT(t, db)
	k, b = mustKV(t, db, "k"), mustBits(t, db, "b")
	checkReads("after reopen")
	wantGet(t, k, "after", "3")
	if st := db.Stats(); st.Failures != 0 {
		t.Fatalf("fresh engine reports %d failures", st.Failures)
	}
}
