package flush

import (
	"context"
	"fmt"
)

// Target is one component the flusher makes durable. Implemented by
// buffer.Bits and buffer.KV; the engine may wrap them.
type Target interface {
	// Freeze moves pending changes into the frozen set (merged over any set kept from a
	// failed flush) and returns the highest op number in the frozen set (0 if none).
	// Writes that start after Freeze returns go to the next generation.
	Freeze() (maxOp uint64)
	// Apply writes the frozen set to storage, then persists wm after the data, durably.
	// On error the frozen set stays (still readable) and the next Freeze merges it.
	Apply(ctx context.Context, wm uint64) error
	// Release drops the frozen set after a successful Apply.
	Release()
	// PendingBytes is the memory held by pending and frozen changes.
	PendingBytes() int64
}

// Namer is optionally implemented by a Target to name it in errors. Targets
// without it are named by their Go type.
type Namer interface {
	Name() string
}

func targetName(t Target) string {
	if n, ok := t.(Namer); ok {
		return n.Name()
	}
	return fmt.Sprintf("%T", t)
}

// PanicError describes a panic or runtime.Goexit inside a target during a
// flush. It matches ErrPanicked with errors.Is, and also the panic value
// when that value is an error.
type PanicError struct {
	// Value is the value passed to panic; nil for runtime.Goexit.
	Value any
	// Goexit reports that the target called runtime.Goexit.
	Goexit bool
	// Stack is the stack of the panicking goroutine.
	Stack []byte
}

// Error implements error.
func (e *PanicError) Error() string {
	if e.Goexit {
		return "flush: target called runtime.Goexit"
	}
	return fmt.Sprintf("flush: target panicked: %v", e.Value)
}

// Unwrap returns ErrPanicked and, if the panic value is an error, that error.
func (e *PanicError) Unwrap() []error {
	if err, ok := e.Value.(error); ok {
		return []error{ErrPanicked, err}
	}
	return []error{ErrPanicked}
}
