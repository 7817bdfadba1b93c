package dochost

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/kvbuf/kvbuf/internal/testutil"
)

// childRoles are the roles this test binary plays when re-executed (the
// crash child).
var childRoles = testutil.Roles{"dochost": crashChild}

func TestMain(m *testing.M) {
	if code, ok := childRoles.RunChild(); ok {
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}
