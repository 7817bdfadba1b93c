package storage

import "errors"

var (
	// ErrNotFound is returned by Get and GetMeta when the key is absent.
	ErrNotFound = errors.New("storage: not found")
	// ErrClosed is returned by every method called after Store.Close, and by
	// iterators closed by Store.Close.
	ErrClosed = errors.New("storage: closed")
	// ErrCorrupt wraps every error pebble reports as on-disk corruption
	// (pebble.ErrCorruption), at Open or during reads.
	ErrCorrupt = errors.New("storage: corrupt store")
	// ErrLocked is returned by Open when the directory is already open by
	// another Store, in this process or another one.
	ErrLocked = errors.New("storage: directory locked by another store")
	// ErrReadOnly is returned by Apply and Flush on a store opened with
	// Options.ReadOnly.
	ErrReadOnly = errors.New("storage: read-only store")
	// ErrBatchTooLarge is returned by Apply when a Put, Delete or SetMeta
	// would have grown the batch past pebble's 4 GiB batch limit. The
	// offending operation was dropped; nothing of the batch is applied.
	ErrBatchTooLarge = errors.New("storage: batch too large")
	// ErrForeignBatch is returned by Apply for a batch made by another Store.
	ErrForeignBatch = errors.New("storage: batch belongs to another store")
)
