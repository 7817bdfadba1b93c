package raftkv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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

// A node added to a running cluster whose log was compacted catches up by
// a snapshot while writes go on, and ends with the same content.
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
	c.mustDo(func(ctx context.Context, n *Node) error { return n.AddNode(ctx, 4, tn.addr) })
	n4 := c.start(4, true)
	c.waitFor(90*time.Second, "node 4 to install a snapshot", func() bool { return n4.Metrics().SnapshotsInstalled > 0 })
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

// Removing the leader: it steps down, the others elect a new one.
func TestRemoveLeader(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateKeyspace(ctx, "ks") })
	l := c.leader(5 * time.Second)
	id := l.ID()
	if err := l.RemoveNode(bg, id); err != nil && !errors.Is(err, ErrRemoved) && !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("leader removing itself: %v", err)
	}
	waitFor(t, 10*time.Second, "the old leader to stop", func() bool { return errors.Is(l.Err(), ErrRemoved) })
	c.stop(id)
	c.forget(id)
	c.mustDo(func(ctx context.Context, n *Node) error { return n.Put(ctx, "ks", []byte("k"), []byte("v")) })
	c.converge(10 * time.Second)
}
