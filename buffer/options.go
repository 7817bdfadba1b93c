package buffer

import "math/bits"

// Options configures a pending-changes overlay. A nil *Options means defaults;
// a zero field means that field's default.
type Options struct {
	// Shards is the number of shards of the pending table. It is rounded up to
	// a power of two and clamped to [1, 4096]. Default: DefaultShards (8).
	Shards int

	// MaxKeySize is the largest key, in bytes, a KV overlay accepts; larger
	// keys get ErrKeyTooLarge. Default: 4096.
	MaxKeySize int

	// MaxValueSize is the largest value, in bytes, a KV overlay accepts;
	// larger values get ErrValueTooLarge. Default: 1 MiB.
	MaxValueSize int

	// MaxPendingBytes is the pending-memory bound the flusher enforces with
	// backpressure (the overlay itself only reports its usage). Default: 64 MiB.
	MaxPendingBytes int64

	// PoolBytes bounds the memory held by released tables kept for reuse.
	// Zero means the default (8 MiB); negative disables pooling.
	PoolBytes int64

	// KeyPrefix (KV only) is prepended to every key on the storage side and
	// stripped from keys an iterator returns, so several keyspaces can share
	// one storage.Store. Pending tables hold keys without it. NewKV copies it.
	// Default: none.
	KeyPrefix []byte

	// MaxBits (Bits only) bounds the bit indexes Set accepts: an index at or
	// beyond it gets an error wrapping bitslice.ErrOutOfRange. Values above
	// bitslice.MaxBits are lowered to it. The pending table's directory costs
	// 8 bytes per 32768 bits up to the highest index set. Default:
	// DefaultMaxBits (2^32 bits, a 512 MiB bitslice).
	MaxBits uint64
}

const (
	defaultMaxKeySize      = 4096
	defaultMaxValueSize    = 1 << 20
	defaultMaxPendingBytes = 64 << 20
	defaultPoolBytes       = 8 << 20
)

// shards returns the effective shard count: a power of two in [1, maxShards].
func (o *Options) shards() int {
	n := DefaultShards
	if o != nil && o.Shards > 0 {
		n = min(o.Shards, maxShards)
	}
	return 1 << bits.Len(uint(n-1))
}

func (o *Options) maxKeySize() int {
	if o == nil || o.MaxKeySize <= 0 {
		return defaultMaxKeySize
	}
	return o.MaxKeySize
}

func (o *Options) maxValueSize() int {
	if o == nil || o.MaxValueSize <= 0 {
		return defaultMaxValueSize
	}
	return o.MaxValueSize
}

// MaxPending returns the effective MaxPendingBytes (the default when o is nil
// or the field is not positive), for the flusher's backpressure.
func (o *Options) MaxPending() int64 {
	if o == nil || o.MaxPendingBytes <= 0 {
		return defaultMaxPendingBytes
	}
	return o.MaxPendingBytes
}

// poolBytes returns the pool's byte bound; 0 means pooling is off.
func (o *Options) poolBytes() int64 {
	switch {
	case !poolEnabled:
		return 0
	case o == nil || o.PoolBytes == 0:
		return defaultPoolBytes
	case o.PoolBytes < 0:
		return 0
	}
	return o.PoolBytes
}
