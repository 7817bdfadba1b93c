package bitslice

import "errors"

var (
	// ErrCorrupt is wrapped by every error that reports a file which is not
	// a valid bitslice: wrong magic or version, bad checksums in both header
	// slots, a file shorter than its header says, absurd sizes.
	ErrCorrupt = errors.New("corrupt bitslice file")
	// ErrLocked is returned by Open when another open file description (in
	// this process or another) holds the file's lock.
	ErrLocked = errors.New("bitslice file is locked by another user")
	// ErrClosed is returned by every method that needs the file after Close.
	ErrClosed = errors.New("bitslice file is closed")
	// ErrOutOfRange is returned for a bit or word index at or past Len, for
	// a length above MaxBits, and for unsorted Apply/ApplyWords input (which
	// cannot be range-checked in one pass).
	ErrOutOfRange = errors.New("bitslice index out of range")
)
