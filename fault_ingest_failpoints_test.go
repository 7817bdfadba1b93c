//go:build kvbuf_failpoints

package kvbuf

// Fault tests of flushes by ingestion through the storage failpoints (go
// test -tags kvbuf_failpoints): an error before a table's sync, an error
// or a panic right before pebble's DB.Ingest. See fault_ingest_test.go for
// what each round checks.

import (
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/kvbuf/kvbuf/internal/failpoint"
)

func TestFaultIngestFailpoints(t *testing.T) {
	for _, c := range []struct {
		name, point string
	}{
		{"table-sync-EIO", failpoint.StorageIngestSync},
		{"apply-EIO", failpoint.StorageIngestApply},
	} {
		t.Run(c.name, func(t *testing.T) {
			var armed atomic.Bool
			var hits atomic.Int64
			disable := failpoint.Enable(c.point, func() error {
				if armed.Load() {
					hits.Add(1)
					return syscall.EIO
				}
				return nil
			})
			defer disable()
			ingestFaultRound(t, &Options{FlushInterval: -1, IngestThreshold: 1}, &armed, &hits, syscall.EIO)
		})
	}
}
