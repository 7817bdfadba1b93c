package kvbuf

import (
	"errors"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/buffer"
	"github.com/kvbuf/kvbuf/flush"
	"github.com/kvbuf/kvbuf/storage"
)

var (
	// ErrClosed is returned by every operation that starts after Close has
	// begun. It is the drain gate's error, so errors.Is matches it however
	// deep in the engine the refusal happened.
	ErrClosed = flush.ErrClosed

	// ErrNotFound is returned by KV.Get for a key that is absent or deleted.
	ErrNotFound = storage.ErrNotFound

	// ErrLocked is returned by Open when another engine (in this process or
	// another one) has the directory open.
	ErrLocked = errors.New("kvbuf: directory locked by another engine")

	// ErrCorrupt marks on-disk corruption found by Open or while reading: a
	// damaged manifest, bitslice file or pebble store. Errors that match it
	// also match the lower-level package's own ErrCorrupt.
	ErrCorrupt = errors.New("kvbuf: corrupt engine directory")

	// ErrNotEngine is returned by Open for a non-empty directory that was
	// not created by kvbuf, so the engine never writes into foreign data.
	ErrNotEngine = errors.New("kvbuf: not a kvbuf directory")

	// ErrBadName is returned by DB.KV and DB.Bits for a name that is empty,
	// longer than 128 bytes, or has a byte outside [A-Za-z0-9._-].
	ErrBadName = errors.New("kvbuf: bad keyspace or bitslice name")

	// ErrOutOfRange is returned by Bits.Set for an index at or past the
	// bitslice's maximum length (buffer.Options.MaxBits, default 2^32).
	ErrOutOfRange = bitslice.ErrOutOfRange

	// ErrKeyTooLarge, ErrValueTooLarge and ErrEmptyKey reject bad keys and
	// values before they reach the buffer.
	ErrKeyTooLarge   = buffer.ErrKeyTooLarge
	ErrValueTooLarge = buffer.ErrValueTooLarge
	ErrEmptyKey      = buffer.ErrEmptyKey
)
