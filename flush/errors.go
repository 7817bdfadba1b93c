package flush

import "github.com/kvbuf/kvbuf/internal/kverr"

// The package's errors are the module's sentinels, shared with the engine
// (flush.ErrClosed is kvbuf.ErrClosed, and so on). Texts start with
// "kvbuf: ".

var (
	// ErrBadOptions is returned by New (and Options.Validate) for an option
	// out of range.
	ErrBadOptions = kverr.ErrBadOptions
	// ErrClosed is returned by operations that start after Close (or
	// Gate.Shut) has begun.
	ErrClosed = kverr.ErrClosed

	// ErrPanicked is wrapped by the error every caller of a failed
	// generation gets when the Target panicked or called runtime.Goexit
	// during Freeze, Write, wait or Release. Use errors.As with *PanicError
	// to get the value.
	ErrPanicked = kverr.ErrPanicked

	// ErrStaleOp is returned by BeginWrite for a write of an op that is
	// complete but above the persisted watermark: ended (by EndOp or a
	// batch), or below an op begun later without being open itself (an
	// implicitly begun op ends when a later op begins). A generation may
	// claim such an op at any moment, so a write to it could be lost in a
	// crash although the host believes it persisted. It is a host bug; the
	// write was not admitted. (At or below the persisted watermark the write
	// is skipped instead: see BeginWrite.)
	ErrStaleOp = kverr.ErrStaleOp

	// ErrBadOp is returned for an op the host could not mean: EndOp of an
	// op above every op begun (a typo that would tell the host to skip
	// replaying ops it never applied), BeginOp of an op at or below one
	// already begun (ops are begun in log order), an op above MaxOp.
	// Nothing was changed.
	ErrBadOp = kverr.ErrBadOp

	// ErrDiskFull matches an error whose cause is a full disk (ENOSPC). A
	// flush failure matching it, or ErrSyncFailed, ends the wait of writes
	// held by backpressure (see BeginWrite).
	ErrDiskFull = kverr.ErrDiskFull

	// ErrSyncFailed matches a failed write or sync of the store's
	// write-ahead log (see ErrDiskFull).
	ErrSyncFailed = kverr.ErrSyncFailed
)
