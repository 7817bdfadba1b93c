package kvbuf

import (
	"errors"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/buffer"
	"github.com/kvbuf/kvbuf/flush"
	"github.com/kvbuf/kvbuf/internal/enginedir"
	"github.com/kvbuf/kvbuf/storage"
)

// Errors. Each is a sentinel to test with errors.Is; the errors the engine
// returns wrap them with the keyspace, bitslice, key or path involved. Errors
// from lower packages that mean the same thing match both (for example a
// corrupt bitslice header matches ErrCorrupt and bitslice.ErrCorrupt).
var (
	// ErrClosed is returned by every write, flush and snapshot that starts
	// after Close has begun, and by reads that finish after it began.
	ErrClosed = flush.ErrClosed

	// ErrNotFound is returned by KV.Get for a key that is absent or deleted.
	ErrNotFound = storage.ErrNotFound

	// ErrLocked is returned by Open when another engine (in this process or
	// another one) has the directory open.
	ErrLocked = enginedir.ErrLocked

	// ErrCorrupt marks on-disk corruption found by Open or while reading: a
	// damaged manifest, catalog, bitslice file or pebble store.
	ErrCorrupt = enginedir.ErrCorrupt

	// ErrNotEngine is returned by Open for a path that is not a kvbuf engine
	// directory and not empty, so the engine never writes into foreign data.
	ErrNotEngine = enginedir.ErrNotEngine

	// ErrBadName is returned by DB.KV, DB.Bits and DB.DropKV for a name that
	// is empty, longer than 128 bytes, "." or "..", or has a byte outside
	// [A-Za-z0-9._-].
	ErrBadName = enginedir.ErrBadName

	// ErrBadOptions is returned by Open (and Options.Validate) for an option
	// out of range.
	ErrBadOptions = buffer.ErrBadOptions

	// ErrOutOfRange is returned for a bit index at or past the bitslice's
	// maximum length (Options.MaxBits).
	ErrOutOfRange = bitslice.ErrOutOfRange

	// ErrKeyTooLarge, ErrValueTooLarge and ErrEmptyKey reject bad keys and
	// values before anything is written.
	ErrKeyTooLarge   = buffer.ErrKeyTooLarge
	ErrValueTooLarge = buffer.ErrValueTooLarge
	ErrEmptyKey      = buffer.ErrEmptyKey

	// ErrBadRange is returned for a range whose lower bound is above its
	// upper bound (KV.DeleteRange, KV.NewIter, Bits.SetRange).
	ErrBadRange = buffer.ErrBadRange

	// ErrStaleOp is returned by a write whose op number is above the
	// persisted watermark but at or below an op the engine has already
	// declared complete (see "Ops and the watermark"): writing it would
	// make the watermark lie. It is a host bug. (A write of an op at or
	// below the persisted watermark is a redelivered op: skipped, nil.)
	ErrStaleOp = flush.ErrStaleOp

	// ErrBadOp is returned for an op number the host cannot mean: EndOp of
	// an op above every op the engine has seen (a typo that would tell the
	// host to skip replaying ops it never applied), BeginOp of an op at or
	// below one already begun (ops are begun in log order), an op above
	// MaxOp. Nothing is changed.
	ErrBadOp = flush.ErrBadOp

	// ErrDropped is returned by operations on a keyspace handle after
	// DB.DropKV dropped it.
	ErrDropped = buffer.ErrDropped

	// ErrSyncFailed is wrapped by the error of every flush after a write or
	// sync of the store's write-ahead log failed: pebble cannot write its
	// log again, so the engine keeps serving reads and refuses to make
	// anything more durable. Close, then reopen (after fixing the disk) to
	// recover; nothing acknowledged is lost.
	ErrSyncFailed = storage.ErrSyncFailed

	// ErrPanicked is wrapped by the error a Flush returns when the flush it
	// waited for panicked (a bug); see flush.PanicError.
	ErrPanicked = flush.ErrPanicked

	// ErrForeign is returned for a keyspace or bitslice handle that belongs
	// to another engine (in a Batch, or a handle kept across a reopen).
	ErrForeign = errors.New("kvbuf: handle of another engine")
)
