package buffer

import "github.com/kvbuf/kvbuf/internal/kverr"

// The package's errors are the module's sentinels (see the root package's
// errors.go for the texts), so errors.Is against buffer's names and the
// root's match the same errors.
var (
	// ErrKeyTooLarge is returned for a key longer than Options.MaxKeySize.
	ErrKeyTooLarge = kverr.ErrKeyTooLarge
	// ErrValueTooLarge is returned for a value longer than Options.MaxValueSize.
	ErrValueTooLarge = kverr.ErrValueTooLarge
	// ErrEmptyKey is returned for a zero-length key.
	ErrEmptyKey = kverr.ErrEmptyKey
	// ErrBadRange is returned for a range whose lower bound is above its
	// upper bound.
	ErrBadRange = kverr.ErrBadRange
	// ErrBadOptions is returned by Options.Validate for a value out of range.
	ErrBadOptions = kverr.ErrBadOptions
	// ErrDropped is returned by writes to a keyspace after KV.Drop.
	ErrDropped = kverr.ErrDropped
)
