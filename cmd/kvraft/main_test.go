package main

import (
	"context"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/kvbuf/kvbuf/internal/testutil"
)

// The test binary plays kvraft when re-executed with the role "kvraft":
// the arguments come from KVRAFT_ARGS, one per line. So the process tests
// run the real command's code, as separate processes they can SIGKILL.
const kvraftRole = "kvraft"

var childRoles = testutil.Roles{
	kvraftRole: func() int {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return run(ctx, strings.Split(os.Getenv("KVRAFT_ARGS"), "\n"), os.Stderr, nil)
	},
}

func TestMain(m *testing.M) {
	if code, ok := childRoles.RunChild(); ok {
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}
