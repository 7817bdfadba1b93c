package raftkv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/internal/enginedir"
)

// Writes. Each is one command, proposed on the leader and acknowledged
// once it is applied there (so a linearizable read that starts after it
// returns sees it). A write to a follower fails at once with a
// *NotLeaderError (nothing proposed). Errors:
//
//   - ErrNotLeader, ErrDropped: nothing was written; retry (on the leader).
//   - ErrOutcomeUnknown (wrapping ctx.Err() or ErrStopped): the write was
//     proposed and may yet be applied.
//   - ErrUnknownKeyspace, ErrUnknownBitslice, kvbuf.ErrEmptyKey,
//     kvbuf.ErrKeyTooLarge, kvbuf.ErrValueTooLarge, kvbuf.ErrBadRange,
//     kvbuf.ErrOutOfRange, kvbuf.ErrBadName: refused, nothing written.
//   - ErrStopped, ErrRemoved.

// Put sets key to value in keyspace.
func (n *Node) Put(ctx context.Context, keyspace string, key, value []byte) error {
	if err := n.checkKV(ctx, keyspace, key, value, true); err != nil {
		return err
	}
	return n.propose(ctx, &command{kind: cmdPut, name: keyspace, key: key, value: value})
}

// Delete removes key from keyspace (absent keys are not an error).
func (n *Node) Delete(ctx context.Context, keyspace string, key []byte) error {
	if err := n.checkKV(ctx, keyspace, key, nil, false); err != nil {
		return err
	}
	return n.propose(ctx, &command{kind: cmdDelete, name: keyspace, key: key})
}

// DeleteRange removes every key k of keyspace with lower <= k < upper (nil:
// open on that side).
func (n *Node) DeleteRange(ctx context.Context, keyspace string, lower, upper []byte) error {
	if err := n.checkKeyspace(ctx, keyspace); err != nil {
		return err
	}
	if lower != nil && upper != nil && bytes.Compare(lower, upper) > 0 {
		return fmt.Errorf("raftkv: delete range [%q, %q): %w", lower, upper, kvbuf.ErrBadRange)
	}
	return n.propose(ctx, &command{kind: cmdDeleteRange, name: keyspace,
		key: lower, value: upper, hasLo: lower != nil, hasHi: upper != nil})
}

// SetBit sets bit i of bitslice to v.
func (n *Node) SetBit(ctx context.Context, bitslice string, i uint64, v bool) error {
	if err := n.checkBitslice(ctx, bitslice); err != nil {
		return err
	}
	if max := n.opts.Engine.EnsureDefaults().MaxBits; i >= max {
		return fmt.Errorf("raftkv: bitslice %q: bit %d (max %d): %w", bitslice, i, max, kvbuf.ErrOutOfRange)
	}
	return n.propose(ctx, &command{kind: cmdSetBit, name: bitslice, bit: i, set: v})
}

// CreateKeyspace creates the keyspace called name on every node (nothing
// if it exists). Names are those of kvbuf (kvbuf.ErrBadName otherwise).
func (n *Node) CreateKeyspace(ctx context.Context, name string) error {
	if err := enginedir.CheckName("keyspace", name); err != nil {
		return err
	}
	return n.propose(ctx, &command{kind: cmdCreateKeyspace, name: name})
}

// CreateBitslice creates the bitslice called name on every node (nothing
// if it exists).
func (n *Node) CreateBitslice(ctx context.Context, name string) error {
	if err := enginedir.CheckName("bitslice", name); err != nil {
		return err
	}
	return n.propose(ctx, &command{kind: cmdCreateBitslice, name: name})
}

// checkKeyspace refuses an unknown keyspace before anything is proposed.
// Keyspaces are never dropped, so one this node has applied exists on
// every node by the time they apply a later entry. One this node has not
// applied yet may have been created (by an earlier leader, or acked by
// this one before a follower asks): the check waits for a read index
// before it refuses. A follower refuses the write as not the leader first.
func (n *Node) checkKeyspace(ctx context.Context, name string) error {
	return n.checkName(ctx, func(e *engineSM) error { _, err := e.kv(name); return err })
}

func (n *Node) checkBitslice(ctx context.Context, name string) error {
	return n.checkName(ctx, func(e *engineSM) error { _, err := e.bits(name); return err })
}

func (n *Node) checkName(ctx context.Context, lookup func(e *engineSM) error) error {
	select {
	case <-n.stopc:
		return n.stopped()
	default:
	}
	if !n.leader.Load() {
		return n.notLeader()
	}
	err := n.withEngine(lookup)
	if errors.Is(err, ErrUnsupported) {
		return nil
	}
	if err == nil || !(errors.Is(err, ErrUnknownKeyspace) || errors.Is(err, ErrUnknownBitslice)) {
		return err
	}
	if lerr := n.linearize(ctx, nil); lerr != nil {
		return lerr
	}
	return n.withEngine(lookup)
}

// checkKV applies the engine's key and value limits before proposing (the
// engine applies them again, alike on every node).
func (n *Node) checkKV(ctx context.Context, keyspace string, key, value []byte, put bool) error {
	if err := n.checkKeyspace(ctx, keyspace); err != nil {
		return err
	}
	o := n.opts.Engine.EnsureDefaults()
	switch {
	case len(key) == 0:
		return fmt.Errorf("raftkv: keyspace %q: %w", keyspace, kvbuf.ErrEmptyKey)
	case len(key) > o.MaxKeySize:
		return fmt.Errorf("raftkv: keyspace %q: key of %d bytes (max %d): %w", keyspace, len(key), o.MaxKeySize, kvbuf.ErrKeyTooLarge)
	case put && len(value) > o.MaxValueSize:
		return fmt.Errorf("raftkv: keyspace %q: value of %d bytes (max %d): %w", keyspace, len(value), o.MaxValueSize, kvbuf.ErrValueTooLarge)
	}
	return nil
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

// propose proposes c on this node, which must lead, and waits until it is
// applied here.
func (n *Node) propose(ctx context.Context, c *command) error {
	return n.proposeWith(ctx, func(id uint64) error {
		c.id = id
		data := c.encode()
		return n.onLoop(ctx, func(rn *raft.RawNode) error { return rn.Propose(data) })
	})
}

func (n *Node) proposeWith(ctx context.Context, prop func(id uint64) error) error {
	select {
	case <-n.stopc:
		return n.stopped()
	default:
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
			return fmt.Errorf("raftkv: node %d: %w", n.id, ErrDropped)
		case errors.Is(err, errNotQueued):
			// The context ended before the loop took it: nothing proposed.
			return ctx.Err()
		}
		// ErrOutcomeUnknown (the context ended after the loop took the
		// proposal: it may be in), ErrStopped, or a refusal.
		return err
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, ctx.Err())
	case <-n.stopc:
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, n.stopped())
	}
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
	select {
	case <-n.stopc:
		return n.stopped()
	default:
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

// readLoop runs ReadIndex rounds, one at a time, for the readers that
// arrived since the last one began. A round is asked again every
// ReadIndexRetry until raft answers (a request is lost while there is no
// leader), and given up once its readers have.
func (n *Node) readLoop() {
	defer n.loops.Done()
	var seq uint64
	for {
		select {
		case <-n.readKick:
		case <-n.stopc:
			return
		}
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

// withEngine runs fn with the engine, which no snapshot install replaces
// meanwhile.
func (n *Node) withEngine(fn func(e *engineSM) error) error {
	n.engMu.RLock()
	defer n.engMu.RUnlock()
	select {
	case <-n.stopc:
		return n.stopped()
	default:
	}
	if n.eng == nil {
		return ErrUnsupported
	}
	return fn(n.eng)
}

// Get returns the value of key in keyspace: linearizable unless o.Stale.
// Errors: kvbuf.ErrNotFound, ErrUnknownKeyspace, ctx.Err(), ErrStopped.
func (n *Node) Get(ctx context.Context, keyspace string, key []byte, o *ReadOptions) ([]byte, error) {
	if err := n.linearize(ctx, o); err != nil {
		return nil, err
	}
	var v []byte
	err := n.withEngine(func(e *engineSM) error {
		k, err := e.kv(keyspace)
		if err != nil {
			return err
		}
		v, err = k.Get(key)
		return err
	})
	return v, err
}

// GetBit returns bit i of bitslice: linearizable unless o.Stale. Errors:
// ErrUnknownBitslice, ctx.Err(), ErrStopped.
func (n *Node) GetBit(ctx context.Context, bitslice string, i uint64, o *ReadOptions) (bool, error) {
	if err := n.linearize(ctx, o); err != nil {
		return false, err
	}
	var v bool
	err := n.withEngine(func(e *engineSM) error {
		b, err := e.bits(bitslice)
		if err != nil {
			return err
		}
		v, err = b.Get(i)
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
	err = n.withEngine(func(e *engineSM) error {
		if _, err := e.kv(keyspace); err != nil {
			return err
		}
		s, err := e.db.NewSnapshot()
		if err != nil {
			return err
		}
		defer s.Close()
		r, err := s.KV(keyspace)
		if err != nil {
			return err
		}
		it, err := r.NewIter(&kvbuf.IterOptions{Prefix: prefix})
		if err != nil {
			return err
		}
		var ok bool
		if from := append(bytes.Clone(after), 0); after != nil && bytes.Compare(from, prefix) > 0 {
			ok = it.SeekGE(from) // the first key above after
		} else {
			ok = it.First()
		}
		for ; ok; ok = it.Next() {
			if limit > 0 && len(kvs) == limit {
				more = true
				break
			}
			kvs = append(kvs, KeyValue{Key: bytes.Clone(it.Key()), Value: bytes.Clone(it.Value())})
		}
		return it.Close()
	})
	return kvs, more, err
}

// Keyspaces returns the names of the keyspaces created so far on this node
// (as of its applied index), sorted.
func (n *Node) Keyspaces() []string {
	var out []string
	_ = n.withEngine(func(e *engineSM) error { out = e.db.Keyspaces(); return nil })
	return out
}

// Bitslices returns the names of the bitslices created so far on this node
// (as of its applied index), sorted.
func (n *Node) Bitslices() []string {
	var out []string
	_ = n.withEngine(func(e *engineSM) error { out = e.db.Bitslices(); return nil })
	return out
}
