// Package kverr defines every sentinel error of the kvbuf module, once, and
// the one way its packages add context to an error.
//
// The engine's packages (buffer, flush, storage, bitslice, the engine
// directory) return these values and export no names for them; the root
// exports each under one name (kvbuf.ErrClosed is ErrClosed), so an
// errors.Is check written against the root's name matches the error of
// every layer, storage and bitslice used on their own included, and the
// root needs no translation table.
//
// # Texts
//
// Every text starts with "kvbuf: " exactly once, then the context from the
// outermost in, then the sentinel's text:
//
//	kvbuf: keyspace "users": key of 300 bytes (max 256): key too large
//
// A sentinel alone reads "kvbuf: key too large". Errorf keeps the prefix
// single: it puts "kvbuf: " in front of its format and takes it off the text
// of every error it formats. So a layer that adds context calls Errorf, never
// fmt.Errorf with an error that may come from another layer (that would
// leave "kvbuf: " in the middle of the text). fmt.Errorf stays fine for
// fragments that wrap no kvbuf error.
//
// # Corruption
//
// Corruption is marked as in pebble (MarkCorruptionError): three finer
// sentinels say what is damaged, and each matches ErrCorrupt with
// errors.Is, so a host that only asks "is this corruption?" needs one check.
//
// # A full disk
//
// An error whose cause is ENOSPC matches ErrDiskFull too, whichever layer
// met it (a bitslice growth, a store write, a checkpoint's copy, a
// manifest): Errorf marks every error it returns that wraps
// syscall.ENOSPC, so the cause stays (errors.Is(err, syscall.ENOSPC) is
// true) and the text is unchanged ("...: no space left on device").
package kverr

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// Prefix starts the text of every kvbuf error.
const Prefix = "kvbuf: "

// sentinel is a sentinel error: its text is text, and it matches its
// parent (ErrCorrupt for the corruption sentinels) with errors.Is.
type sentinel struct {
	text   string
	parent error
}

func (e *sentinel) Error() string { return e.text }
func (e *sentinel) Unwrap() error { return e.parent }

func newSentinel(msg string, parent error) error {
	return &sentinel{text: Prefix + msg, parent: parent}
}

// NewKind returns a sentinel error of another package whose text is text
// (with that package's prefix) and that matches parent, one of kvbuf's
// sentinels, with errors.Is: raftkv's ErrCorruptLog is a kind of
// ErrCorrupt.
func NewKind(text string, parent error) error { return &sentinel{text: text, parent: parent} }

// The sentinels. Each comment says what the error means; the packages that
// return one document when.
var (
	// ErrClosed: the engine, store, bitslice file or directory was closed
	// (or its Close began) before the operation.
	ErrClosed = newSentinel("closed", nil)
	// ErrNotFound: the key is absent or deleted.
	ErrNotFound = newSentinel("not found", nil)
	// ErrLocked: another engine or handle, in this process or another one,
	// holds the directory or file.
	ErrLocked = newSentinel("locked by another engine", nil)

	// ErrCorrupt matches every corruption below; it is not returned alone.
	ErrCorrupt = newSentinel("corruption", nil)
	// ErrCorruptBlock: the pebble store reported corruption (a block or
	// record failing its checksum or format check, at Open or while
	// reading), or holds a value kvbuf wrote that does not parse.
	ErrCorruptBlock = newSentinel("corrupt store block", ErrCorrupt)
	// ErrCorruptDir: the engine directory's own files are damaged: the
	// manifest, the keyspace or bitslice catalog, the engine id, the
	// layout (a ready manifest without its store or bits directory).
	ErrCorruptDir = newSentinel("corrupt engine directory", ErrCorrupt)
	// ErrCorruptBits: a bitslice file is not a valid bitslice: bad magic,
	// version or checksums in both header slots, truncated, absurd sizes.
	ErrCorruptBits = newSentinel("corrupt bitslice file", ErrCorrupt)

	// ErrBadStream: a snapshot stream that is not valid (bad magic,
	// checksum, record or order, cut short, trailing bytes, counts or a
	// digest that do not match). It is corruption of the stream.
	ErrBadStream = newSentinel("bad snapshot stream", ErrCorrupt)

	// ErrNotEngine: the path is not a kvbuf engine directory (a file, or a
	// non-empty directory kvbuf did not create). Not corruption: the
	// engine refuses to touch foreign data.
	ErrNotEngine = newSentinel("not a kvbuf directory", nil)

	// ErrBadName: a keyspace or bitslice name outside the name rule.
	ErrBadName = newSentinel("bad keyspace or bitslice name", nil)
	// ErrBadOptions: an option out of range.
	ErrBadOptions = newSentinel("bad options", nil)
	// ErrBudgetClosed: an engine opened with a closed memory budget.
	ErrBudgetClosed = newSentinel("memory budget closed", nil)
	// ErrBudgetInUse: a memory budget closed while engines use it.
	ErrBudgetInUse = newSentinel("memory budget in use", nil)
	// ErrOutOfRange: a bit or word index at or past the length or maximum.
	ErrOutOfRange = newSentinel("bit index out of range", nil)
	// ErrKeyTooLarge: a key longer than the maximum key size.
	ErrKeyTooLarge = newSentinel("key too large", nil)
	// ErrValueTooLarge: a value longer than the maximum value size.
	ErrValueTooLarge = newSentinel("value too large", nil)
	// ErrEmptyKey: a zero-length key.
	ErrEmptyKey = newSentinel("empty key", nil)
	// ErrBadRange: a range whose lower bound is above its upper bound (or
	// an output slice shorter than the input).
	ErrBadRange = newSentinel("lower bound above upper bound", nil)
	// ErrDropped: the keyspace was dropped.
	ErrDropped = newSentinel("keyspace dropped", nil)
	// ErrForeign: a keyspace or bitslice handle of another engine, a nil
	// handle in a batch, or a nil batch.
	ErrForeign = newSentinel("handle of another engine", nil)
	// ErrNilArgument: a nil function, reader or writer where one is
	// required.
	ErrNilArgument = newSentinel("nil argument", nil)

	// ErrStaleOp: a write of an op that is complete but above the persisted
	// watermark (a host bug).
	ErrStaleOp = newSentinel("op already claimed by the watermark", nil)
	// ErrBadOp: an op number the host cannot mean.
	ErrBadOp = newSentinel("bad op number", nil)
	// ErrPanicked: a flush stage panicked or called runtime.Goexit (a bug).
	ErrPanicked = newSentinel("flush panicked", nil)
	// ErrSyncFailed: a write or sync of the store's write-ahead log failed;
	// the store accepts no more writes until reopened.
	ErrSyncFailed = newSentinel("write-ahead log write or sync failed", nil)
	// ErrDiskFull: a write found no space left on its device (ENOSPC).
	// Errorf marks an error wrapping syscall.ENOSPC with it (see "A full
	// disk"); it is not returned alone.
	ErrDiskFull = newSentinel("disk full", nil)

	// ErrReadOnly: a write to a store opened read-only.
	ErrReadOnly = newSentinel("read-only store", nil)
	// ErrBatchTooLarge: a store batch past pebble's 4 GiB limit.
	ErrBatchTooLarge = newSentinel("batch too large", nil)
	// ErrForeignBatch: a store batch made by another store.
	ErrForeignBatch = newSentinel("batch belongs to another store", nil)
	// ErrInvalidKeyspace: keyspace id 0, which the store reserves.
	ErrInvalidKeyspace = newSentinel("invalid keyspace id", nil)
)

// Errorf is fmt.Errorf for every error that adds context to another: the
// text is Prefix followed by format, with Prefix taken off the front of the
// text of every error argument, so it appears once. %w wraps as with
// fmt.Errorf (errors.Is and errors.As see the arguments themselves).
func Errorf(format string, args ...any) error {
	as := args
	for i, a := range args {
		if e, ok := a.(error); ok && e != nil {
			if &as[0] == &args[0] {
				as = append([]any(nil), args...) // not the caller's slice
			}
			as[i] = bare{e}
		}
	}
	return MarkDiskFull(fmt.Errorf(Prefix+format, as...))
}

// MarkDiskFull returns err marked as ErrDiskFull if its cause is ENOSPC (it
// wraps syscall.ENOSPC) and it is not marked already; otherwise err itself.
// Errorf calls it; code that returns an error of another package without
// Errorf calls it at the boundary.
func MarkDiskFull(err error) error {
	if err == nil || !errors.Is(err, syscall.ENOSPC) || errors.Is(err, ErrDiskFull) {
		return err
	}
	return diskFull{err}
}

// diskFull is an ENOSPC error marked as ErrDiskFull: its text and its chain
// are the error's own.
type diskFull struct{ err error }

func (d diskFull) Error() string        { return d.err.Error() }
func (d diskFull) Unwrap() error        { return d.err }
func (d diskFull) Is(target error) bool { return target == ErrDiskFull }

// bare shows an error without Prefix; it wraps the error itself, so that
// errors.Is and errors.As look through it.
type bare struct{ err error }

func (b bare) Error() string { return Trim(b.err.Error()) }
func (b bare) Unwrap() error { return b.err }

// Trim returns s without a leading Prefix (for printing an error's text
// after context of one's own, as kvtool does).
func Trim(s string) string { return strings.TrimPrefix(s, Prefix) }
