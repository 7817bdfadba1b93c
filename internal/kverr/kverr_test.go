package kverr

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
	"testing"
)

func TestErrorf(t *testing.T) {
	inner := Errorf("key of %d bytes (max %d): %w", 5, 4, ErrKeyTooLarge)
	outer := Errorf("keyspace %q: %w", "users", inner)
	if got, want := outer.Error(), `kvbuf: keyspace "users": key of 5 bytes (max 4): key too large`; got != want {
		t.Errorf("text %q, want %q", got, want)
	}
	if !errors.Is(outer, ErrKeyTooLarge) {
		t.Error("the sentinel is lost through Errorf")
	}
	// Two errors, a non-kvbuf one kept as it is; errors.As sees through.
	pe := &fs.PathError{Op: "open", Path: "/x", Err: fs.ErrNotExist}
	both := Errorf("%w: %w", ErrCorruptDir, pe)
	if got, want := both.Error(), "kvbuf: corrupt engine directory: open /x: file does not exist"; got != want {
		t.Errorf("text %q, want %q", got, want)
	}
	var got *fs.PathError
	if !errors.As(both, &got) || got != pe || !errors.Is(both, ErrCorrupt) || !errors.Is(both, os.ErrNotExist) {
		t.Errorf("errors.As/Is through Errorf: %v", both)
	}
	// The caller's arguments are not rewritten.
	args := []any{ErrClosed}
	_ = Errorf("x: %w", args...)
	if args[0] != ErrClosed {
		t.Error("Errorf changed its caller's slice")
	}
	// A nil error argument formats as fmt does.
	if got, want := Errorf("x: %v", error(nil)).Error(), "kvbuf: x: <nil>"; got != want {
		t.Errorf("text %q, want %q", got, want)
	}
}

func TestCorruptionKinds(t *testing.T) {
	for _, e := range []error{ErrCorruptBlock, ErrCorruptDir, ErrCorruptBits, ErrBadStream} {
		if !errors.Is(e, ErrCorrupt) {
			t.Errorf("%v does not match ErrCorrupt", e)
		}
		if errors.Is(ErrCorrupt, e) {
			t.Errorf("ErrCorrupt matches the finer %v", e)
		}
	}
	if errors.Is(ErrNotEngine, ErrCorrupt) || errors.Is(ErrCorruptDir, ErrCorruptBlock) {
		t.Error("kinds of corruption, or a foreign directory, match each other")
	}
}

// TestDiskFull: an error wrapping ENOSPC, formatted by Errorf at any
// depth, matches ErrDiskFull and still ENOSPC, with its text unchanged;
// other errors do not match ErrDiskFull.
func TestDiskFull(t *testing.T) {
	pe := &fs.PathError{Op: "write", Path: "/x/000001.log", Err: syscall.ENOSPC}
	inner := Errorf("grow to %d bits: allocate: %w", 64, pe)
	outer := Errorf("flush bitslice %q: %w", "b", inner)
	for _, err := range []error{inner, outer, MarkDiskFull(pe)} {
		if !errors.Is(err, ErrDiskFull) || !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("%v: ErrDiskFull %v, ENOSPC %v; want both", err, errors.Is(err, ErrDiskFull), errors.Is(err, syscall.ENOSPC))
		}
	}
	if got, want := outer.Error(), `kvbuf: flush bitslice "b": grow to 64 bits: allocate: write /x/000001.log: no space left on device`; got != want {
		t.Errorf("text %q, want %q", got, want)
	}
	var got *fs.PathError
	if !errors.As(outer, &got) || got != pe {
		t.Error("errors.As does not find the cause")
	}
	for _, err := range []error{Errorf("x: %w", syscall.EIO), ErrSyncFailed, MarkDiskFull(nil)} {
		if errors.Is(err, ErrDiskFull) {
			t.Errorf("%v matches ErrDiskFull", err)
		}
	}
	if MarkDiskFull(outer) != outer {
		t.Error("an error marked already is marked again")
	}
}
