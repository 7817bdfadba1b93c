package raftkv

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvbuf/kvbuf"
)

// checkText fails unless an error's text carries the "raftkv: " prefix
// exactly once, at the start, and no "kvbuf: " prefix of a wrapped error.
func checkText(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
		return
	}
	s := err.Error()
	if !strings.HasPrefix(s, prefix) || strings.Count(s, prefix) != 1 || strings.Contains(s, "kvbuf: ") {
		t.Errorf("%s: text %q: want one %q, at the start, and no \"kvbuf: \"", what, s, prefix)
	}
}

// TestErrorTexts pins raftkv's error rules through its public API: every
// sentinel's text and every returned error's carries the "raftkv: " prefix
// once; where kvbuf has a sentinel for the condition the error matches it
// (a too-large key is kvbuf.ErrKeyTooLarge, a bad option
// kvbuf.ErrBadOptions, a missing key kvbuf.ErrNotFound, a damaged log
// kvbuf.ErrCorrupt); raftkv's own are named for what they are.
func TestErrorTexts(t *testing.T) {
	for _, s := range []error{
		ErrNotLeader, ErrProposalDropped, ErrOutcomeUnknown, ErrStopped, ErrRemoved,
		ErrUnknownKeyspace, ErrUnknownBitslice, ErrClusterMismatch, ErrRemovedID,
		ErrMemberExists, ErrNotMember, ErrLastVoter, ErrNotCaughtUp, ErrConfChangePending,
		ErrDataDir, ErrLostState, ErrRaftState, ErrUnauthenticated, ErrCorruptLog,
	} {
		checkText(t, "sentinel", s)
	}
	if !errors.Is(ErrCorruptLog, kvbuf.ErrCorrupt) {
		t.Errorf("ErrCorruptLog does not match kvbuf.ErrCorrupt")
	}
	if ErrProposalDropped.Error() != "raftkv: proposal dropped" {
		t.Errorf("ErrProposalDropped reads %q", ErrProposalDropped)
	}

	// Options.
	_, err := Open(nil)
	checkText(t, "Open(nil)", err)
	if !errors.Is(err, kvbuf.ErrBadOptions) {
		t.Errorf("Open(nil): %v, want kvbuf.ErrBadOptions", err)
	}
	_, err = Open(&Options{ID: 1, Dir: t.TempDir(), Peers: map[uint64]string{1: "127.0.0.1:1"},
		Engine: &kvbuf.Options{MaxKeySize: -1}})
	checkText(t, "Open with bad engine options", err)
	if !errors.Is(err, kvbuf.ErrBadOptions) {
		t.Errorf("Open with bad engine options: %v, want kvbuf.ErrBadOptions", err)
	}

	// Writes and reads on a cluster.
	c := newCluster(t, 3, nil)
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateKeyspace(ctx, "ks") })
	l := c.leader(10 * time.Second)
	for _, tc := range []struct {
		what string
		err  error
		want error
	}{
		{"key too large", l.Put(bg, "ks", bytes.Repeat([]byte("k"), 5000), []byte("v")), kvbuf.ErrKeyTooLarge},
		{"empty key", l.Delete(bg, "ks", nil), kvbuf.ErrEmptyKey},
		{"value too large", l.Put(bg, "ks", []byte("k"), make([]byte, 1<<20+1)), kvbuf.ErrValueTooLarge},
		{"unknown keyspace", l.Put(bg, "nope", []byte("k"), []byte("v")), ErrUnknownKeyspace},
		{"missing key", func() error { _, err := l.Get(bg, "ks", []byte("absent"), nil); return err }(), kvbuf.ErrNotFound},
		{"read of a too-large key", func() error { _, err := l.Get(bg, "ks", bytes.Repeat([]byte("k"), 5000), nil); return err }(), kvbuf.ErrKeyTooLarge},
		{"bad name", l.CreateKeyspace(bg, "a/b"), kvbuf.ErrBadName},
		{"add node 0", l.AddNode(bg, 0, "127.0.0.1:1"), kvbuf.ErrBadOptions},
		{"remove a non-member", l.RemoveNode(bg, 9), ErrNotMember},
		{"cancelled write", func() error {
			ctx, cancel := context.WithCancel(bg)
			cancel()
			return l.Put(ctx, "ks", []byte("k"), []byte("v"))
		}(), context.Canceled},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.what, tc.err, tc.want)
		}
		if tc.want != context.Canceled {
			checkText(t, tc.what, tc.err)
		}
	}
	for _, id := range c.ids() {
		if n := c.tn(id).node(); n != nil && n != l {
			err := n.Put(bg, "ks", []byte("k"), []byte("v"))
			if !errors.Is(err, ErrNotLeader) {
				t.Errorf("a write to a follower: %v", err)
			}
			checkText(t, "write to a follower", err)
			break
		}
	}

	// A damaged data directory: the identity file the log store keeps.
	c.stop(1)
	dir := c.options(1, false).Dir
	if err := os.WriteFile(filepath.Join(dir, identityFile), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Open(c.options(1, false))
	checkText(t, "Open of a damaged identity file", err)
	if !errors.Is(err, ErrCorruptLog) || !errors.Is(err, kvbuf.ErrCorrupt) {
		t.Errorf("Open of a damaged identity file: %v, want ErrCorruptLog and kvbuf.ErrCorrupt", err)
	}
}
