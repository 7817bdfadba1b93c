package flush

import "errors"

var (
	// ErrClosed is returned by operations that start after Close (or
	// Gate.Shut) has begun.
	ErrClosed = errors.New("flush: closed")

	// ErrPanicked is wrapped by the error every waiter of a flush generation
	// gets when a target panicked or called runtime.Goexit during that
	// flush. Use errors.As with *PanicError to get the value.
	ErrPanicked = errors.New("flush: target panicked")
)
