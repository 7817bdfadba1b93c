package buffer

import "errors"

var (
	// ErrKeyTooLarge is returned for a key longer than Options.MaxKeySize.
	ErrKeyTooLarge = errors.New("buffer: key too large")
	// ErrValueTooLarge is returned for a value longer than Options.MaxValueSize.
	ErrValueTooLarge = errors.New("buffer: value too large")
	// ErrEmptyKey is returned for a zero-length key.
	ErrEmptyKey = errors.New("buffer: empty key")
)
