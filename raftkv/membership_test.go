package raftkv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvbuf/kvbuf"
)

// writer writes keys w<i> through the leader until stopped, and returns
// the keys it saw acknowledged.
type writer struct {
	c      *cluster
	stop   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	acked  []string
	failed atomic.Int64
}

func startWriter(c *cluster, keyspace string) *writer {
	w := &writer{c: c, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			var l *Node
			for _, n := range c.running() {
				if n.IsLeader() {
					l = n
				}
			}
			if l == nil {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			key := fmt.Sprintf("w%06d", i)
			ctx, cancel := context.WithTimeout(bg, 2*time.Second)
			err := l.Put(ctx, keyspace, []byte(key), []byte(key))
			cancel()
			if err != nil {
				w.failed.Add(1)
				continue
			}
			w.mu.Lock()
			w.acked = append(w.acked, key)
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// finish stops the writer and returns the acknowledged keys.
func (w *writer) finish() []string {
	close(w.stop)
	<-w.done
	return w.acked
}

// checkAcked fails unless every node running has every key.
func checkAcked(t testing.TB, c *cluster, keyspace string, keys []string) {
	t.Helper()
	for _, n := range c.running() {
		for _, k := range keys {
			v, err := n.Get(bg, keyspace, []byte(k), &ReadOptions{Stale: true})
			if err != nil || string(v) != k {
				t.Fatalf("node %d: acknowledged key %s: %q, %v", n.ID(), k, v, err)
			}
		}
	}
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitFor is the package's waitFor that, on a timeout, logs every running
// node's status first: a catch-up that stalls on a loaded machine must say
// where (raft state, applied index, snapshot counters, the last send
// error).
func (c *cluster) waitFor(timeout time.Duration, what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			for _, n := range c.running() {
				b, _ := json.Marshal(n.Status())
				c.t.Logf("node %d: %s", n.ID(), b)
			}
			c.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A node added (as a learner) to a running cluster whose log was compacted
// catches up by a snapshot while writes go on, is promoted, and ends with
// the same content.
func TestAddNodeCatchesUpBySnapshot(t *testing.T) {
	c := newCluster(t, 3, func(o *Options) { o.LogRetain = 5 })
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateKeyspace(ctx, "ks") })
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateBitslice(ctx, "bs") })
	for i := range 100 {
		c.mustDo(func(ctx context.Context, n *Node) error { return n.SetBit(ctx, "bs", uint64(i*7), true) })
	}
	w := startWriter(c, "ks")
	l := c.leader(5 * time.Second)
	waitFor(t, 20*time.Second, "the leader's log to be compacted", func() bool { return l.Status().LogFirst > 50 })

	tn := c.listen(4)
	c.mustDo(func(ctx context.Context, n *Node) error { return n.AddLearner(ctx, 4, tn.addr) })
	n4 := c.start(4, true)
	c.waitFor(90*time.Second, "node 4 to install a snapshot", func() bool { return n4.Metrics().SnapshotsInstalled > 0 })
	c.waitFor(30*time.Second, "node 4 to be promoted", func() bool {
		return c.do(5*time.Second, func(ctx context.Context, n *Node) error { return n.PromoteNode(ctx, 4) }) == nil
	})
	before := w.count()
	waitFor(t, 20*time.Second, "more writes after the install", func() bool { return w.count() > before+20 })
	acked := w.finish()
	c.converge(30 * time.Second)
	checkAcked(t, c, "ks", acked)
	if st := n4.Status(); st.Watermark < st.LogFirst-1 || st.Engine == initialEngine {
		t.Fatalf("node 4 after the install: %+v", st)
	}
	if len(n4.Status().Members) != 4 {
		t.Fatalf("node 4 members: %v", n4.Status().Members)
	}
	// The new member restarts from its installed engine.
	c.stop(4)
	c.start(4, true)
	c.converge(30 * time.Second)
	t.Logf("%d writes acknowledged, %d failed during the catch-up", len(acked), w.failed.Load())
}

// A removed node stops, its directory refuses to open, and the rest go on;
// a wiped node comes back under a new ID (IDs are never reused) and
// catches up by snapshot while writes go on.
func TestRemoveAndReaddWiped(t *testing.T) {
	c := newCluster(t, 3, func(o *Options) { o.LogRetain = 5 })
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateKeyspace(ctx, "ks") })
	w := startWriter(c, "ks")
	waitFor(t, 20*time.Second, "writes", func() bool { return w.count() > 50 })

	// Remove a follower.
	l := c.leader(5 * time.Second)
	victim := uint64(1)
	for victim == l.ID() {
		victim++
	}
	old := c.tn(victim).node()
	c.mustDo(func(ctx context.Context, n *Node) error { return n.RemoveNode(ctx, victim) })
	waitFor(t, 10*time.Second, "the removed node to stop", func() bool { return errors.Is(old.Err(), ErrRemoved) })
	if err := old.Put(bg, "ks", []byte("x"), []byte("y")); !errors.Is(err, ErrRemoved) {
		t.Fatalf("write to the removed node: %v", err)
	}
	if st := old.Status(); st.State != "removed" {
		t.Fatalf("removed node's status: %+v", st)
	}
	c.stop(victim)
	if _, err := Open(c.options(victim, false)); !errors.Is(err, ErrRemoved) {
		t.Fatalf("reopening a removed node's directory: %v", err)
	}
	if n := len(c.leader(5 * time.Second).Status().Members); n != 2 {
		t.Fatalf("%d members after the removal", n)
	}
	before := w.count()
	waitFor(t, 20*time.Second, "writes on two nodes", func() bool { return w.count() > before+20 })

	// The leader's log must have been compacted past its start, or the
	// new node catches up from the log instead (a fast run can get here
	// before the first flush moved the durable watermark).
	waitFor(t, 30*time.Second, "the leader's log to be compacted", func() bool {
		return c.leader(5*time.Second).Status().LogFirst > 1
	})
	// Wipe it; re-add it as node 4 at the same address.
	if err := os.RemoveAll(c.tn(victim).dir); err != nil {
		t.Fatal(err)
	}
	addr := c.rename(victim, 4).addr // its server and address serve node 4 now
	c.mustDo(func(ctx context.Context, n *Node) error { return n.AddNode(ctx, 4, addr) })
	n4 := c.start(4, true)
	c.waitFor(90*time.Second, "node 4 to catch up by snapshot", func() bool { return n4.Metrics().SnapshotsInstalled > 0 })
	before = w.count()
	waitFor(t, 20*time.Second, "writes after the re-add", func() bool { return w.count() > before+20 })
	acked := w.finish()
	c.converge(30 * time.Second)
	checkAcked(t, c, "ks", acked)
}

// A leader removing itself may learn of its removal from a peer before it
// applies the change (its apply lags under load; the peers applied the
// change and refuse its streams). RemoveNode returns nil all the same: a
// peer says so only once it applied the removal. (kvraft's TestProcessKills
// got a 504 "outcome unknown" for such a DELETE in CI.) The test holds the
// leader's apply of the change and stops the node as removedByPeer does.
func TestRemoveLeaderToldByPeer(t *testing.T) {
	var slow atomic.Pointer[holdAt]
	held := make(chan struct{})
	hooks := &testHooks{newSM: func(dir string) (stateMachine, error) {
		sm, err := openEngineSM(dir, nil)
		if err != nil {
			return nil, err
		}
		return &slowSkipSM{stateMachine: sm, dir: dir, slow: &slow, held: held}, nil
	}}
	c := newClusterHooks(t, 3, nil, hooks)
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateKeyspace(ctx, "ks") })
	var l *Node
	errc := make(chan error, 1)
	for try := 0; l == nil; try++ {
		l = c.leader(10 * time.Second)
		slow.Store(&holdAt{dir: c.tn(l.ID()).dir, removed: &l.removed})
		go func() { errc <- l.RemoveNode(bg, l.ID()) }()
		select {
		case <-held: // the leader is applying its removal; its caller waits
		case err := <-errc:
			// The leadership moved before the change committed (a loaded
			// machine): try again with the new leader.
			if try == 5 || !(errors.Is(err, ErrNotLeader) || errors.Is(err, ErrProposalDropped)) {
				t.Fatalf("RemoveNode returned %v before the leader applied the change", err)
			}
			slow.Store(nil)
			l = nil
		}
	}
	id := l.ID()
	l.fail(errorf("node %d (as node %d says): %w", id, c.follower(l).ID(), ErrRemoved))
	if err := <-errc; err != nil {
		t.Fatalf("leader removing itself, told by a peer: %v", err)
	}
	if err := l.Err(); !errors.Is(err, ErrRemoved) || !strings.Contains(err.Error(), "says") {
		t.Fatalf("the old leader stopped with %v, want ErrRemoved as a peer says", err)
	}
	c.stop(id)
	c.forget(id)
	c.mustDo(func(ctx context.Context, n *Node) error { return n.Put(ctx, "ks", []byte("k"), []byte("v")) })
}

// The loop answers a node's own removal and then stops in the same turn: a
// caller that finds both ready gets the answer, not "outcome unknown"
// (select alone picks at random).
func TestOutcomeAnswerBeforeStop(t *testing.T) {
	n := &Node{stopc: make(chan struct{}), err: errorf("node 1: %w", ErrRemoved)}
	close(n.stopc) // as fail does, after the loop answered
	for i := range 64 {
		ch := make(chan error, 1)
		ch <- nil
		if err := n.outcome(bg, ch); err != nil {
			t.Fatalf("try %d: %v, want the answer (nil)", i, err)
		}
	}
}

// slowSkipSM holds skip (the apply of an entry that changes no state) on
// the node whose directory is under slow's once that node applied its own
// removal (skip runs last in applyConfChange): it closes held (once) and
// waits until the node stops. Other entries that skip (a new leader's
// empty entry, the leader's meta entries, which arrive whenever a peer's
// incarnation does) pass.
type slowSkipSM struct {
	stateMachine
	dir  string
	slow *atomic.Pointer[holdAt]
	held chan struct{}
	once sync.Once
}

type holdAt struct {
	dir     string
	removed *atomic.Bool // the node's own removal applied
}

func (s *slowSkipSM) skip(ctx context.Context, index uint64) error {
	if h := s.slow.Load(); h != nil && strings.HasPrefix(s.dir, h.dir) && h.removed.Load() {
		s.once.Do(func() { close(s.held) })
		<-ctx.Done()
	}
	return s.stateMachine.skip(ctx, index)
}

// Removing the leader: it steps down, the others elect a new one.
func TestRemoveLeader(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateKeyspace(ctx, "ks") })
	l := c.leader(5 * time.Second)
	id := l.ID()
	if err := l.RemoveNode(bg, id); err != nil && !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("leader removing itself: %v", err)
	}
	waitFor(t, 10*time.Second, "the old leader to stop", func() bool { return errors.Is(l.Err(), ErrRemoved) })
	c.stop(id)
	c.forget(id)
	c.mustDo(func(ctx context.Context, n *Node) error { return n.Put(ctx, "ks", []byte("k"), []byte("v")) })
	c.converge(10 * time.Second)
}

// Each membership mistake is refused with its own error, on the leader
// before anything is proposed, and changes nothing.
func TestMembershipMistakes(t *testing.T) {
	c := newCluster(t, 3, func(o *Options) { o.LogRetain = 5 })
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateKeyspace(ctx, "ks") })
	// Node 3 leaves: its ID is never used again.
	l := c.leader(5 * time.Second)
	if l.ID() == 3 {
		c.mustDo(func(ctx context.Context, n *Node) error { return n.RemoveNode(ctx, 2) })
		c.forget(2)
	} else {
		c.mustDo(func(ctx context.Context, n *Node) error { return n.RemoveNode(ctx, 3) })
		c.forget(3)
	}
	gone := uint64(3)
	if l.ID() == 3 {
		gone = 2
	}
	c.settle(10 * time.Second)
	l = c.leader(5 * time.Second)
	before := l.Status()
	member := l.ID()
	addr := c.tn(member).addr
	for name, tc := range map[string]struct {
		err  error
		want error
		text string
	}{
		"re-add a removed ID":       {l.AddLearner(bg, gone, "127.0.0.1:1"), ErrRemovedID, "never reused"},
		"re-add a removed voter":    {l.AddNode(bg, gone, "127.0.0.1:1"), ErrRemovedID, "never reused"},
		"add an existing member":    {l.AddLearner(bg, member, "127.0.0.1:2"), ErrMemberExists, "PUT /members"},
		"re-post a member":          {l.AddNode(bg, member, addr), ErrMemberExists, "already a member"},
		"remove a non-member":       {l.RemoveNode(bg, 9), ErrNotMember, "node 9"},
		"remove a removed node":     {l.RemoveNode(bg, gone), ErrNotMember, "removed already"},
		"promote a non-member":      {l.PromoteNode(bg, 9), ErrNotMember, "not a learner"},
		"promote a voter":           {l.PromoteNode(bg, member), ErrMemberExists, "already a voter"},
		"move a non-member":         {l.UpdateNode(bg, 9, "127.0.0.1:3"), ErrNotMember, "node 9"},
		"promote a removed node":    {l.PromoteNode(bg, gone), ErrRemovedID, ""},
		"add with a bad address":    {l.AddLearner(bg, 7, "nowhere"), kvbuf.ErrBadOptions, ""},
		"promote node 0":            {l.PromoteNode(bg, 0), kvbuf.ErrBadOptions, ""},
		"add a learner on follower": {c.follower(l).AddLearner(bg, 7, "127.0.0.1:4"), ErrNotLeader, ""},
	} {
		if !errors.Is(tc.err, tc.want) || !strings.Contains(fmt.Sprint(tc.err), tc.text) {
			t.Errorf("%s: %v, want %v with %q", name, tc.err, tc.want, tc.text)
		}
	}
	// A learner that never ran is not promoted.
	c.mustDo(func(ctx context.Context, n *Node) error { return n.AddLearner(ctx, 7, "127.0.0.1:5") })
	if err := c.leader(5*time.Second).PromoteNode(bg, 7); !errors.Is(err, ErrNotCaughtUp) {
		t.Errorf("promote a learner that never ran: %v", err)
	}
	c.mustDo(func(ctx context.Context, n *Node) error { return n.RemoveNode(ctx, 7) })
	// The last voter stays.
	c.mustDo(func(ctx context.Context, n *Node) error { return n.RemoveNode(ctx, c.follower(n).ID()) })
	l = c.leader(5 * time.Second)
	if err := l.RemoveNode(bg, l.ID()); !errors.Is(err, ErrLastVoter) {
		t.Errorf("remove the last voter: %v", err)
	}
	st := l.Status()
	if len(st.Voters) != 1 || st.Voters[0] != l.ID() || len(st.Learners) != 0 {
		t.Fatalf("members after the refusals: %+v (before %+v)", st, before)
	}
	c.mustDo(func(ctx context.Context, n *Node) error { return n.Put(ctx, "ks", []byte("k"), []byte("v")) })
}

// follower returns a running node other than n.
func (c *cluster) follower(n *Node) *Node {
	for _, m := range c.running() {
		if m != n {
			return m
		}
	}
	c.t.Fatal("no other node")
	return nil
}

// A change proposed while another is not applied yet is refused with
// ErrConfChangePending (raft would turn it into an empty entry and its
// caller would wait for nothing). The leader is cut off from the others so
// that the first change stays uncommitted (a long election timeout keeps
// it leading meanwhile).
func TestConfChangePending(t *testing.T) {
	c := newCluster(t, 3, func(o *Options) { o.ElectionTicks = 100 })
	l := isolateLeader(c)
	last := l.Status().LogLast
	first := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(bg, 20*time.Second)
		defer cancel()
		first <- l.AddLearner(ctx, 8, "127.0.0.1:8")
	}()
	waitFor(t, 5*time.Second, "the first change to be appended", func() bool { return l.Status().LogLast > last })
	// The second change waits for the first (confPendingWait) until its
	// context ends, and is refused.
	short, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	defer cancel()
	if err := l.AddLearner(short, 9, "127.0.0.1:9"); !errors.Is(err, ErrConfChangePending) {
		t.Fatalf("a second change while the first is pending: %v", err)
	}
	c.faults.heal()
	if err := <-first; err != nil {
		t.Fatalf("the first change: %v", err)
	}
	if st := l.Status(); !slices.Equal(st.Learners, []uint64{8}) {
		t.Fatalf("learners %v, want [8]", st.Learners)
	}
}

// isolateLeader settles c, cuts its leader off from the other nodes (with
// a long election timeout it keeps leading meanwhile) and returns it.
func isolateLeader(c *cluster) *Node {
	c.settle(20 * time.Second)
	l := c.leader(20 * time.Second)
	var others []uint64
	for _, id := range c.ids() {
		if id != l.ID() {
			others = append(others, id)
		}
	}
	c.faults.partition([]uint64{l.ID()}, others)
	return l
}

// A change refused because another is not applied yet waits for that one
// and goes through once it is applied (changeConf), as an operator told
// to retry would: the README's "Add a node" right after a restart met a
// new leader's first entry not yet applied and answered 503.
func TestConfChangeWaitsForPending(t *testing.T) {
	waiting := make(chan struct{}, 8)
	c := newClusterHooks(t, 3, func(o *Options) { o.ElectionTicks = 100 }, &testHooks{confWait: func() { waiting <- struct{}{} }})
	l := isolateLeader(c)
	last := l.Status().LogLast
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	first, second := make(chan error, 1), make(chan error, 1)
	go func() { first <- l.AddLearner(ctx, 8, "127.0.0.1:8") }()
	waitFor(t, 5*time.Second, "the first change to be appended", func() bool { return l.Status().LogLast > last })
	go func() { second <- l.AddLearner(ctx, 9, "127.0.0.1:9") }()
	select {
	case <-waiting:
	case err := <-second:
		t.Fatalf("the second change returned %v without waiting for the first", err)
	case <-time.After(20 * time.Second): // a hang detector
		t.Fatal("the second change neither waited nor returned")
	}
	c.faults.heal()
	if err := <-first; err != nil {
		t.Fatalf("the first change: %v", err)
	}
	if err := <-second; err != nil {
		t.Fatalf("the second change, once the first was applied: %v", err)
	}
	if st := l.Status(); !slices.Equal(st.Learners, []uint64{8, 9}) {
		t.Fatalf("learners %v, want [8 9]", st.Learners)
	}
}

// A node added as a learner does not change the quorum: the cluster keeps
// committing while it is down; it catches up once it runs, and is
// promoted to a voter once caught up.
func TestLearnerPromotion(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateKeyspace(ctx, "ks") })
	tn := c.listen(4)
	c.mustDo(func(ctx context.Context, n *Node) error { return n.AddLearner(ctx, 4, tn.addr) })
	// One voter down: 2 of 3 voters still commit (a voter added at once
	// would have made it 2 of 4).
	down := c.follower(c.leader(5 * time.Second)).ID()
	c.stop(down)
	for i := range 20 {
		c.mustDo(func(ctx context.Context, n *Node) error {
			return n.Put(ctx, "ks", fmt.Appendf(nil, "k%d", i), []byte("v"))
		})
	}
	c.start(down, false)
	c.start(4, true)
	c.waitFor(30*time.Second, "the learner to catch up and be promoted", func() bool {
		err := c.do(5*time.Second, func(ctx context.Context, n *Node) error { return n.PromoteNode(ctx, 4) })
		return err == nil
	})
	c.converge(30 * time.Second)
	for _, n := range c.running() {
		if st := n.Status(); !slices.Contains(st.Voters, 4) || len(st.Learners) != 0 {
			t.Fatalf("node %d after the promotion: voters %v, learners %v", n.ID(), st.Voters, st.Learners)
		}
	}
}

// UpdateNode moves a member to a new address: it restarts there with its
// data directory and the cluster goes on with it.
func TestUpdateNodeAddress(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateKeyspace(ctx, "ks") })
	mover := c.follower(c.leader(5 * time.Second)).ID()
	c.stop(mover)
	tn := c.move(mover)
	c.mustDo(func(ctx context.Context, n *Node) error { return n.UpdateNode(ctx, mover, tn.addr) })
	c.start(mover, false)
	c.mustDo(func(ctx context.Context, n *Node) error { return n.Put(ctx, "ks", []byte("k"), []byte("v")) })
	c.converge(30 * time.Second)
	for _, n := range c.running() {
		if got := n.Status().Members[mover]; got != tn.addr {
			t.Fatalf("node %d has node %d at %s, want %s", n.ID(), mover, got, tn.addr)
		}
	}
}

// move serves node id's directory on a new address (a node moved to
// another host); its old server keeps answering 503.
func (c *cluster) move(id uint64) *testNode {
	c.t.Helper()
	old := c.tn(id)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	tn := &testNode{id: id, dir: old.dir, addr: ln.Addr().String()}
	tn.srv = &http.Server{Handler: tn, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = tn.srv.Serve(ln) }()
	c.mu.Lock()
	c.nodes[id] = tn
	c.srvs = append(c.srvs, tn.srv)
	c.mu.Unlock()
	return tn
}

// A node whose data directory was wiped and that is started again as it
// was (bootstrapping, or with Join) is refused by the cluster and stops
// with ErrLostState, naming itself and the remedy: no panic, and the
// others go on. (Before incarnations and the lost-state checks, raft
// panicked: "tocommit(N) is out of range [lastIndex(M)]".)
func TestWipedNodeRefused(t *testing.T) {
	for _, join := range []bool{false, true} {
		t.Run(fmt.Sprintf("join=%v", join), func(t *testing.T) {
			c := newCluster(t, 3, nil)
			c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateKeyspace(ctx, "ks") })
			for i := range 50 {
				c.mustDo(func(ctx context.Context, n *Node) error {
					return n.Put(ctx, "ks", fmt.Appendf(nil, "k%d", i), []byte("v"))
				})
			}
			c.settle(10 * time.Second)
			victim := c.follower(c.leader(5 * time.Second)).ID()
			c.stop(victim)
			if err := os.RemoveAll(c.tn(victim).dir); err != nil {
				t.Fatal(err)
			}
			n := c.start(victim, join)
			select {
			case <-n.Done():
			case <-time.After(30 * time.Second):
				t.Fatalf("the wiped node runs: %+v", n.Status())
			}
			err := n.Err()
			if !errors.Is(err, ErrLostState) || !strings.Contains(err.Error(), fmt.Sprintf("node %d", victim)) ||
				!strings.Contains(err.Error(), "new ID") || strings.Contains(err.Error(), "\n") {
				t.Fatalf("the wiped node stopped with %v", err)
			}
			t.Log(err)
			c.stop(victim)
			c.forget(victim)
			c.mustDo(func(ctx context.Context, n *Node) error { return n.Put(ctx, "ks", []byte("after"), []byte("v")) })
			c.converge(30 * time.Second)
		})
	}
}

// lineLog is a slog handler keeping the messages of the lines logged at
// info level and above, with their node attribute.
type lineLog struct {
	mu    *sync.Mutex
	lines *[]string
	attrs string
}

func (h lineLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (h lineLog) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.lines = append(*h.lines, h.attrs+r.Message)
	return nil
}
func (h lineLog) WithAttrs(as []slog.Attr) slog.Handler {
	for _, a := range as {
		h.attrs += a.String() + " "
	}
	return h
}
func (h lineLog) WithGroup(string) slog.Handler { return h }

func (h lineLog) has(s string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range *h.lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// At the default level a node logs elections, leader changes, peers
// becoming unreachable and reachable again, and snapshots sent and
// installed.
func TestInfoLogLines(t *testing.T) {
	h := lineLog{mu: &sync.Mutex{}, lines: &[]string{}}
	c := newCluster(t, 3, func(o *Options) {
		o.Logger = slog.New(h)
		o.LogRetain = 5
	})
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateKeyspace(ctx, "ks") })
	l := c.leader(5 * time.Second)
	victim := c.follower(l).ID()
	c.stop(victim)
	for i := range 200 {
		c.mustDo(func(ctx context.Context, n *Node) error {
			return n.Put(ctx, "ks", fmt.Appendf(nil, "k%d", i), []byte("v"))
		})
	}
	c.start(victim, false)
	c.converge(30 * time.Second)
	lead := fmt.Sprintf("node=%d ", l.ID())
	for _, want := range []string{
		lead + "raftkv: starting an election",
		lead + "raftkv: became the leader",
		fmt.Sprintf("node=%d raftkv: leader changed", victim),
		lead + "raftkv: peer unreachable",
		lead + "raftkv: peer reachable again",
	} {
		waitFor(t, 10*time.Second, want, func() bool { return h.has(want) })
	}
	// A learner added now needs a snapshot: the log was compacted.
	waitFor(t, 10*time.Second, "a compaction", func() bool { return l.Status().LogFirst > 1 })
	tn := c.listen(4)
	c.mustDo(func(ctx context.Context, n *Node) error { return n.AddLearner(ctx, 4, tn.addr) })
	c.start(4, true)
	for _, want := range []string{lead + "raftkv: snapshot sent", "node=4 raftkv: snapshot received", "node=4 raftkv: installed a snapshot"} {
		waitFor(t, 30*time.Second, want, func() bool { return h.has(want) })
	}
	if m := l.Metrics(); m.LeaderChanges == 0 || m.Elections == 0 {
		t.Fatalf("leader's metrics: %+v", m)
	}
}

// A new leader checks a membership change against the membership as of
// its whole log: the removal of the last leader, committed under it but
// not yet applied by the new one, makes re-adding that ID ErrRemovedID
// (after ErrConfChangePending while the removal is not applied), never
// ErrMemberExists. Delayed messages widen the window between an election
// and the new leader's first commit.
func TestNewLeaderChecksWholeLog(t *testing.T) {
	c := newCluster(t, 5, nil)
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateKeyspace(ctx, "ks") })
	for range 2 {
		c.faults.set(0, 30*time.Millisecond)
		l := c.leader(10 * time.Second)
		gone := l.ID()
		if err := l.RemoveNode(bg, gone); err != nil && !errors.Is(err, ErrRemoved) && !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("leader %d removing itself: %v", gone, err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			var n *Node
			for _, id := range c.ids() {
				if m := c.tn(id).node(); id != gone && m != nil && m.IsLeader() {
					n = m
				}
			}
			var err error
			if n != nil {
				err = n.AddNode(bg, gone, "127.0.0.1:1")
				if errors.Is(err, ErrRemovedID) {
					break
				}
				if !errors.Is(err, ErrConfChangePending) && !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrProposalDropped) && !errors.Is(err, ErrStopped) {
					t.Fatalf("re-adding removed node %d on the new leader %d: %v", gone, n.ID(), err)
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("re-adding removed node %d: no refusal within 20s (last: %v)", gone, err)
			}
			time.Sleep(time.Millisecond)
		}
		waitFor(t, 10*time.Second, "the old leader to stop", func() bool { return errors.Is(c.tn(gone).node().Err(), ErrRemoved) })
		c.stop(gone)
		c.forget(gone)
		c.faults.set(0, 0)
		c.mustDo(func(ctx context.Context, n *Node) error { return n.Put(ctx, "ks", []byte("k"), []byte("v")) })
	}
}
