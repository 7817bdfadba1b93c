package raftkv

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"

	"go.etcd.io/raft/v3"
)

// The Ready loop (Node.run) is the only goroutine that touches raft: it
// owns a raft.RawNode, and everything else (proposals, reads, messages from
// the transport, reports of unreachable peers and snapshot outcomes) is a
// call queued for it. etcd's raft.Node runs raft on a goroutine of its own,
// where a panic of raft's cannot be recovered and kills the process with a
// stack trace; on this goroutine it can (Node.guard).
//
// raft reports a broken rule by panicking: a follower told that entries it
// does not have are committed ("tocommit(N) is out of range [lastIndex(M)]",
// a node whose directory was wiped or restored from an old copy), a commit
// index past the log on restart, an error of the log store, a conf change
// it cannot apply. The node detects the conditions it can name before raft
// sees them and stops with a typed error saying what the operator should do
// (ErrLostState, ErrDataDir, the member API's refusals); guard is the
// boundary for the rest.

// loopCall is work for the Ready loop: fn runs there with raft.
type loopCall func(rn *raft.RawNode)

// maxCallsPerTurn bounds the queued calls the loop runs before it handles
// raft's Ready, so that a stream of messages cannot starve it.
const maxCallsPerTurn = 1024

// errNotQueued wraps the error of a call that never reached the loop (the
// caller's context ended first): nothing was done.
var errNotQueued = errors.New("raftkv: call not queued")

// enqueue hands fn to the Ready loop, waiting for room in the queue until
// ctx ends (errNotQueued wrapping ctx.Err()) or the node stops.
func (n *Node) enqueue(ctx context.Context, fn loopCall) error {
	select {
	case n.calls <- fn:
		return nil
	case <-ctx.Done():
		return errorf("%w: %w", errNotQueued, ctx.Err())
	case <-n.stopc:
		return n.stopped()
	}
}

// onLoop runs fn on the Ready loop and returns its error. An error wrapping
// errNotQueued means fn never ran; ErrOutcomeUnknown that ctx ended after it
// was queued (it ran, or will).
func (n *Node) onLoop(ctx context.Context, fn func(rn *raft.RawNode) error) error {
	done := make(chan error, 1)
	if err := n.enqueue(ctx, func(rn *raft.RawNode) { done <- fn(rn) }); err != nil {
		return err
	}
	return n.outcome(ctx, done)
}

// outcome waits for the result of something the loop took: ch's error, or
// ErrOutcomeUnknown if ctx ends or the node stops first (what was asked
// may have happened or may yet happen).
func (n *Node) outcome(ctx context.Context, ch <-chan error) error {
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return errorf("%w: %w", ErrOutcomeUnknown, ctx.Err())
	case <-n.stopc:
		// A loop that answered and then stopped (a node applying its own
		// removal does both in one turn) leaves both ready, and select
		// picks at random: the answer wins.
		select {
		case err := <-ch:
			return err
		default:
		}
		return errorf("%w: %w", ErrOutcomeUnknown, n.stopped())
	}
}

// raftPanic is the value raftLogger's Panic and Fatal panic with.
type raftPanic string

// guard runs fn, which calls into raft, and turns a panic raised by raft
// (through its logger, or by raft's own code: a storage error, a check of
// its invariants) into an error, after which the caller must stop the node
// and never use raft again. This is the boundary where raft's panics are
// recovered, because it is the only one: raft has no error return for
// them. Any other panic (a runtime error, in raft or not, or one of this
// package's) is not raft's report of a broken rule and is re-raised.
func (n *Node) guard(fn func() error) (err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if !raisedByRaft(r) {
			panic(r)
		}
		err = n.raftRefused(r)
	}()
	return fn()
}

// raisedByRaft reports whether the panic of value r was raised by raft. It
// must be called by the deferred function that recovered r (it inspects the
// stack the panic unwinds).
func raisedByRaft(r any) bool {
	if _, ok := r.(raftPanic); ok {
		return true
	}
	if _, ok := r.(runtime.Error); ok {
		return false
	}
	// The frame that called panic: the first after runtime.gopanic.
	pc := make([]uintptr, 64)
	frames := runtime.CallersFrames(pc[:runtime.Callers(1, pc)])
	afterPanic := false
	for {
		f, more := frames.Next()
		if afterPanic {
			return strings.HasPrefix(f.Function, "go.etcd.io/raft/v3.") || strings.HasPrefix(f.Function, "go.etcd.io/raft/v3/")
		}
		if f.Function == "runtime.gopanic" {
			afterPanic = true
		}
		if !more {
			return false
		}
	}
}

// raftRefused is the error of a node raft stopped with the panic value r:
// it names the node, the indexes raft works from, raft's message (or the
// log store's error, wrapped) and what to do.
func (n *Node) raftRefused(r any) error {
	cause, ok := r.(error)
	if !ok {
		cause = errors.New(fmt.Sprint(r))
	}
	trunc, last := n.ls.bounds()
	return errorf("node %d: %w (log (%d, %d], commit %d, applied %d): %w; if its data directory was wiped, restored from a copy or damaged, %s",
		n.id, cause, trunc, last, n.ls.hardState().GetCommit(), n.applied, ErrRaftState, replaceAdvice(n.id))
}

// replaceAdvice says how to bring back a node whose raft state the cluster
// cannot use.
func replaceAdvice(id uint64) string {
	return fmt.Sprintf("remove node %d (DELETE /members/%d on a member) and add it back under a new ID with an empty data directory and --join", id, id)
}
