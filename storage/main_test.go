package storage

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// A child process started by TestLockedByOtherProcess holds the lock and
	// exits; it must not run the tests.
	if dir := os.Getenv(helperEnv); dir != "" {
		os.Exit(holdLock(dir))
	}
	goleak.VerifyTestMain(m)
}
