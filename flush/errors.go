package flush

import "errors"

var (
	// ErrClosed is returned by operations that start after Close (or
	// Gate.Shut) has begun.
	ErrClosed = errors.New("flush: closed")

	// ErrPanicked is wrapped by the error every caller of a failed
	// generation gets when the Target panicked or called runtime.Goexit
	// during Freeze, Write, wait or Release. Use errors.As with *PanicError
	// to get the value.
	ErrPanicked = errors.New("flush: target panicked")

	// ErrStaleOp is returned by BeginWrite for a write of an op that is
	// complete but above the persisted watermark: ended (by EndOp or a
	// batch), or below an op begun later without being open itself (an
	// implicitly begun op ends when a later op begins). A generation may
	// claim such an op at any moment, so a write to it could be lost in a
	// crash although the host believes it persisted. It is a host bug; the
	// write was not admitted. (At or below the persisted watermark the write
	// is skipped instead: see BeginWrite.)
	ErrStaleOp = errors.New("flush: op already claimed by the watermark")

	// ErrBadOp is returned for an op the host could not mean: EndOp of an
	// op above every op begun (a typo that would tell the host to skip
	// replaying ops it never applied), BeginOp of an op at or below one
	// already begun (ops are begun in log order), an op above MaxOp.
	// Nothing was changed. The engine re-exports it, hence its text.
	ErrBadOp = errors.New("kvbuf: bad op number")
)
