package kvbuf

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/kvbuf/kvbuf/internal/testutil"
)

// childRoles are the roles this test binary plays when re-executed as a
// child process (crash children, a second process holding a lock). Test
// files register theirs in init functions.
var childRoles = testutil.Roles{}

func TestMain(m *testing.M) {
	if code, ok := childRoles.RunChild(); ok {
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}
