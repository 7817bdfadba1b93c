package raftkv

import (
	"fmt"
	"maps"
	"slices"

	"go.etcd.io/raft/v3"

	"github.com/kvbuf/kvbuf"
)

// Status describes a node. Fields are read at slightly different times.
type Status struct {
	// ID is the node's raft ID, Cluster its cluster ID (0 until the
	// cluster's first leader assigned it and this node applied it, or
	// while a joining node has not heard from its cluster).
	ID, Cluster uint64
	// State is "leader", "follower", "candidate", "pre-candidate",
	// "stopped" or "removed"; Leader the leader it knows of (0: none).
	State  string
	Leader uint64
	// Term and Commit are raft's; Applied is the last entry applied to
	// the engine; Watermark the engine's durable watermark (entries up
	// to it survive a crash without replay).
	Term, Commit, Applied, Watermark uint64
	// LogFirst and LogLast bound the entries in the log store; entries
	// below LogFirst were compacted (LogFirst-1 <= Watermark always).
	LogFirst, LogLast uint64
	// Members maps the members' IDs to their addresses; Voters and
	// Learners (sorted) say which vote.
	Members          map[uint64]string
	Voters, Learners []uint64
	// Engine is the live engine's directory under the data directory.
	Engine string
	// Err is the error that stopped the node, if any.
	Err string
	// Metrics are the node's counters.
	Metrics Metrics
}

// Metrics are a node's counters since Open. The JSON names are those of
// kvraft's /status.
type Metrics struct {
	// RestartWatermark and RestartLastIndex are the engine's durable
	// watermark and the log's last index when the node opened, and
	// RestartApplied where raft resumed: min(watermark, commit).
	RestartWatermark uint64 `json:"restart_watermark"`
	RestartLastIndex uint64 `json:"restart_last_index"`
	RestartApplied   uint64 `json:"restart_applied"`
	// Redelivered counts entries applied since Open at or below
	// RestartWatermark: raft handed them over again (the commit index
	// persisted without a sync lagged the watermark) and the engine
	// skipped them as no-ops. Reapplied counts entries above
	// RestartWatermark up to RestartLastIndex: the work the restart
	// really redid, at most RestartLastIndex - RestartWatermark.
	Redelivered uint64 `json:"redelivered"`
	Reapplied   uint64 `json:"reapplied"`
	// Applied counts entries applied since Open.
	Applied uint64 `json:"applied"`
	// SnapshotsSent and SnapshotsFailed count snapshot streams sent to
	// followers; SnapshotsReceived those received and staged,
	// SnapshotsInstalled those switched to.
	SnapshotsSent      uint64 `json:"snapshots_sent"`
	SnapshotsFailed    uint64 `json:"snapshots_failed"`
	SnapshotsReceived  uint64 `json:"snapshots_received"`
	SnapshotsInstalled uint64 `json:"snapshots_installed"`
	// Compactions counts log compactions.
	Compactions uint64 `json:"compactions"`
	// ProposalsDropped counts writes raft refused (ErrProposalDropped).
	ProposalsDropped uint64 `json:"proposals_dropped"`
	// LeaderChanges counts the times this node saw a new leader, and
	// Elections those it started an election (as a candidate; pre-vote
	// rounds that found no quorum are not counted).
	LeaderChanges uint64 `json:"leader_changes"`
	Elections     uint64 `json:"elections"`
	// ReadRounds counts ReadIndex rounds, ReadRetries the times one was
	// asked again.
	ReadRounds  uint64 `json:"read_rounds"`
	ReadRetries uint64 `json:"read_retries"`
	// SendErrors counts failed transport requests, Rejected those a peer
	// refused (another cluster's or node's, or unauthenticated);
	// LastSendError is the newest.
	SendErrors    uint64 `json:"send_errors"`
	Rejected      uint64 `json:"rejected"`
	LastSendError string `json:"last_send_error"`
}

// Metrics returns the node's counters.
func (n *Node) Metrics() Metrics {
	m := Metrics{
		RestartWatermark:   n.m.restartWatermark,
		RestartLastIndex:   n.m.restartLast,
		RestartApplied:     n.m.restartApplied,
		Redelivered:        n.m.redelivered.Load(),
		Reapplied:          n.m.reapplied.Load(),
		Applied:            n.m.applied.Load(),
		SnapshotsSent:      n.m.snapshotsSent.Load(),
		SnapshotsFailed:    n.m.snapshotsFailed.Load(),
		SnapshotsReceived:  n.m.snapshotsReceived.Load(),
		SnapshotsInstalled: n.m.snapshotsInstalled.Load(),
		Compactions:        n.m.compactions.Load(),
		ProposalsDropped:   n.m.proposalsDropped.Load(),
		LeaderChanges:      n.m.leaderChanges.Load(),
		Elections:          n.m.elections.Load(),
		ReadRounds:         n.m.readRounds.Load(),
		ReadRetries:        n.m.readRetries.Load(),
		SendErrors:         n.tr.sendErrors.Load(),
		Rejected:           n.tr.rejected.Load(),
	}
	if s := n.tr.lastErr.Load(); s != nil {
		m.LastSendError = *s
	}
	return m
}

// Status returns the node's status.
func (n *Node) Status() Status {
	st := Status{
		ID:      n.id,
		Cluster: n.cluster.Load(),
		Applied: n.appliedNow.Load(),
		Members: maps.Clone(n.view.Load().peers),
		Metrics: n.Metrics(),
	}
	v := n.view.Load()
	st.Voters, st.Learners = slices.Clone(v.voters), slices.Clone(v.learners)
	st.LogFirst, st.LogLast = n.ls.bounds()
	st.LogFirst++
	n.engMu.RLock()
	st.Watermark, st.Engine = n.sm.durable(), n.engName
	n.engMu.RUnlock()
	if err := n.Err(); err != nil {
		st.Err = err.Error()
	}
	if n.halted() {
		st.State = "stopped"
		if n.removed.Load() {
			st.State = "removed"
		}
		st.Term, st.Commit = n.raftTerm.Load(), n.ls.hardState().GetCommit()
		return st
	}
	st.State, st.Leader = stateName(raft.StateType(n.raftRole.Load()).String()), n.lead.Load()
	st.Term, st.Commit = n.raftTerm.Load(), n.raftCommit.Load()
	return st
}

func stateName(s string) string {
	switch s {
	case "StateLeader":
		return "leader"
	case "StateFollower":
		return "follower"
	case "StateCandidate":
		return "candidate"
	case "StatePreCandidate":
		return "pre-candidate"
	}
	return fmt.Sprintf("unknown (%s)", s)
}

// EngineMetrics returns the metrics of the node's kvbuf engine: the live
// one (a snapshot install replaces the engine, and its counters restart at
// zero).
func (n *Node) EngineMetrics() kvbuf.Metrics {
	n.engMu.RLock()
	defer n.engMu.RUnlock()
	return n.sm.metrics()
}
