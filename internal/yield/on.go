//go:build kvbuf_yield

package yield

import (
	"math/rand/v2"
	"runtime"
	"time"
)

// Enabled reports whether Point yields (the kvbuf_yield build tag).
const Enabled = true

// Point yields the processor at random, and now and then sleeps a few
// microseconds: see the package comment.
func Point() {
	r := rand.Uint32()
	switch {
	case r&255 == 0:
		time.Sleep(time.Duration(1+r>>8%20) * time.Microsecond)
	case r&7 == 0:
		runtime.Gosched()
	}
}
