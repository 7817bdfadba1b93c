package buffer

// Options configures a pending-changes overlay. A nil *Options means defaults;
// a zero field means that field's default.
type Options struct {
	// Shards is the number of shards of the pending table. It is rounded up to
	// a power of two. Default: see DefaultShards.
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
}
