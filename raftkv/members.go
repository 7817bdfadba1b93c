package raftkv

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"

	"github.com/kvbuf/kvbuf"
)

// Membership changes. Each is one raft conf change (simple changes, one at
// a time), checked twice against the membership: on the leader before it
// is proposed, for a prompt refusal, and again by every node when it is
// applied (the membership is replicated, so every node refuses alike; a
// refused change is applied as no change, as etcd does). The checks:
//
//   - A removed ID is never added again (ErrRemovedID): its directory and
//     its votes are gone, and its old messages must stay refused.
//   - An existing member is not added again (ErrMemberExists): UpdateNode
//     moves it.
//   - Only members are removed, moved or promoted (ErrNotMember), and the
//     last voter is not removed (ErrLastVoter: raft cannot run without one).
//   - A learner is promoted only once its log is within PromoteMaxLag
//     entries of the leader's commit index (ErrNotCaughtUp).
//   - Raft takes one change at a time: a change proposed while another is
//     not yet applied waits for it to be applied (up to 2 s, twice, within
//     the caller's context) and is then proposed; if it is still not
//     applied, the change is refused (ErrConfChangePending). A new leader
//     treats the entries its log held when it was elected the same way:
//     one may be a change committed under the last leader, and the checks
//     above see only applied changes.

// PromoteMaxLag is how far (in entries) a learner's log may trail the
// leader's commit index for PromoteNode to promote it.
const PromoteMaxLag = 1000

// AddLearner adds node id, reachable at addr ("host:port"), to the cluster
// as a learner: it receives the log (or a snapshot of the engine if the
// log was compacted past what it needs) but does not vote, so the quorum
// does not change, whether or not the node runs yet. Start the new node
// with Join (and this cluster's token, and its members as Peers), then
// promote it with PromoteNode once it has caught up. It returns once the
// change is applied here. Errors: as writes, and kvbuf.ErrBadOptions (a bad id or
// address), ErrRemovedID, ErrMemberExists, ErrConfChangePending.
func (n *Node) AddLearner(ctx context.Context, id uint64, addr string) error {
	return n.changeAddr(ctx, raftpb.ConfChangeAddLearnerNode, id, addr)
}

// AddNode adds node id, reachable at addr ("host:port"), to the cluster as
// a voter at once: the quorum grows as soon as the change is applied, even
// if the node does not run yet (a 3-node cluster then needs 3 of 4 nodes
// to commit). AddLearner and then PromoteNode add a node without that
// risk. Otherwise as AddLearner.
func (n *Node) AddNode(ctx context.Context, id uint64, addr string) error {
	return n.changeAddr(ctx, raftpb.ConfChangeAddNode, id, addr)
}

// PromoteNode makes learner id a voter, once its log is within
// PromoteMaxLag entries of the leader's commit index (ErrNotCaughtUp until
// then: retry). Errors: as writes, and ErrNotMember (not a learner of the
// cluster), ErrMemberExists (already a voter), ErrRemovedID,
// ErrNotCaughtUp, ErrConfChangePending.
func (n *Node) PromoteNode(ctx context.Context, id uint64) error {
	return n.changeID(ctx, raftpb.ConfChangeAddNode, id)
}

// UpdateNode changes the address of member id to addr (the node moved;
// start it there with its data directory). Errors: as writes, and
// kvbuf.ErrBadOptions, ErrNotMember, ErrConfChangePending.
func (n *Node) UpdateNode(ctx context.Context, id uint64, addr string) error {
	return n.changeAddr(ctx, raftpb.ConfChangeUpdateNode, id, addr)
}

// RemoveNode removes node id from the cluster and returns once the change
// is applied here. The removed node stops (its calls return ErrRemoved) and
// its data directory can no longer be opened; its ID is never used again.
// A node removing itself (the leader, since only the leader proposes)
// returns nil also when a peer tells it of its removal before it applies
// the change itself: a peer says so only once it applied a removal of this
// ID, so the removal asked for is committed.
// Errors: as writes, and ErrNotMember, ErrLastVoter, ErrConfChangePending.
func (n *Node) RemoveNode(ctx context.Context, id uint64) error {
	err := n.changeID(ctx, raftpb.ConfChangeRemoveNode, id)
	if id == n.id && errors.Is(err, ErrOutcomeUnknown) && errors.Is(err, ErrRemoved) {
		// In flight when a peer told this node it was removed.
		return nil
	}
	return err
}

// changeAddr is changeConf for a change that gives the node's address,
// once id and addr are checked.
func (n *Node) changeAddr(ctx context.Context, typ raftpb.ConfChangeType, id uint64, addr string) error {
	if err := checkMemberArgs(id, addr); err != nil {
		return err
	}
	return n.changeConf(ctx, typ, id, addr)
}

// changeID is changeConf for a change of node id alone, once id is checked.
func (n *Node) changeID(ctx context.Context, typ raftpb.ConfChangeType, id uint64) error {
	if err := checkID(id); err != nil {
		return err
	}
	return n.changeConf(ctx, typ, id, "")
}

func checkID(id uint64) error {
	if id == 0 {
		return errorf("node ID 0: %w", kvbuf.ErrBadOptions)
	}
	return nil
}

func checkMemberArgs(id uint64, addr string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return errorf("address %q: %v: %w", addr, err, kvbuf.ErrBadOptions)
	}
	return nil
}

// confPendingWait bounds how long a membership change waits for one
// pending before it (or for a new leader's first entry: trackConfIndex)
// to be applied, and confPendingTries how many times it is tried: a new
// leader applies its first entry within a round trip, so an operator's
// command right after an election (the README's "Add a node" after a
// restart) goes through instead of answering "retry"; a change waiting
// for a quorum it does not have is still refused (ErrConfChangePending).
const (
	confPendingWait  = 2 * time.Second
	confPendingTries = 3
)

// confPending marks changeConf's refusal while the log holds a membership
// change not yet applied, up to index: it reads as ErrConfChangePending,
// which it wraps.
type confPending struct{ index uint64 }

func (e *confPending) Error() string { return ErrConfChangePending.Error() }
func (e *confPending) Unwrap() error { return ErrConfChangePending }

// changeConf proposes a conf change on the leader (this node), after the
// checks, and waits until it is applied here. Refused because another
// change is not applied yet, it waits for that one to be applied (at most
// confPendingWait, or ctx) and tries again, confPendingTries times in all.
func (n *Node) changeConf(ctx context.Context, t raftpb.ConfChangeType, id uint64, addr string) error {
	for try := 1; ; try++ {
		err := n.proposeConf(ctx, t, id, addr)
		var cp *confPending
		if try == confPendingTries || !errors.As(err, &cp) {
			return err
		}
		if n.hooks != nil && n.hooks.confWait != nil {
			n.hooks.confWait()
		}
		wctx, cancel := context.WithTimeout(ctx, confPendingWait)
		werr := n.waitApplied(wctx, cp.index)
		cancel()
		if werr != nil {
			return err // still pending (or ctx ended, or the node stopped): the refusal stands
		}
	}
}

// proposeConf is one try of changeConf.
func (n *Node) proposeConf(ctx context.Context, t raftpb.ConfChangeType, id uint64, addr string) error {
	return n.proposeWith(ctx, func(req uint64) error {
		cc := &raftpb.ConfChange{Type: t.Enum(), NodeId: proto.Uint64(id), Id: proto.Uint64(req)}
		if addr != "" {
			cc.Context = []byte(addr)
		}
		return n.onLoop(ctx, func(rn *raft.RawNode) error {
			if n.confIndex > n.applied {
				// The membership checked below may be about to change
				// (raft itself would turn the proposal into an empty entry).
				return errorf("node %d has a membership change not yet applied (log index %d, applied %d); retry: %w", n.id, n.confIndex, n.applied, &confPending{index: n.confIndex})
			}
			if err := n.membership().check(cc); err != nil {
				return err
			}
			if isPromotion(cc) {
				if err := n.caughtUp(rn, id); err != nil {
					return err
				}
			}
			if err := rn.ProposeConfChange(cc); err != nil {
				return err
			}
			// raft turns a change proposed while another is pending into
			// an empty entry; handleReady looks for this one in the
			// entries it appends next.
			n.ccProposed = append(n.ccProposed, req)
			return nil
		})
	})
}

// isPromotion reports whether cc promotes a learner: an AddNode without an
// address (an AddNode of a new voter carries its address).
func isPromotion(cc *raftpb.ConfChange) bool {
	return cc.GetType() == raftpb.ConfChangeAddNode && len(cc.GetContext()) == 0
}

// caughtUp refuses to promote a learner whose log trails the leader's
// commit index by more than PromoteMaxLag. Ready loop only.
func (n *Node) caughtUp(rn *raft.RawNode, id uint64) error {
	st := rn.Status()
	pr, ok := st.Progress[id]
	switch {
	case !ok:
		return errorf("node %d has no progress on leader %d: %w", id, n.id, ErrNotMember)
	case pr.State != tracker.StateReplicate || pr.Match+PromoteMaxLag < st.GetCommit():
		return errorf("learner %d has entries up to %d of the %d committed (%s); promote it once it is within %d: %w", id, pr.Match, st.GetCommit(), pr.State, PromoteMaxLag, ErrNotCaughtUp)
	}
	return nil
}

// checkProposedConfChanges fails the conf changes proposed since the last
// Ready that raft did not append as such (it turns a change proposed while
// another is pending into an empty entry). ents are the Ready's new
// entries. Ready loop only.
func (n *Node) checkProposedConfChanges(ents []*raftpb.Entry) {
	if len(n.ccProposed) == 0 {
		return
	}
	appended := map[uint64]bool{}
	for _, e := range ents {
		if e.GetType() != raftpb.EntryConfChange {
			continue
		}
		cc := &raftpb.ConfChange{}
		if proto.Unmarshal(e.GetData(), cc) == nil {
			appended[cc.GetId()] = true
		}
	}
	for _, req := range n.ccProposed {
		if !appended[req] {
			n.complete(req, errorf("node %d has a membership change not yet applied; retry: %w", n.id, ErrConfChangePending))
		}
	}
	n.ccProposed = n.ccProposed[:0]
}

// check refuses a conf change that does not fit m (see above). Every node
// decides alike: m is replicated.
func (m membership) check(cc *raftpb.ConfChange) error {
	id := cc.GetNodeId()
	voter := slices.Contains(m.conf.GetVoters(), id)
	learner := slices.Contains(m.conf.GetLearners(), id)
	_, removed := slices.BinarySearch(m.removed, id)
	switch cc.GetType() {
	case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode:
		switch promote := isPromotion(cc); {
		case removed:
			return errorf("node %d was removed from the cluster; IDs are never reused: add the node under a new ID: %w", id, ErrRemovedID)
		case promote && voter:
			return errorf("node %d is already a voter: %w", id, ErrMemberExists)
		case promote && !learner:
			return errorf("node %d is not a learner of the cluster (add it as a learner first): %w", id, ErrNotMember)
		case !promote && (voter || learner):
			return errorf("node %d is already a member, at %s (to move it, change its address: UpdateNode, kvraft's PUT /members/%d/addr): %w", id, m.peers[id], id, ErrMemberExists)
		}
	case raftpb.ConfChangeRemoveNode:
		switch {
		case removed:
			return errorf("node %d was removed already: %w", id, ErrNotMember)
		case !voter && !learner:
			return errorf("node %d is not a member of the cluster: %w", id, ErrNotMember)
		case voter && len(m.conf.GetVoters()) == 1:
			return errorf("node %d is the cluster's only voter: %w", id, ErrLastVoter)
		}
	case raftpb.ConfChangeUpdateNode:
		if !voter && !learner {
			return errorf("node %d is not a member of the cluster: %w", id, ErrNotMember)
		}
	default:
		return errorf("conf change type %v: %w", cc.GetType(), kvbuf.ErrBadOptions)
	}
	return nil
}

// memberView is what the Ready loop publishes of the membership for the
// other goroutines (the transport's handlers, Status, Leader).
type memberView struct {
	peers        map[uint64]string
	removed      []uint64 // sorted
	incarnations map[uint64]uint64
	voters       []uint64
	learners     []uint64
}

// membership returns the current membership. Ready loop only; the maps
// and slices are the loop's (clone before keeping them).
func (n *Node) membership() membership {
	return membership{conf: n.conf, peers: n.peers, removed: n.gone, cluster: n.cluster.Load(), incarnations: n.incs}
}

func (n *Node) publishMembers() {
	n.view.Store(&memberView{
		peers:        maps.Clone(n.peers),
		removed:      slices.Clone(n.gone),
		incarnations: maps.Clone(n.incs),
		voters:       slices.Sorted(slices.Values(n.conf.GetVoters())),
		learners:     slices.Sorted(slices.Values(n.conf.GetLearners())),
	})
}

// wasRemoved reports whether node id was removed from the cluster.
func (n *Node) wasRemoved(id uint64) bool {
	_, found := slices.BinarySearch(n.view.Load().removed, id)
	return found
}

// noteIncarnation records, on the leader, the incarnation a peer's request
// carried, for proposeMeta to replicate if the cluster has none for it yet.
func (n *Node) noteIncarnation(id, inc uint64) {
	n.seenMu.Lock()
	n.seen[id] = inc
	n.seenMu.Unlock()
}

// proposeMeta proposes, on the leader, what the cluster has not recorded
// yet: its cluster ID (the first leader draws it), and the incarnation of
// this node and of the members it heard from. Each is proposed once per
// term; the first value applied wins. Ready loop only (every turn).
func (n *Node) proposeMeta() {
	if !n.leader.Load() {
		return
	}
	if term := n.raftTerm.Load(); term != n.metaTerm {
		n.metaTerm = term
		clear(n.metaSent)
	}
	propose := func(key uint64, c *command) {
		if n.metaSent[key] {
			return
		}
		if err := n.rn.Propose(c.encode()); err == nil {
			n.metaSent[key] = true
		}
	}
	if n.cluster.Load() == 0 {
		propose(0, &command{kind: cmdMeta, cluster: randomID()})
	}
	if n.incs[n.id] == 0 {
		propose(n.id, &command{kind: cmdMeta, node: n.id, incarnation: n.incarnation})
	}
	var seen map[uint64]uint64
	n.seenMu.Lock()
	if len(n.seen) > 0 {
		seen, n.seen = n.seen, map[uint64]uint64{}
	}
	n.seenMu.Unlock()
	for id, inc := range seen {
		if _, member := n.peers[id]; member && n.incs[id] == 0 && inc != 0 {
			propose(id, &command{kind: cmdMeta, node: id, incarnation: inc})
		}
	}
}

// applyMeta applies a meta command (see command): it records the cluster
// ID and incarnations the membership does not have yet.
func (n *Node) applyMeta(idx uint64, c *command) error {
	changed := false
	if c.cluster != 0 && n.cluster.Load() == 0 {
		if err := n.assignCluster(c.cluster); err != nil {
			return err
		}
		changed = true
	}
	if _, member := n.peers[c.node]; c.node != 0 && c.incarnation != 0 && member && n.incs[c.node] == 0 {
		n.incs = maps.Clone(n.incs)
		n.incs[c.node] = c.incarnation
		changed = true
	}
	if changed {
		if err := n.ls.saveMembership(idx, n.membership()); err != nil {
			return errorf("record membership at %d: %w", idx, err)
		}
		n.publishMembers()
	}
	if err := n.sm.skip(n.ctx, idx); err != nil {
		return err
	}
	n.ackLater(c.id, nil)
	return nil
}

// assignCluster records the cluster ID the cluster agreed on.
func (n *Node) assignCluster(cluster uint64) error {
	n.identMu.Lock()
	defer n.identMu.Unlock()
	if cur := n.cluster.Load(); cur != 0 {
		return nil
	}
	id := n.identity()
	id.cluster = cluster
	if err := n.writeIdentity(id); err != nil {
		return err
	}
	n.cluster.Store(cluster)
	n.log.Info("raftkv: cluster ID assigned", "cluster", fmt.Sprintf("%016x", cluster))
	return nil
}

// identity returns the node's identity as it stands.
func (n *Node) identity() identity {
	return identity{cluster: n.cluster.Load(), bootstrap: n.bootstrap.Load(), node: n.id, incarnation: n.incarnation, token: n.opts.ClusterToken}
}

// randomID returns a random non-zero 64-bit ID.
func randomID() uint64 {
	for {
		var b [8]byte
		_, _ = rand.Read(b[:])
		if v := binary.LittleEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}
