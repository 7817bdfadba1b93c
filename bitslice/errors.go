package bitslice

import "github.com/kvbuf/kvbuf/internal/kverr"

// The package's errors are the module's sentinels, shared with the engine
// (bitslice.ErrCorrupt is kvbuf.ErrCorruptBits, and so on), so errors.Is
// against either name matches. Texts start with "kvbuf: ".
var (
	// ErrCorrupt is wrapped by every error that reports a file which is not
	// a valid bitslice: wrong magic or version, bad checksums in both header
	// slots, a file shorter than its header says, absurd sizes. Its text is
	// "kvbuf: corrupt bitslice file", and it matches the engine's
	// ErrCorrupt too.
	ErrCorrupt = kverr.ErrCorruptBits
	// ErrLocked is returned by Open when another open file description (in
	// this process or another) holds the file's lock.
	ErrLocked = kverr.ErrLocked
	// ErrClosed is returned by every method that needs the file after Close.
	ErrClosed = kverr.ErrClosed
	// ErrOutOfRange is returned for a bit or word index at or past Len, for
	// a length above MaxBits, and for unsorted Apply/ApplyWords input (which
	// cannot be range-checked in one pass).
	ErrOutOfRange = kverr.ErrOutOfRange
)
