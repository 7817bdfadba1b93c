package raftkv

import (
	"sync"
	"sync/atomic"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// Asynchronous log appends (raft's Config.AsyncStorageWrites). raft hands
// the log's writes to the host as MsgStorageAppend messages (entries, term,
// vote, commit index, a snapshot) and the committed entries as
// MsgStorageApply messages, each with the responses to deliver once the
// write is done; it no longer waits for the host between Readies. The
// Ready loop sends the network messages at once, applies the committed
// entries itself (they need raft: conf changes; and raft hands over only
// entries whose append this node has made durable, so the engine never
// holds an entry its log could lose), and queues the appends for the
// append loop, which writes them in order and makes a group of them
// durable with one sync. So while a sync is in flight the Ready loop keeps
// proposing, sending, stepping acknowledgements and applying, and the next
// sync carries every append queued meanwhile.
//
// The protocol (numbered: the code cites the rules):
//
//  1. Appends are written in the order raft issued them (one goroutine, a
//     FIFO queue).
//  2. A response of an append is delivered only after a sync that covers
//     the append's writes has returned (the group's last write is
//     committed with a sync, which makes every earlier write of the log's
//     pebble WAL durable too). A group that changes only the commit index
//     is not synced (raft.MustSync's rule, as before: the host restarts at
//     min(engine watermark, commit)).
//  3. Responses addressed to this node are handed to the Ready loop, which
//     steps them (raft is only ever touched there); the append loop sends
//     the rest (a follower's acknowledgements) itself, so that they do not
//     wait for the Ready loop's next turn.
//  4. A snapshot is installed on the Ready loop after the append loop has
//     drained every earlier append (a barrier), because the install
//     switches the engine, which the loop applies to.

// appendQueue is the queue between the Ready loop and the append loop.
type appendQueue struct {
	mu sync.Mutex
	// msgs are MsgStorageAppend messages not yet taken by the append loop
	// (a nil message with barrier set is a barrier).
	msgs []appendItem
	// resps are responses of durable appends for the Ready loop; err the
	// append loop's failure.
	resps []*raftpb.Message
	err   error
	// pending counts the queued appends that carry entries and are not yet
	// durable: the leader proposes only while it is below
	// maxPendingAppends, so that the writes that arrive during a sync ride
	// the next append together (one entry, one message, one sync).
	pending    atomic.Int64
	maxPending int64         // maxPendingAppends, or the test hook's bound (<0: none)
	direct     bool          // responses for peers are sent by the append loop
	work       chan struct{} // kicks the append loop (capacity 1)
	done       chan struct{} // kicks the Ready loop (capacity 1)
}

type appendItem struct {
	m       *raftpb.Message
	barrier chan struct{} // closed when every earlier item is done
}

// maxPendingAppends: with 1 the leader proposes what queued during a sync
// once the sync returns (while it is in flight the loop still steps
// acknowledgements, applies and answers writers). W9 measured 2 and
// unbounded lower at 16 clients: more, smaller entries, messages and
// Readies for the same writes (doc/design.md, Replication).
const maxPendingAppends = 1

// mayPropose reports whether the Ready loop proposes the queued writes now.
func (q *appendQueue) mayPropose() bool {
	return q == nil || q.maxPending < 0 || q.pending.Load() < q.maxPending
}

func newAppendQueue(maxPending int64) *appendQueue {
	return &appendQueue{maxPending: maxPending, work: make(chan struct{}, 1), done: make(chan struct{}, 1)}
}

func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// push queues an append (or a barrier) for the append loop.
func (q *appendQueue) push(it appendItem) {
	q.mu.Lock()
	q.msgs = append(q.msgs, it)
	q.mu.Unlock()
	kick(q.work)
}

// take returns the responses delivered so far and the append loop's error.
func (q *appendQueue) take() ([]*raftpb.Message, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	r := q.resps
	q.resps = nil
	return r, q.err
}

// appendLoop is the append loop: it writes queued appends, each group of
// them with one sync, and hands their responses to the Ready loop.
func (n *Node) appendLoop() {
	defer n.loops.Done()
	q := n.appends
	prev := n.ls.hardState() // the HardState last written
	for n.kicked(q.work) {
		q.mu.Lock()
		items := q.msgs
		q.msgs = nil
		q.mu.Unlock()
		// Rule 1: in order. Split the group at barriers.
		for len(items) > 0 {
			k := 0
			for k < len(items) && items[k].barrier == nil {
				k++
			}
			if k > 0 {
				resps, err := n.writeAppends(items[:k], &prev)
				q.mu.Lock()
				if err != nil && q.err == nil {
					q.err = err
				}
				if err == nil {
					// Rule 3: the responses for peers (a follower's
					// acknowledgement) leave from here, without waiting
					// for the Ready loop's turn.
					for _, m := range resps {
						if m.GetTo() == n.id || m.GetType() == raftpb.MsgSnap || !n.appends.direct {
							q.resps = append(q.resps, m)
						} else {
							n.tr.sendOff(m)
						}
					}
				}
				q.mu.Unlock()
				kick(q.done)
				if err != nil {
					// The Ready loop may be waiting at a barrier.
					n.fail(err)
					return
				}
			}
			if k < len(items) {
				close(items[k].barrier)
				k++
			}
			items = items[k:]
		}
	}
}

// writeAppends writes a group of appends, syncing once after the last write
// if any of them must be durable (rule 2), and returns their responses in
// order. prev is the HardState last written, updated.
func (n *Node) writeAppends(items []appendItem, prev **raftpb.HardState) ([]*raftpb.Message, error) {
	last := -1
	mustSync := false
	for i, it := range items {
		hs := storageHardState(it.m)
		if hs != nil || len(it.m.GetEntries()) > 0 {
			last = i
		}
		if len(it.m.GetEntries()) > 0 || (hs != nil && raft.MustSync(hs, *prev, 0)) {
			mustSync = true
		}
		if hs != nil {
			*prev = hs
		}
	}
	if n.hooks != nil && n.hooks.noLogSync {
		mustSync = false
	}
	var resps []*raftpb.Message
	withEntries := 0
	for i, it := range items {
		if err := n.ls.save(storageHardState(it.m), it.m.GetEntries(), mustSync && i == last); err != nil {
			return nil, errorf("persist ready: %w", err)
		}
		if len(it.m.GetEntries()) > 0 {
			withEntries++
		}
	}
	n.appends.pending.Add(-int64(withEntries))
	for _, it := range items {
		resps = append(resps, it.m.GetResponses()...)
	}
	return resps, nil
}

// storageHardState is the HardState a MsgStorageAppend carries (nil: none).
func storageHardState(m *raftpb.Message) *raftpb.HardState {
	if m.Term == nil && m.Vote == nil && m.Commit == nil {
		return nil
	}
	return &raftpb.HardState{Term: m.Term, Vote: m.Vote, Commit: m.Commit}
}

// deliver steps the responses addressed to this node and sends the rest
// (rule 3). On the Ready loop.
func (n *Node) deliver(resps []*raftpb.Message) error {
	for _, m := range resps {
		if m.GetTo() == n.id {
			if err := n.rn.Step(m); err != nil {
				return errorf("step %v: %w", m.GetType(), err)
			}
			continue
		}
		n.sendMessages([]*raftpb.Message{m})
	}
	return nil
}

// takeAppended delivers what the append loop finished. On the Ready loop.
func (n *Node) takeAppended() error {
	resps, err := n.appends.take()
	if derr := n.deliver(resps); derr != nil {
		return derr
	}
	return err
}

// handleReadyAsync handles a Ready of raft with AsyncStorageWrites: raft
// has accepted it already (no Advance).
func (n *Node) handleReadyAsync(rd raft.Ready) error {
	n.readyState(rd)
	n.checkProposedConfChanges(rd.Entries)
	for _, m := range rd.Messages {
		switch m.GetTo() {
		case raft.LocalAppendThread:
			if raft.IsEmptySnap(m.GetSnapshot()) {
				if len(m.GetEntries()) > 0 {
					n.appends.pending.Add(1)
				}
				n.appends.push(appendItem{m: m})
				continue
			}
			// Rule 4: the earlier appends first, then the install, here.
			if err := n.drainAppends(); err != nil {
				return err
			}
			if err := n.installSnapshot(raft.Ready{HardState: storageHardState(m), Entries: m.GetEntries(), Snapshot: m.GetSnapshot()}); err != nil {
				return err
			}
			if err := n.deliver(m.GetResponses()); err != nil {
				return err
			}
		case raft.LocalApplyThread:
			if err := n.applyEntries(m.GetEntries()); err != nil {
				return err
			}
			if err := n.deliver(m.GetResponses()); err != nil {
				return err
			}
		default:
			n.sendMessages([]*raftpb.Message{m})
		}
	}
	for _, rs := range rd.ReadStates {
		select {
		case n.readStates <- rs:
		default: // the read loop asks again
		}
	}
	return nil
}

// drainAppends waits until the append loop has written every queued append
// and delivers their responses.
func (n *Node) drainAppends() error {
	b := make(chan struct{})
	n.appends.push(appendItem{barrier: b})
	select {
	case <-b:
	case <-n.stopc:
		return n.stopped()
	}
	return n.takeAppended()
}
