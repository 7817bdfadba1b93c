package kvbuf

import (
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Options configures an engine. A nil *Options means defaults; a zero field
// means that field's default.
type Options struct {
	// FlushInterval is how often the background flusher makes pending
	// changes durable when nothing else has. Default: 1s. Negative disables
	// interval flushes; explicit Flush, the pending-memory bound and Close
	// still flush.
	FlushInterval time.Duration

	// MaxPendingBytes bounds the memory held by pending changes across all
	// keyspaces and bitslices. Writers that find it exceeded wait (with
	// their context) for a flush to make room. Default: 64 MiB. Negative
	// disables backpressure.
	MaxPendingBytes int64

	// MaxKeySize is the largest KV key in bytes. Default: 4096.
	MaxKeySize int

	// MaxValueSize is the largest KV value in bytes. Default: 1 MiB.
	MaxValueSize int

	// Shards is the pending table's shard count. Default: the buffer
	// package's measured default.
	Shards int

	// CacheSize is pebble's block cache size in bytes. Default: 8 MiB.
	CacheSize int64

	// storeFS is the filesystem the pebble store lives on; nil means the
	// OS filesystem. It is a fault-injection seam for this package's tests
	// (vfs.NewCrashableMem, errorfs) and deliberately unexported: the
	// manifest, lock and bitslices always use the OS filesystem.
	storeFS vfs.FS
}
