package buffer

import (
	"math/bits"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

// Defaults of Options. The engine (package kvbuf) documents them to users and
// passes resolved values down; they are declared here, once.
const (
	// defaultShards is the KV table shard count. Reads take no lock, so
	// shards only spread writers; a handful keeps scans' merge cheap.
	defaultShards = 8
	// DefaultMaxKeySize is the largest KV key in bytes.
	DefaultMaxKeySize = 4096
	// DefaultMaxValueSize is the largest KV value in bytes.
	DefaultMaxValueSize = 1 << 20
	// DefaultPoolBytes bounds the memory of released tables kept for reuse.
	DefaultPoolBytes = 8 << 20
	// DefaultMaxBits is the largest bitslice length a Bits overlay accepts:
	// 2^32 bits, a 512 MiB file, whose pending-table directory costs at most
	// 1 MiB.
	DefaultMaxBits = 1 << 32
)

// Limits Options are checked against.
const (
	// maxShards is the largest Options.Shards.
	maxShards = 64
	// maxKeySizeLimit is the largest Options.MaxKeySize: a key lives inline
	// in its table node, whose sizes are a fixed ladder.
	maxKeySizeLimit = 64 << 10
	// maxValueSizeLimit is the largest Options.MaxValueSize.
	maxValueSizeLimit = 1 << 30
)

// Options configures an overlay. A nil *Options means defaults; a zero field
// means that field's default.
type Options struct {
	// Shards is the number of shards of a KV table, rounded up to a power of
	// two. Default: defaultShards. At most maxShards.
	Shards int

	// MaxKeySize is the largest KV key; longer keys get ErrKeyTooLarge.
	// Default: DefaultMaxKeySize. At most 64 KiB (maxKeySizeLimit).
	MaxKeySize int

	// MaxValueSize is the largest KV value; longer values get
	// ErrValueTooLarge. Default: DefaultMaxValueSize. At most
	// 1 GiB (maxValueSizeLimit).
	MaxValueSize int

	// PoolBytes bounds the memory of released tables kept for the next
	// generations. Default: DefaultPoolBytes. Negative disables pooling (so
	// does building with -tags kvbuf_nopool).
	PoolBytes int64

	// MaxBits bounds the bit indexes a Bits overlay accepts: an index at or
	// beyond it is an error wrapping kverr.ErrOutOfRange. Default:
	// DefaultMaxBits. At most bitslice.MaxBits.
	MaxBits uint64

	// IngestWriters is the number of goroutines that sort and write one
	// keyspace's generation when it is flushed by ingestion (KVGen.
	// IngestTo): the table's first sort runs on that many (parallelSort,
	// kv_order.go), and its sorted keys are cut into that many ranges,
	// each written into its own sstable by its own goroutine (storage.
	// Ingest.Parts), all ingested in one call. Only a generation of one
	// table with no range deletion and at least 64k keys per writer is
	// cut (32k keys per goroutine for the sort); only the first writer
	// calls IngestTo's pace function, the others (if it is not nil)
	// yield the processor every few hundred keys. Default (0): one
	// goroutine per processor but one (runtime.GOMAXPROCS at the flush,
	// minus one; at least one), so that a flush never takes every
	// processor from the readers and writers. On the shared 2-core
	// machine where it was measured (so the default there is one
	// goroutine), the parallel sort and two writers took the Flush of 1M
	// keys in 0.74-0.88x the time of one goroutine when the second core
	// was free and 0.99-1.49x when other processes held it, for 0.65-0.83x
	// the CPU, and made a goroutine that sleeps 100µs at a time wake
	// 2-4x later at the 99th percentile (BenchmarkFlushParallel;
	// doc/design.md, "The flush on every processor"). 1: the caller's
	// goroutine alone. Negative is an error.
	IngestWriters int
}

// resolved is Options with every default filled in and every value checked.
type resolved struct {
	shards    int
	maxKey    int
	maxVal    int
	poolBytes int64 // 0: pooling off
	maxBits   uint64
	writers   int // IngestWriters
}

// Validate reports an error wrapping ErrBadOptions for a value out of range.
// Zero values are valid (they mean the default).
func (o *Options) Validate() error {
	_, err := o.resolve()
	return err
}

func (o *Options) resolve() (resolved, error) {
	var v Options
	if o != nil {
		v = *o
	}
	r := resolved{
		shards:    defaultShards,
		maxKey:    DefaultMaxKeySize,
		maxVal:    DefaultMaxValueSize,
		poolBytes: DefaultPoolBytes,
		maxBits:   DefaultMaxBits,
	}
	switch {
	case v.Shards < 0 || v.Shards > maxShards:
		return r, kverr.Errorf("Shards %d (want 0..%d): %w", v.Shards, maxShards, kverr.ErrBadOptions)
	case v.MaxKeySize < 0 || v.MaxKeySize > maxKeySizeLimit:
		return r, kverr.Errorf("MaxKeySize %d (want 0..%d): %w", v.MaxKeySize, maxKeySizeLimit, kverr.ErrBadOptions)
	case v.MaxValueSize < 0 || v.MaxValueSize > maxValueSizeLimit:
		return r, kverr.Errorf("MaxValueSize %d (want 0..%d): %w", v.MaxValueSize, maxValueSizeLimit, kverr.ErrBadOptions)
	case v.IngestWriters < 0:
		return r, kverr.Errorf("IngestWriters %d (want 0 or more): %w", v.IngestWriters, kverr.ErrBadOptions)
	case v.MaxBits > bitslice.MaxBits:
		return r, kverr.Errorf("MaxBits %d (want at most %d): %w", v.MaxBits, uint64(bitslice.MaxBits), kverr.ErrBadOptions)
	}
	if v.Shards > 0 {
		r.shards = 1 << bits.Len(uint(v.Shards-1))
	}
	if v.MaxKeySize > 0 {
		r.maxKey = v.MaxKeySize
	}
	if v.MaxValueSize > 0 {
		r.maxVal = v.MaxValueSize
	}
	switch {
	case !poolEnabled || v.PoolBytes < 0:
		r.poolBytes = 0
	case v.PoolBytes > 0:
		r.poolBytes = v.PoolBytes
	}
	if v.MaxBits > 0 {
		r.maxBits = v.MaxBits
	}
	r.writers = v.IngestWriters
	return r, nil
}
