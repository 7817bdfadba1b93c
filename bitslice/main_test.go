package bitslice

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// lockHelperEnv makes the test binary, re-executed by TestLockOtherProcess,
// try to Open the named file and report the outcome in its exit status.
const lockHelperEnv = "BITSLICE_TEST_LOCK_HELPER"

func TestMain(m *testing.M) {
	if p := os.Getenv(lockHelperEnv); p != "" {
		os.Exit(lockHelper(p))
	}
	if p := os.Getenv(syncLoopEnv); p != "" {
		os.Exit(syncLoop(p))
	}
	goleak.VerifyTestMain(m)
}

// syncLoopEnv makes the re-executed test binary run syncLoop on the named
// file until it is killed (TestSIGKILLDuringSyncs).
const syncLoopEnv = "BITSLICE_TEST_SYNC_LOOP"

// syncLoop sets bit k, stages watermark k, syncs, and prints k, forever.
func syncLoop(path string) int {
	f, err := Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	for k := uint64(1); k < f.Len(); k++ {
		if err := f.Set(k, true); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 4
		}
		f.SetWatermark(k)
		if err := f.Sync(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 4
		}
		fmt.Println(k)
	}
	return 0
}

// lockHelper exit statuses: 0 opened, 3 kverr.ErrLocked, 4 another error.
func lockHelper(path string) int {
	f, err := Open(path)
	switch {
	case errors.Is(err, kverr.ErrLocked):
		return 3
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	if err := f.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	return 0
}
