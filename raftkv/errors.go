package raftkv

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

// Errors. Each is a sentinel to test with errors.Is; the errors a Node
// returns wrap them with the node, keyspace or path involved. Where kvbuf
// has a sentinel for the condition, raftkv returns an error wrapping it
// instead of one of its own: a key over the engine's limit matches
// kvbuf.ErrKeyTooLarge, a bad option kvbuf.ErrBadOptions, a missing key
// kvbuf.ErrNotFound, a damaged raft log kvbuf.ErrCorrupt (through
// ErrCorruptLog).
//
// # Texts
//
// Every error text starts with "raftkv: " exactly once, then the context
// from the outermost in (the node, the keyspace, the path, the index),
// then the sentinel's own text without its prefix, kvbuf's included; some
// add after it what the operator should do:
//
//	raftkv: keyspace "users": key of 300 bytes (max 256): key too large
//	raftkv: node 2: proposal dropped
//	raftkv: node 3: lost raft state the cluster counts on: its commit index 90 is past the end of its log (12); remove node 3 ...
//
// A sentinel returned as it is reads "raftkv: not the leader".
var (
	// ErrNotLeader is returned by a write to a node that is not the
	// leader: nothing was proposed. The error is a *NotLeaderError that
	// names the leader this node knows of, if any.
	ErrNotLeader = errors.New("raftkv: not the leader")

	// ErrProposalDropped is returned by a write that raft refused to
	// append (the node lost its leadership, a leadership transfer is
	// under way, or too many entries are uncommitted): nothing was
	// written; retry.
	ErrProposalDropped = errors.New("raftkv: proposal dropped")

	// ErrOutcomeUnknown is returned by a write whose context ended, or
	// whose node stopped, after it was proposed and before it was applied
	// here: it may or may not be committed (and later applied). The
	// error also wraps the cause (ctx.Err() or ErrStopped).
	ErrOutcomeUnknown = errors.New("raftkv: outcome unknown")

	// ErrStopped is returned by every call after Close began, and by a
	// node that stopped after a fatal error (see Node.Err).
	ErrStopped = errors.New("raftkv: node stopped")

	// ErrRemoved is returned by a node removed from the cluster (by
	// Node.RemoveNode on a member), and by Open for its data directory.
	ErrRemoved = errors.New("raftkv: node removed from the cluster")

	// ErrUnknownKeyspace and ErrUnknownBitslice are returned for a
	// keyspace or bitslice that has not been created (CreateKeyspace,
	// CreateBitslice). Reads and writes never create them, so a typo
	// cannot create a replicated keyspace.
	ErrUnknownKeyspace = errors.New("raftkv: unknown keyspace")
	ErrUnknownBitslice = errors.New("raftkv: unknown bitslice")

	// ErrClusterMismatch is returned by Open for a data directory that
	// belongs to another cluster or another node, and by the transport
	// for a message from another cluster (the sender logs it).
	ErrClusterMismatch = errors.New("raftkv: data directory or message of another cluster")

	// Refusals of the membership API (AddLearner, AddNode, PromoteNode,
	// UpdateNode, RemoveNode): nothing was changed.
	//
	// ErrRemovedID: the ID was removed from the cluster; IDs are never
	// reused. ErrMemberExists: the node is a member already (UpdateNode
	// moves it), or a voter already (PromoteNode). ErrNotMember: the node
	// is not a member (or not a learner, for PromoteNode). ErrLastVoter:
	// removing the cluster's only voter. ErrNotCaughtUp: the learner's log
	// trails the leader's by more than PromoteMaxLag; retry later.
	// ErrConfChangePending: another membership change is still not applied
	// after the change waited for it (raft takes one at a time), or this
	// node became the leader and has
	// not applied its log up to its election yet; retry.
	ErrRemovedID         = errors.New("raftkv: node ID removed from the cluster")
	ErrMemberExists      = errors.New("raftkv: already a member")
	ErrNotMember         = errors.New("raftkv: not a member")
	ErrLastVoter         = errors.New("raftkv: the last voter")
	ErrNotCaughtUp       = errors.New("raftkv: learner not caught up")
	ErrConfChangePending = errors.New("raftkv: another membership change is pending")

	// ErrDataDir is returned by Open for a data directory whose parts do
	// not fit together: an engine with data but no raft log, an engine
	// whose watermark is below the log's compacted index, a log that
	// names a missing engine directory.
	ErrDataDir = errors.New("raftkv: inconsistent data directory")

	// ErrLostState is returned by Open, and stops a running node (see
	// Node.Err), when the node lacks raft state the cluster counts on: its
	// commit index is past its log, its engine has applied entries past
	// its log, or a leader says it holds entries its log does not have. Its data directory was wiped, restored from an
	// old copy, or lost writes; its log and votes can no longer be
	// trusted. The error says which node and index; the node must be
	// removed and added back under a new ID with an empty directory.
	ErrLostState = errors.New("raftkv: lost raft state the cluster counts on")

	// ErrRaftState stops a node whose state raft itself refused (raft
	// reports a broken rule by panicking; the node recovers the panic
	// and stops with this error, which carries raft's message and the
	// node's indexes). As for ErrLostState, the node must be replaced.
	ErrRaftState = errors.New("raftkv: raft refused the node's state")

	// ErrUnauthenticated is the transport's refusal (403) of a request
	// without a certificate of the cluster's CA, when Options.PeerTLS is
	// set.
	ErrUnauthenticated = errors.New("raftkv: unauthenticated peer")

	// ErrCorruptLog marks a damaged raft log store record or log entry. It
	// matches kvbuf.ErrCorrupt.
	ErrCorruptLog = kverr.NewKind(prefix+"corrupt raft log", kvbuf.ErrCorrupt)
)

// prefix starts the text of every raftkv error.
const prefix = "raftkv: "

// errorf is fmt.Errorf for every raftkv error that adds context: the text
// is prefix followed by format, with the "raftkv: " and "kvbuf: " prefixes
// taken off the front of every error argument's text, so that one prefix
// starts the text and none appears in the middle. %w wraps as with
// fmt.Errorf.
func errorf(format string, args ...any) error {
	as := make([]any, len(args))
	for i, a := range args {
		if e, ok := a.(error); ok && e != nil {
			a = bare{e}
		}
		as[i] = a
	}
	return fmt.Errorf(prefix+format, as...)
}

// bare shows an error without its package prefix; it wraps the error, so
// errors.Is and errors.As look through it.
type bare struct{ err error }

func (b bare) Error() string { return trimPrefix(b.err.Error()) }
func (b bare) Unwrap() error { return b.err }

// trimPrefix returns an error text without a leading "raftkv: " or
// "kvbuf: ".
func trimPrefix(s string) string {
	if t, ok := strings.CutPrefix(s, prefix); ok {
		return t
	}
	return strings.TrimPrefix(s, "kvbuf: ")
}

// NotLeaderError is the error of a write to a follower. It matches
// ErrNotLeader.
type NotLeaderError struct {
	// Node is the node that refused the write.
	Node uint64
	// Leader is the leader it knows of (0: none), and Addr its address
	// (empty if unknown).
	Leader uint64
	Addr   string
}

// Error says which node refused and which leads.
func (e *NotLeaderError) Error() string {
	if e.Leader == 0 {
		return fmt.Sprintf("raftkv: node %d is not the leader and knows of none", e.Node)
	}
	return fmt.Sprintf("raftkv: node %d is not the leader; the leader is node %d at %s", e.Node, e.Leader, e.Addr)
}

// Is makes a *NotLeaderError match ErrNotLeader.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }
