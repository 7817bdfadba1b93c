package buffer

import "errors"

var (
	// ErrKeyTooLarge is returned for a key longer than Options.MaxKeySize.
	ErrKeyTooLarge = errors.New("kvbuf: key too large")
	// ErrValueTooLarge is returned for a value longer than Options.MaxValueSize.
	ErrValueTooLarge = errors.New("kvbuf: value too large")
	// ErrEmptyKey is returned for a zero-length key.
	ErrEmptyKey = errors.New("kvbuf: empty key")
	// ErrBadRange is returned for a range whose lower bound is above its
	// upper bound.
	ErrBadRange = errors.New("kvbuf: lower bound above upper bound")
	// ErrBadOptions is returned by Options.Validate for a value out of range.
	ErrBadOptions = errors.New("kvbuf: bad options")
	// ErrDropped is returned by writes to a keyspace after KV.Drop.
	ErrDropped = errors.New("kvbuf: keyspace dropped")
)
