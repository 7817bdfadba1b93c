package storage

import "errors"

var (
	// ErrNotFound is returned by Get, GetAppend and GetMeta (of a Store or
	// a Snapshot) when the key is absent.
	ErrNotFound = errors.New("storage: not found")
	// ErrClosed is returned by every Store method called after Store.Close,
	// by Snapshot methods after Snapshot.Close or Store.Close, and by
	// iterators and snapshots that Store.Close closed.
	ErrClosed = errors.New("storage: closed")
	// ErrCorrupt wraps every error pebble reports as on-disk corruption
	// (pebble.ErrCorruption), at Open or during reads.
	ErrCorrupt = errors.New("storage: corrupt store")
	// ErrLocked is returned by Open when the directory is already open by
	// another Store, in this process or another one.
	ErrLocked = errors.New("storage: directory locked by another store")
	// ErrReadOnly is returned by Commit, Apply and Flush on a store opened
	// with Options.ReadOnly.
	ErrReadOnly = errors.New("storage: read-only store")
	// ErrBatchTooLarge is returned by Commit and Apply when an operation
	// would have grown the batch past pebble's 4 GiB batch limit. The
	// offending operation was dropped; nothing of the batch is applied.
	ErrBatchTooLarge = errors.New("storage: batch too large")
	// ErrForeignBatch is returned by Commit and Apply for a batch made by
	// another Store.
	ErrForeignBatch = errors.New("storage: batch belongs to another store")
	// ErrInvalidKeyspace is returned for keyspace ID 0: by Get, GetAppend
	// and NewIter directly, and by Commit and Apply for a batch that
	// received an operation on it (the operation was dropped; nothing of
	// the batch is applied).
	ErrInvalidKeyspace = errors.New("storage: invalid keyspace id")
	// ErrSyncFailed is returned by Commit.Wait when pebble failed to write
	// or sync the write-ahead log, and from then on by every Commit, Apply
	// and Flush of the Store: pebble cannot write to a log that failed, so
	// the store accepts no more writes until it is closed and reopened.
	// Reads still work. Errors wrapping it also wrap pebble's error.
	ErrSyncFailed = errors.New("storage: write-ahead log write or sync failed")
)
