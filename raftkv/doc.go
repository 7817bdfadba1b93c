// Package raftkv replicates a kvbuf engine with raft (go.etcd.io/raft/v3,
// etcd's raft library): each Node is one raft peer whose state machine is a
// kvbuf engine, and kvbuf's op watermark is the replica's durable applied
// index.
//
// # Log, applied index and durable watermark
//
// A node keeps its raft log, HardState and membership in its own pebble
// database (Dir/log), separate from the engine (Dir/engine). raft runs
// with Config.AsyncStorageWrites: the Ready loop sends the leader's appends
// at once (raft thesis 10.2.1) and hands the log's writes to an append
// loop, which writes the appends queued meanwhile in order and makes them
// durable with one sync (whenever one carries new entries, a new term or
// vote) before it delivers their responses: a follower's acknowledgement
// to the leader, and the node's own, after which raft lets it apply those
// entries. So no entry is applied, and none acknowledged to a leader,
// before this node's log has synced it; while a sync runs the Ready loop
// goes on sending, stepping acknowledgements and applying.
//
// Each committed entry is one op of the engine, the entry's index: its
// commands (one client write, or the writes the leader found queued
// together) are written as writes of that op, in order, and the op is
// ended; empty entries, configuration changes and entries whose commands
// are all refused alike on every node (an unknown keyspace, a key over the
// limit) are an empty batch of their op (the op is recorded, nothing is
// written).
// Nothing is synced per entry: the engine's flusher makes applied entries
// durable in coalesced, synced flushes (every 100ms by default,
// Options.Engine) and its watermark says up to which index they are. That is the durable applied index etcd keeps as its "consistent
// index", CockroachDB as RangeAppliedState and dragonboat's on-disk state
// machines return from Open.
//
// After a crash the node restarts raft with Config.Applied =
// min(engine watermark, HardState.Commit): raft panics if Applied is above
// the commit index it restored, and a HardState whose only change is the
// commit index is not synced (etcd-io/etcd#10217). Raft then redelivers the
// entries after Applied; those at or below the watermark are no-ops of the
// engine (a write whose op is at or below the persisted watermark changes
// nothing), the others are applied again. Metrics reports both counts:
// a restart re-applies at most the entries appended after the watermark,
// never the whole log.
//
// # Log compaction and snapshots
//
// The engine tells the node when its durable watermark advances
// (DB.WatermarkNotify); the node then truncates its log below
// min(watermark, applied) - Options.LogRetain, never above what the engine
// made durable (dragonboat#62, cockroachdb#76215): a crash never needs a
// compacted entry. A leader also keeps the entries its followers are
// catching up with (after a snapshot it sends, after a follower's match
// index), up to 10 × max(LogRetain, 1000) entries below the watermark, so
// that a follower that just installed a snapshot continues from the log
// instead of needing another. The log store removes entries and moves its
// first index in one critical section: raft never reads a gap.
//
// A follower that needs a compacted entry gets a snapshot. No snapshot is
// ever materialized: the log store's raft snapshot is metadata only, and
// when raft asks to send one the leader takes a kvbuf snapshot of its
// engine at its applied index (the Ready loop is between two entries, so
// the snapshot holds exactly the entries up to it) and streams it with
// kvbuf's Snapshot.Export to the follower's /raft/snapshot. The follower
// installs the stream into a new engine directory with kvbuf.Install (its
// watermark is the snapshot's index), and only then hands the message to
// raft; when raft accepts it, one synced write of the log store switches
// the node to the new engine (Dir/engine-<index>), drops the log below the
// snapshot and records the snapshot's membership. A crash before the switch
// leaves the old engine live (the received one is removed at the next
// Open), after it the new one. The watermark never goes backwards: raft
// installs only snapshots above the commit index.
//
// # Writes and reads
//
// Writes (Put, Delete, DeleteRange, SetBit, CreateKeyspace,
// CreateBitslice) are proposed on the leader and return once applied
// there; a follower refuses them with a *NotLeaderError naming the leader
// (cmd/kvraft forwards them). Concurrent writes share raft entries: the
// Ready loop proposes every write queued since its last turn as one entry
// (up to 256 KiB), once its previous append is durable, so that many
// clients' writes cost one append, one log sync and one message. Each write is checked once, by the
// engine as it applies it (the same on every node): a refused write
// changes nothing and returns kvbuf's error (kvbuf.ErrKeyTooLarge, ...),
// and the other writes of its entry are applied. Keyspaces and bitslices are created
// explicitly and never dropped, so reads and writes never create one by a
// typo. Reads are linearizable through raft's ReadIndex, batched: readers
// that arrive together share one round, on the leader or a follower; the
// node then waits until it has applied up to the read index. ReadOptions
// Stale reads a node's own applied state without a round.
//
// # Membership
//
// AddLearner adds a node as a learner (it receives the log but does not
// vote, so the quorum does not change whether or not it runs yet); the new
// node starts with Options.Join and catches up from the leader's log, or by
// a snapshot if the log was compacted past what it needs, while writes go
// on; PromoteNode makes it a voter once its log is within PromoteMaxLag
// entries of the leader's commit index. AddNode adds a voter at once.
// UpdateNode changes a member's address. RemoveNode removes a node, which
// stops (ErrRemoved) when it applies its removal, or when a peer answers it
// 410 Gone (a leader removing itself returns nil in both cases: a peer
// answers so only once it applied the removal). Each change is checked against the replicated membership, on
// the leader and again when applied: a removed ID is never added again
// (ErrRemovedID: IDs are never reused, a wiped node rejoins under a new
// ID), an existing member is not added again (ErrMemberExists), only
// members are removed, moved or promoted (ErrNotMember), the last voter
// stays (ErrLastVoter), one change at a time (ErrConfChangePending).
//
// # Cluster ID and incarnations
//
// The first leader of a new cluster draws a random cluster ID and
// replicates it; until a node has applied it, it knows its cluster by the
// bootstrap hash (of ClusterToken and the initial Peers). Every data
// directory has a random incarnation, and the leader replicates each
// member's as it first hears from it. A request of another cluster is
// refused, and so is a node whose directory is not the one the cluster
// recorded for its ID (wiped, or replaced by another node's): it stops
// with ErrLostState, which says to remove it and add it back under a new
// ID. A node whose log lacks entries the leader says are committed there
// (restored from an old copy) stops with ErrLostState too, and Open refuses
// a commit index past the log.
//
// # Raft's panics
//
// raft reports a broken rule by panicking. The node drives a raft.RawNode
// from its Ready loop, the one goroutine that calls raft: the conditions it
// can name are detected before raft sees them (above), and a panic raised
// by raft on the loop is recovered there and stops the node with
// ErrRaftState (raft's message, the node's indexes, the remedy) instead of
// killing the process. Node.Err returns the error; Node.Done is closed.
//
// # Data directory
//
//	IDENTITY          cluster ID, bootstrap hash, node ID, incarnation and
//	                  cluster token: a node refuses another cluster's or
//	                  node's directory before opening anything in it for
//	                  writing
//	LOCK              flocked by the node that has the directory open
//	log/              the raft log store (pebble)
//	engine/           the kvbuf engine, or engine-<index>/ after a snapshot install
//	engine-<index>.staging/  a snapshot being received
//
// The node creates the directory and its missing parents durably (each
// created directory's parent is synced), so that a power cut after a
// bootstrap cannot lose the log while the engine stays. Power cuts of one
// node, a majority and the whole cluster, at the log store's sync
// boundaries and at random, are tested (TestRaftPowerCut; doc/design.md,
// "Power cuts").
//
// # Backups
//
// Backup streams the engine of a running node as of one applied index, in
// the stream format snapshots travel in (kvbuf's Snapshot.Export); Restore
// makes the data directory of each node of a new cluster from it. The new
// cluster's log starts at the backup's index, and it gets a cluster ID of
// its own.
//
// # Transport
//
// HTTP on the node's address: each node keeps one long-lived POST
// /raft/stream open to each peer and writes batches of messages into its
// body as raft hands them over, without waiting for an answer (a peer's
// messages keep their order; a failed stream drops what it carried, raft
// retransmits, and the next message opens a new one); POST /raft/snapshot
// carries one snapshot stream. Each request
// names the sender's cluster ID and bootstrap hash, the sender and receiver
// node IDs and their incarnations; a node answers 409 to another cluster's
// requests and to a replaced node's, and 410 to a removed node's. Serve
// Node.Handler on the node's address. With Options.PeerTLS the transport
// is mutual TLS: requests go over HTTPS with this node's certificate, and
// Handler refuses (403, ErrUnauthenticated) a request whose client
// certificate the cluster's CA did not sign.
//
// # Operations
//
// At the info level a node logs its elections, leader changes, peers
// becoming unreachable and reachable again, and snapshots sent, received
// and installed; Status and Metrics report the rest (cmd/kvraft serves
// them as /status, /health and /metrics). The data directory is private by
// default: directories 0700, files 0600 (Options.DirMode).
//
// # Caveats
//
//   - Without Options.PeerTLS the transport has no authentication: run it
//     on loopback or a trusted network. The client API is the host's
//     (cmd/kvraft has TLS and credentials for it).
//   - Every node must use the same engine limits (MaxKeySize, MaxValueSize,
//     MaxBits): a command is validated when it is applied, alike on every
//     node only if the limits are alike.
//   - A write whose context ends after it was proposed returns
//     ErrOutcomeUnknown: it may be applied later (a retry may apply it
//     twice; make writes idempotent or read before retrying).
//   - Scans read a kvbuf snapshot; a long scan holds the engine against a
//     snapshot install (which waits for it).
//   - One raft group per node: no multi-raft, no leases (reads always pay
//     a ReadIndex round unless Stale).
//   - Conf changes are one at a time (raft's simple changes, no joint
//     consensus): one proposed while another is pending on the same leader,
//     or on a leader elected a moment ago that has not applied its log
//     yet, waits for it (up to 2 s, twice) and fails with
//     ErrConfChangePending if it is still pending; one pending on a leader that lost
//     its leadership may still be applied (its caller gets
//     ErrOutcomeUnknown).
package raftkv
