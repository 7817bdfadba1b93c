//go:build !unix

package kvbuf

import "time"

// processCPU is not measured on this platform (0).
func processCPU() time.Duration { return 0 }
