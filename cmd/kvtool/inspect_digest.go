package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvbuf/kvbuf/internal/digest"
)

// errDigestLocked is inspect --digest's error for an engine a running host
// holds: its content is partly pending, in the host's memory.
var errDigestLocked = errors.New("--digest needs an engine no process has open (ask the running host: kvraft's /status?digest=1)")

// addDigest computes the content digest of the engine e describes (the
// same digest as kvbuf's Snapshot.Digest and kvraft's status; see package
// internal/digest) from its files.
func addDigest(e *engineJSON) error {
	if e.Locked {
		return fmt.Errorf("%s: %w", e.Path, errDigestLocked)
	}
	sum, err := digest.Dir(context.Background(), e.Path)
	if err != nil {
		return err
	}
	e.Digest = sum.String()
	return nil
}
