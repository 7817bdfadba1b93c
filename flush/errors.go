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

	// ErrStaleOp is returned by BeginWrite for an op number that a frozen
	// generation has already claimed but that is not yet persisted
	// (Stats.Watermark < op <= Stats.ClaimedOp): the op was complete, so a
	// write to it could be lost in a crash although the host believes it
	// persisted. The write was not admitted. (At or below the persisted
	// watermark the write is skipped instead: see BeginWrite.)
	ErrStaleOp = errors.New("flush: op already claimed by the watermark")
)
