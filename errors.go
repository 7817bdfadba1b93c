package kvbuf

import (
	"errors"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// Errors. Each is a sentinel to test with errors.Is. The module's sentinels
// are exported here only: the engine's packages (buffer, flush, storage,
// bitslice) return these same values and export no names of their own, so
// an error from any layer, or from storage or bitslice used on their own,
// matches the root's name for it (what storage's Get returns for a missing
// key is ErrNotFound) and the engine passes lower errors on without
// translating them, adding only context.
//
// # Texts
//
// Every error text starts with "kvbuf: " exactly once, then the context,
// from the outermost in (the keyspace or bitslice, the path, the op, the
// key, the detail that says what is wrong), and ends with the sentinel's
// own text without the prefix:
//
//	kvbuf: keyspace "users": empty key
//	kvbuf: keyspace "users": key of 300 bytes (max 256): key too large
//	kvbuf: lock /data/e1/LOCK: locked by another engine
//	kvbuf: EndOp(3): op 3 was never begun (the highest op begun is 2): bad op number
//
// One exception: an error caused by another library's or the system's
// error (pebble's, the file system's), or by a panic (ErrPanicked), ends
// with that cause (the panic's value), after the sentinel's text, so that
// nothing the cause says is lost:
//
//	kvbuf: commit to "/data/e1/store": write-ahead log write or sync failed: input/output error
//
// ErrDiskFull marks an error by its cause and adds no text of its own: the
// text ends with the cause's ("no space left on device").
//
// A sentinel returned as it is reads "kvbuf: closed". ErrNotFound (from
// the Get family) and ErrClosed are returned as they are, without
// context, so that a miss costs no allocation and a closed engine reads
// the same from every call; errors.Is is still the way to test them.
// Errors of the context (ctx.Err()) are returned as they are too.
//
// # Corruption
//
// ErrCorrupt matches every corruption; three finer sentinels say what is
// damaged, and the text names it: ErrCorruptBlock (data the pebble store
// reports as corrupt while reading or opening), ErrCorruptDir (the engine
// directory's own files: manifest, catalogs, layout) and ErrCorruptBits (a
// bitslice file). ErrBadStream (Install) matches ErrCorrupt too. A path
// that is not an engine directory at all is ErrNotEngine, which is not
// corruption.
var (
	// ErrClosed is returned by every write, flush and snapshot that starts
	// after Close has begun, and by reads that finish after it began.
	// Text: "kvbuf: closed".
	ErrClosed = kverr.ErrClosed

	// ErrNotFound is returned by KV.Get for a key that is absent or deleted.
	// Text: "kvbuf: not found".
	ErrNotFound = kverr.ErrNotFound

	// ErrLocked is returned by Open when another engine (in this process or
	// another one) has the directory open. Text: "kvbuf: locked by another
	// engine".
	ErrLocked = kverr.ErrLocked

	// ErrCorrupt is matched by every error that reports on-disk (or
	// in-stream) corruption: ErrCorruptBlock, ErrCorruptDir,
	// ErrCorruptBits and ErrBadStream. It is never returned alone; its own
	// text is "kvbuf: corruption".
	ErrCorrupt = kverr.ErrCorrupt

	// ErrCorruptBlock is wrapped by the errors of Open and of reads (Get,
	// iterators, snapshots) when the pebble store reports corruption (a
	// block or record failing its checksum or format check), and when a
	// value the engine keeps in the store (the watermark, the highest op)
	// does not parse. Restore from a checkpoint. Text: "kvbuf: corrupt
	// store block".
	ErrCorruptBlock = kverr.ErrCorruptBlock

	// ErrCorruptDir is wrapped by Open's error for a damaged engine
	// directory: a damaged or newer manifest, a ready manifest without its
	// store or bits directory, a malformed keyspace or bitslice catalog, a
	// bitslice the catalog records but whose file is missing or belongs to
	// another engine. Text: "kvbuf: corrupt engine directory".
	ErrCorruptDir = kverr.ErrCorruptDir

	// ErrCorruptBits is wrapped by Open's (and DB.Bits') error for a
	// bitslice file that is not a valid bitslice: bad magic or version,
	// bad checksums in both header slots, truncated, absurd sizes. Text:
	// "kvbuf: corrupt bitslice file".
	ErrCorruptBits = kverr.ErrCorruptBits

	// ErrNotEngine is returned by Open for a path that is not a kvbuf engine
	// directory and not empty, so the engine never writes into foreign data.
	// Text: "kvbuf: not a kvbuf directory".
	ErrNotEngine = kverr.ErrNotEngine

	// ErrBadName is returned by DB.KV, DB.Bits and DB.DropKV for a name that
	// is empty, longer than 128 bytes, "." or "..", or has a byte outside
	// [A-Za-z0-9._-]. Text: "kvbuf: bad keyspace or bitslice name".
	ErrBadName = kverr.ErrBadName

	// ErrBadOptions is returned by Open (and Options.Validate) for an option
	// out of range. Text: "kvbuf: bad options".
	ErrBadOptions = kverr.ErrBadOptions

	// ErrBudgetClosed is returned by Open with Options.MemoryBudget set to
	// a MemoryBudget that was closed. Text: "kvbuf: memory budget closed".
	ErrBudgetClosed = kverr.ErrBudgetClosed

	// ErrBudgetInUse is returned by MemoryBudget.Close while an engine
	// opened with the budget is still open. Text: "kvbuf: memory budget
	// in use".
	ErrBudgetInUse = kverr.ErrBudgetInUse

	// ErrOutOfRange is returned for a bit index at or past the bitslice's
	// maximum length (Options.MaxBits). Text: "kvbuf: bit index out of
	// range".
	ErrOutOfRange = kverr.ErrOutOfRange

	// ErrKeyTooLarge, ErrValueTooLarge and ErrEmptyKey reject bad keys and
	// values before anything is written. Texts: "kvbuf: key too large",
	// "kvbuf: value too large", "kvbuf: empty key".
	ErrKeyTooLarge   = kverr.ErrKeyTooLarge
	ErrValueTooLarge = kverr.ErrValueTooLarge
	ErrEmptyKey      = kverr.ErrEmptyKey

	// ErrBadRange is returned for a range whose lower bound is above its
	// upper bound (KV.DeleteRange, KV.NewIter, Bits.SetRange), and for a
	// GetMany whose output is shorter than its input. Text: "kvbuf: lower
	// bound above upper bound".
	ErrBadRange = kverr.ErrBadRange

	// ErrStaleOp is returned by a write whose op number is above the
	// persisted watermark but at or below an op the engine has already
	// declared complete (see "Ops and the watermark"): writing it would
	// make the watermark lie. It is a host bug. (A write of an op at or
	// below the persisted watermark is a redelivered op: skipped, nil.)
	// Text: "kvbuf: op already claimed by the watermark".
	ErrStaleOp = kverr.ErrStaleOp

	// ErrBadOp is returned for an op number the host cannot mean: EndOp of
	// an op above every op the engine has seen (a typo that would tell the
	// host to skip replaying ops it never applied), BeginOp of an op at or
	// below one already begun (ops are begun in log order), an op above
	// MaxOp. Nothing is changed. Text: "kvbuf: bad op number".
	ErrBadOp = kverr.ErrBadOp

	// ErrDropped is returned by operations on a keyspace handle after
	// DB.DropKV dropped it. Text: "kvbuf: keyspace dropped".
	ErrDropped = kverr.ErrDropped

	// ErrSyncFailed is wrapped by the error of every flush after a write or
	// sync of the store's write-ahead log failed: pebble cannot write its
	// log again, so the engine keeps serving reads and refuses to make
	// anything more durable. Close, then reopen (after fixing the disk) to
	// recover; nothing acknowledged is lost. Text: "kvbuf: write-ahead log
	// write or sync failed".
	ErrSyncFailed = kverr.ErrSyncFailed

	// ErrDiskFull is matched by every error whose cause is a full disk
	// (ENOSPC, which errors.Is still matches too): a flush that could not
	// grow a bitslice, a Flush or a write held by backpressure while the
	// store waits for space, a Checkpoint, an Open that could not write
	// its files. Nothing is lost: see "A full disk" in the DB caveats. It
	// is never returned alone; the text is the cause's ("...: no space
	// left on device"), the sentinel's own is "kvbuf: disk full".
	ErrDiskFull = kverr.ErrDiskFull

	// ErrPanicked is wrapped by the error a Flush returns when the flush it
	// waited for panicked (a bug); see flush.PanicError. Text: "kvbuf:
	// flush panicked".
	ErrPanicked = kverr.ErrPanicked

	// ErrForeign is returned for a keyspace or bitslice handle that belongs
	// to another engine (in a Batch, or a handle kept across a reopen), for
	// a nil handle in a Batch, and by Apply for a nil Batch or one of
	// another engine. Text: "kvbuf: handle of another engine".
	ErrForeign = kverr.ErrForeign

	// ErrNilArgument is returned, with nothing done, for a nil function,
	// reader or writer where one is required: Update's fn, Export's w,
	// Install's r. Text: "kvbuf: nil argument".
	ErrNilArgument = kverr.ErrNilArgument

	// ErrBadStream is wrapped, with ErrCorrupt, by Install's errors for a
	// stream that is not a valid snapshot stream: a bad magic, checksum,
	// record or order, a stream cut short (also io.ErrUnexpectedEOF),
	// trailing bytes, counts or a digest that do not match the content.
	// Text: "kvbuf: bad snapshot stream".
	ErrBadStream = kverr.ErrBadStream
)

// Errors of package storage used on its own. The engine never returns them
// (it opens its store read-write, builds its own batches, numbers keyspaces
// from 1 and splits a flush into batches well under pebble's limit); they
// are here because the root is the one place the module's sentinels are
// exported (see the package docs of storage and bitslice).
var (
	// ErrReadOnly is returned by storage's Store.Commit, Apply, Flush,
	// Checkpoint and CommitIngest on a store opened with
	// storage.Options.ReadOnly. Text: "kvbuf: read-only store".
	ErrReadOnly = kverr.ErrReadOnly

	// ErrBatchTooLarge is returned by storage's Store.Commit and Apply when
	// an operation would have grown the batch past pebble's 4 GiB batch
	// limit; the operation was dropped and nothing of the batch is applied.
	// Text: "kvbuf: batch too large".
	ErrBatchTooLarge = kverr.ErrBatchTooLarge

	// ErrForeignBatch is returned by storage's Store.Commit and Apply for a
	// batch made by another Store. Text: "kvbuf: batch belongs to another
	// store".
	ErrForeignBatch = kverr.ErrForeignBatch

	// ErrInvalidKeyspace is returned by storage's reads for keyspace ID 0,
	// which the store reserves, and by Store.Commit and Apply for a batch
	// that received an operation on it (the operation was dropped; nothing
	// of the batch is applied). Text: "kvbuf: invalid keyspace id".
	ErrInvalidKeyspace = kverr.ErrInvalidKeyspace
)

// mapErr is the engine's one translation of an error from a lower layer
// (buffer, storage, bitslice) into what a caller sees: nil and ErrNotFound
// as they are, ErrClosed bare whichever layer reported it, anything else
// with the context: kind ("keyspace", "snapshot of keyspace", ...) and name.
// The layers share the sentinels, so nothing else needs mapping.
func mapErr(err error, kind, name string) error {
	switch {
	case err == nil, err == ErrNotFound:
		return err
	case errors.Is(err, ErrClosed):
		return ErrClosed
	}
	return kverr.Errorf("%s %q: %w", kind, name, err)
}
