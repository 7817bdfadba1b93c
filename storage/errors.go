package storage

import "github.com/kvbuf/kvbuf/internal/kverr"

// The package's errors are the module's sentinels, shared with the engine
// (storage.ErrNotFound is kvbuf.ErrNotFound, and so on), so errors.Is against
// either name matches. Texts start with "kvbuf: ".

var (
	// ErrBadOptions is returned by Open (and Options.Validate) for an
	// option out of range.
	ErrBadOptions = kverr.ErrBadOptions
	// ErrNotFound is returned by Get, GetAppend and GetMeta (of a Store or
	// a Snapshot) when the key is absent.
	ErrNotFound = kverr.ErrNotFound
	// ErrClosed is returned by every Store method called after Store.Close,
	// by Snapshot methods after Snapshot.Close or Store.Close, and by
	// iterators and snapshots that Store.Close closed.
	ErrClosed = kverr.ErrClosed
	// ErrCorrupt wraps every error pebble reports as on-disk corruption
	// (pebble.ErrCorruption), at Open or during reads, and a stored
	// watermark that does not parse. Its text is "kvbuf: corrupt store
	// block", and it matches the engine's ErrCorrupt too.
	ErrCorrupt = kverr.ErrCorruptBlock
	// ErrLocked is returned by Open when the directory is already open by
	// another Store, in this process or another one.
	ErrLocked = kverr.ErrLocked
	// ErrReadOnly is returned by Commit, Apply and Flush on a store opened
	// with Options.ReadOnly.
	ErrReadOnly = kverr.ErrReadOnly
	// ErrBatchTooLarge is returned by Commit and Apply when an operation
	// would have grown the batch past pebble's 4 GiB batch limit. The
	// offending operation was dropped; nothing of the batch is applied.
	ErrBatchTooLarge = kverr.ErrBatchTooLarge
	// ErrForeignBatch is returned by Commit and Apply for a batch made by
	// another Store.
	ErrForeignBatch = kverr.ErrForeignBatch
	// ErrInvalidKeyspace is returned for keyspace ID 0: by Get, GetAppend
	// and NewIter directly, and by Commit and Apply for a batch that
	// received an operation on it (the operation was dropped; nothing of
	// the batch is applied).
	ErrInvalidKeyspace = kverr.ErrInvalidKeyspace
	// ErrSyncFailed is returned by Commit.Wait when pebble failed to write
	// or sync the write-ahead log, and from then on by every Commit, Apply
	// and Flush of the Store: pebble cannot write to a log that failed, so
	// the store accepts no more writes until it is closed and reopened.
	// Reads still work. Errors wrapping it also wrap pebble's error.
	ErrSyncFailed = kverr.ErrSyncFailed
)
