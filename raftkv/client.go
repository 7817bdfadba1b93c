package raftkv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/internal/enginedir"
)

// Writes. Each is one command, proposed on the leader and acknowledged
// once it is applied there (so a linearizable read that starts after it
// returns sees it). Concurrent writes share raft entries: the Ready loop
// proposes the writes queued since its last turn as one entry (up to
// maxBatchEntryBytes), and every node applies them in order as one op of
// its engine. The engine checks each write as it applies it, alike on
// every node; a refused write changes nothing and the others of its entry
// go on. A write to a follower fails at once with a *NotLeaderError
// (nothing proposed). Errors:
//
//   - ErrNotLeader, ErrProposalDropped: nothing was written; retry (on the
//     leader).
//   - ErrOutcomeUnknown (wrapping ctx.Err() or ErrStopped): the write was
//     proposed and may yet be applied.
//   - ErrUnknownKeyspace, ErrUnknownBitslice, and kvbuf's refusals:
//     kvbuf.ErrEmptyKey, kvbuf.ErrKeyTooLarge, kvbuf.ErrValueTooLarge,
//     kvbuf.ErrBadRange, kvbuf.ErrOutOfRange, kvbuf.ErrBadName: refused,
//     nothing written. The engine checks each write when it applies it;
//     before proposing, only a put's value is checked against
//     MaxValueSize, and a write larger than any the engine admits (key,
//     value and name together) refused.
//   - ctx.Err() if ctx ended before the write was proposed; ErrStopped,
//     ErrRemoved.

// Put sets key to value in keyspace.
func (n *Node) Put(ctx context.Context, keyspace string, key, value []byte) error {
	return n.propose(ctx, &command{kind: cmdPut, name: keyspace, key: key, value: value})
}

// Delete removes key from keyspace (absent keys are not an error).
func (n *Node) Delete(ctx context.Context, keyspace string, key []byte) error {
	return n.propose(ctx, &command{kind: cmdDelete, name: keyspace, key: key})
}

// DeleteRange removes every key k of keyspace with lower <= k < upper (nil:
// open on that side).
func (n *Node) DeleteRange(ctx context.Context, keyspace string, lower, upper []byte) error {
	return n.propose(ctx, &command{kind: cmdDeleteRange, name: keyspace,
		key: lower, value: upper, hasLo: lower != nil, hasHi: upper != nil})
}

// SetBit sets bit i of bitslice to v.
func (n *Node) SetBit(ctx context.Context, bitslice string, i uint64, v bool) error {
	return n.propose(ctx, &command{kind: cmdSetBit, name: bitslice, bit: i, set: v})
}

// CreateKeyspace creates the keyspace called name on every node (nothing
// if it exists). Names are those of kvbuf (kvbuf.ErrBadName otherwise).
func (n *Node) CreateKeyspace(ctx context.Context, name string) error {
	return n.propose(ctx, &command{kind: cmdCreateKeyspace, name: name})
}

// CreateBitslice creates the bitslice called name on every node (nothing
// if it exists).
func (n *Node) CreateBitslice(ctx context.Context, name string) error {
	return n.propose(ctx, &command{kind: cmdCreateBitslice, name: name})
}

// A Write is one write of Node.Write: a put of Value to Key in Keyspace,
// or, with Delete, the deletion of Key.
type Write struct {
	Keyspace   string
	Key, Value []byte
	Delete     bool
}

// Write applies ws pipelined: it queues them for the Ready loop together,
// in order, so that they are proposed (sharing raft entries) and applied in
// that order, and waits until every one is applied here. Each write has its
// own result, errs[i], as Put's or Delete's; a refused or failed write does
// not stop the others, and ws is not applied atomically (a write whose
// result is an error may be missing between writes that were applied).
// One sequential client thus pays one round of raft for many writes
// instead of one per write (cmd/kvraft's POST /kv/{keyspace}).
func (n *Node) Write(ctx context.Context, ws []Write) (errs []error) {
	cmds := make([]*command, len(ws))
	for i, w := range ws {
		if w.Delete {
			cmds[i] = &command{kind: cmdDelete, name: w.Keyspace, key: w.Key}
		} else {
			cmds[i] = &command{kind: cmdPut, name: w.Keyspace, key: w.Key, value: w.Value}
		}
	}
	errs = make([]error, len(ws))
	n.proposeAll(ctx, cmds, errs)
	return errs
}

// checkSize refuses, before it is proposed, a write that would only put
// junk into every node's log: a put whose value is over the engine's
// MaxValueSize (a value may be a megabyte; the engine refuses it again,
// alike on every node, when it applies the put), or a command whose key,
// value and name together exceed what any write may hold. Keys and names
// are checked once, by the engine, when it applies the command.
func (n *Node) checkSize(c *command) error {
	o := n.opts.Engine.EnsureDefaults()
	if c.kind == cmdPut && len(c.value) > o.MaxValueSize {
		return errorf("keyspace %q: value of %d bytes (max %d): %w", c.name, len(c.value), o.MaxValueSize, kvbuf.ErrValueTooLarge)
	}
	size := len(c.name) + len(c.key) + len(c.value)
	if size <= n.maxPayload {
		return nil
	}
	err := kvbuf.ErrKeyTooLarge
	if len(c.name) > enginedir.MaxNameLen {
		err = kvbuf.ErrBadName
	}
	return errorf("%q: %v of %d bytes (name, key and value; at most %d): %w", c.name, c.kind, size, n.maxPayload, err)
}

func (n *Node) notLeader() error {
	l, addr := n.Leader()
	return &NotLeaderError{Node: n.id, Leader: l, Addr: addr}
}

// register makes a waiter for request id.
func (n *Node) register() (uint64, chan error) {
	id := n.reqBase + n.reqSeq.Add(1)
	if id == 0 {
		id = n.reqBase + n.reqSeq.Add(1)
	}
	ch := make(chan error, 1)
	n.waitMu.Lock()
	n.waiters[id] = ch
	n.waitMu.Unlock()
	return id, ch
}

func (n *Node) unregister(id uint64) {
	n.waitMu.Lock()
	delete(n.waiters, id)
	n.waitMu.Unlock()
}

// A proposal is a write queued for the Ready loop, which proposes the
// writes queued since its last turn together (proposeQueued). state says
// whether the loop took it (then it may be in the log) or its caller gave
// up first (then it never will be).
type proposal struct {
	data  []byte // the encoded command
	id    uint64 // its request ID: the waiter's
	state atomic.Int32
}

const (
	propQueued int32 = iota
	propTaken
	propCancelled
)

// errDropped is what the Ready loop hands the waiters of a proposal raft
// refused; the caller says why (ErrNotLeader or ErrProposalDropped).
var errDropped = errors.New("raftkv: dropped by raft")

// propose queues c for the Ready loop on this node, which must lead, and
// waits until it is applied here.
func (n *Node) propose(ctx context.Context, c *command) error {
	var errs [1]error
	n.proposeAll(ctx, []*command{c}, errs[:])
	return errs[0]
}

// proposeAll queues cmds for the Ready loop, in order and under one lock
// (so that they are proposed in that order, sharing entries), wakes the
// loop once, and waits for each: errs[i] is command i's result.
func (n *Node) proposeAll(ctx context.Context, cmds []*command, errs []error) {
	fill := func(err error) {
		for i := range errs {
			errs[i] = err
		}
	}
	if n.halted() {
		fill(n.stopped())
		return
	}
	if !n.leader.Load() {
		fill(n.notLeader())
		return
	}
	props := make([]*proposal, len(cmds))
	chans := make([]chan error, len(cmds))
	for i, c := range cmds {
		if err := n.checkSize(c); err != nil {
			errs[i] = err
			continue
		}
		id, ch := n.register()
		c.id = id
		props[i], chans[i] = &proposal{data: c.encode(), id: id}, ch
	}
	n.propMu.Lock()
	for _, p := range props {
		if p != nil {
			n.props = append(n.props, p)
		}
	}
	n.propMu.Unlock()
	select {
	case n.propKick <- struct{}{}:
	default:
	}
	for i, p := range props {
		if p != nil {
			errs[i] = n.await(ctx, p, chans[i])
		}
	}
}

// await waits for the result of proposal p, delivered on ch.
func (n *Node) await(ctx context.Context, p *proposal, ch chan error) error {
	select {
	case err := <-ch:
		if errors.Is(err, errDropped) {
			n.m.proposalsDropped.Add(1)
			if !n.leader.Load() {
				return n.notLeader()
			}
			return errorf("node %d: %w", n.id, ErrProposalDropped)
		}
		return err
	case <-ctx.Done():
		n.unregister(p.id)
		if p.state.CompareAndSwap(propQueued, propCancelled) {
			return ctx.Err() // the loop never took it: nothing proposed
		}
		return errorf("%w: %w", ErrOutcomeUnknown, ctx.Err())
	case <-n.stopc:
		n.unregister(p.id)
		if p.state.CompareAndSwap(propQueued, propCancelled) {
			return n.stopped()
		}
		return errorf("%w: %w", ErrOutcomeUnknown, n.stopped())
	}
}

// maxBatchEntryBytes bounds the commands the Ready loop batches into one
// raft entry (a single larger command is an entry of its own).
const maxBatchEntryBytes = 256 << 10

// proposeQueued proposes the writes queued since the last turn, as few
// entries as maxBatchEntryBytes allows: one entry of one command is the
// command's encoding, one of several a batch (see command). Ready loop
// only. A batch raft refuses fails each of its writes with errDropped.
func (n *Node) proposeQueued(rn *raft.RawNode) {
	n.propMu.Lock()
	props := n.props
	n.props = n.propSpare[:0]
	n.propMu.Unlock()
	if len(props) == 0 {
		n.propSpare = props
		return
	}
	batch, size := n.propBatch[:0], 0
	flush := func() {
		if len(batch) == 0 {
			return
		}
		var data []byte
		if len(batch) == 1 {
			data = batch[0].data
		} else {
			data = make([]byte, 0, size+1)
			data = append(data, cmdBatchVersion)
			for _, p := range batch {
				data = appendBytes(data, p.data)
			}
		}
		if err := rn.Propose(data); err != nil {
			for _, p := range batch {
				n.complete(p.id, errDropped)
			}
		}
		batch, size = batch[:0], 0
	}
	for _, p := range props {
		if !p.state.CompareAndSwap(propQueued, propTaken) {
			continue // its caller gave up
		}
		if size > 0 && size+len(p.data) > maxBatchEntryBytes {
			flush()
		}
		batch = append(batch, p)
		size += len(p.data) + binary.MaxVarintLen32
	}
	flush()
	clear(batch[:cap(batch)])
	n.propBatch = batch[:0]
	clear(props)
	n.propSpare = props[:0]
}

// proposeWith proposes, on the loop, what prop builds for request id (a
// conf change), and waits until it is applied here.
func (n *Node) proposeWith(ctx context.Context, prop func(id uint64) error) error {
	if n.halted() {
		return n.stopped()
	}
	if !n.leader.Load() {
		return n.notLeader()
	}
	id, ch := n.register()
	defer n.unregister(id)
	if err := prop(id); err != nil {
		switch {
		case errors.Is(err, raft.ErrProposalDropped):
			n.m.proposalsDropped.Add(1)
			if !n.leader.Load() {
				return n.notLeader()
			}
			return errorf("node %d: %w", n.id, ErrProposalDropped)
		case errors.Is(err, errNotQueued):
			// The context ended before the loop took it: nothing proposed.
			return ctx.Err()
		}
		// ErrOutcomeUnknown (the context ended after the loop took the
		// proposal: it may be in), ErrStopped, or a refusal.
		return err
	}
	return n.outcome(ctx, ch)
}

// ReadOptions chooses how a read is served. nil means linearizable.
type ReadOptions struct {
	// Stale reads this node's applied state without asking the leader: no
	// round trip, and it works without a leader, but it may miss writes
	// acknowledged elsewhere (by any amount: a follower cut off from the
	// leader stays behind). Default: false, a linearizable read through
	// raft's ReadIndex (the leader confirms it still leads, and this node
	// waits until it has applied up to the leader's commit index).
	Stale bool
}

// linearize waits until this node may serve a linearizable read. Readers
// arriving together share one ReadIndex round.
func (n *Node) linearize(ctx context.Context, o *ReadOptions) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if n.halted() {
		return n.stopped()
	}
	if o != nil && o.Stale {
		return nil
	}
	n.readMu.Lock()
	r := n.readNext
	r.waiters.Add(1)
	n.readMu.Unlock()
	select {
	case n.readKick <- struct{}{}:
	default:
	}
	select {
	case <-r.done:
		if r.err != nil {
			return r.err
		}
		return n.waitApplied(ctx, r.index)
	case <-ctx.Done():
		r.waiters.Add(-1)
		return ctx.Err()
	case <-n.stopc:
		return n.stopped()
	}
}

// kicked waits for a kick on ch (a loop's wake-up, capacity 1) and reports
// true, or false once the node stops.
func (n *Node) kicked(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-n.stopc:
		return false
	}
}

// readLoop runs ReadIndex rounds, one at a time, for the readers that
// arrived since the last one began. A round is asked again every
// ReadIndexRetry until raft answers (a request is lost while there is no
// leader), and given up once its readers have.
func (n *Node) readLoop() {
	defer n.loops.Done()
	var seq uint64
	for n.kicked(n.readKick) {
		n.readMu.Lock()
		r := n.readNext
		n.readNext = &readRound{done: make(chan struct{})}
		n.readMu.Unlock()
		n.m.readRounds.Add(1)
		r.index, r.err = n.readRound(r, &seq)
		close(r.done)
	}
}

func (n *Node) readRound(r *readRound, seq *uint64) (uint64, error) {
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			n.m.readRetries.Add(1)
		}
		if r.waiters.Load() <= 0 {
			return 0, context.Canceled // every reader gave up
		}
		*seq++
		rctx := binary.LittleEndian.AppendUint64(nil, n.reqBase^*seq)
		if err := n.enqueue(n.ctx, func(rn *raft.RawNode) { rn.ReadIndex(rctx) }); err != nil {
			return 0, n.stopped()
		}
		idx, ok, err := n.awaitReadState(rctx)
		if err != nil || ok {
			return idx, err
		}
	}
}

// awaitReadState waits ReadIndexRetry for raft's answer to rctx.
func (n *Node) awaitReadState(rctx []byte) (uint64, bool, error) {
	timer := time.NewTimer(n.opts.ReadIndexRetry)
	defer timer.Stop()
	for {
		select {
		case rs := <-n.readStates:
			if bytes.Equal(rs.RequestCtx, rctx) {
				return rs.Index, true, nil
			}
		case <-timer.C:
			return 0, false, nil
		case <-n.stopc:
			return 0, false, n.stopped()
		}
	}
}

// withSM runs fn with the state machine, which no snapshot install
// replaces meanwhile. Its error is returned with raftkv's prefix.
func (n *Node) withSM(fn func(sm stateMachine) error) error {
	n.engMu.RLock()
	defer n.engMu.RUnlock()
	if n.halted() {
		return n.stopped()
	}
	if err := fn(n.sm); err != nil {
		return errorf("%w", err)
	}
	return nil
}

// Get returns the value of key in keyspace: linearizable unless o.Stale.
// Errors: kvbuf.ErrNotFound, ErrUnknownKeyspace, kvbuf.ErrEmptyKey,
// kvbuf.ErrKeyTooLarge, ctx.Err(), ErrStopped.
func (n *Node) Get(ctx context.Context, keyspace string, key []byte, o *ReadOptions) ([]byte, error) {
	if err := n.linearize(ctx, o); err != nil {
		return nil, err
	}
	var v []byte
	err := n.withSM(func(sm stateMachine) (err error) {
		v, err = sm.get(keyspace, key)
		return err
	})
	return v, err
}

// GetBit returns bit i of bitslice: linearizable unless o.Stale. Errors:
// ErrUnknownBitslice, kvbuf.ErrOutOfRange, ctx.Err(), ErrStopped.
func (n *Node) GetBit(ctx context.Context, bitslice string, i uint64, o *ReadOptions) (bool, error) {
	if err := n.linearize(ctx, o); err != nil {
		return false, err
	}
	var v bool
	err := n.withSM(func(sm stateMachine) (err error) {
		v, err = sm.getBit(bitslice, i)
		return err
	})
	return v, err
}

// KeyValue is one pair of a Scan.
type KeyValue struct {
	Key, Value []byte
}

// Scan returns the pairs of keyspace whose keys start with prefix, in key
// order, at most limit of them (limit <= 0: no limit), as of one instant
// (a snapshot of the engine): linearizable unless o.Stale. more reports
// that pairs were left out by limit: ScanAfter the last key returned reads
// the next page.
func (n *Node) Scan(ctx context.Context, keyspace string, prefix []byte, limit int, o *ReadOptions) (kvs []KeyValue, more bool, err error) {
	return n.ScanAfter(ctx, keyspace, prefix, nil, limit, o)
}

// ScanAfter is Scan of the keys above after (nil: from the first): the
// page of a scan that follows the one whose last key was after. Each page
// is read at its own instant: a scan by pages sees each key once, and the
// writes between pages to keys it has not reached yet.
func (n *Node) ScanAfter(ctx context.Context, keyspace string, prefix, after []byte, limit int, o *ReadOptions) (kvs []KeyValue, more bool, err error) {
	if err := n.linearize(ctx, o); err != nil {
		return nil, false, err
	}
	err = n.withSM(func(sm stateMachine) (err error) {
		kvs, more, err = sm.scan(keyspace, prefix, after, limit)
		return err
	})
	return kvs, more, err
}

// Keyspaces returns the names of the keyspaces created so far on this node
// (as of its applied index), sorted.
func (n *Node) Keyspaces() []string {
	var out []string
	_ = n.withSM(func(sm stateMachine) error { out, _ = sm.names(); return nil })
	return out
}

// Bitslices returns the names of the bitslices created so far on this node
// (as of its applied index), sorted.
func (n *Node) Bitslices() []string {
	var out []string
	_ = n.withSM(func(sm stateMachine) error { _, out = sm.names(); return nil })
	return out
}
