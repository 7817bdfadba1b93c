package raftkv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/kvbuf/kvbuf"
)

func TestClusterBasic(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateKeyspace(ctx, "users") })
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateBitslice(ctx, "live") })
	for i := range 20 {
		c.mustDo(func(ctx context.Context, n *Node) error {
			return n.Put(ctx, "users", fmt.Appendf(nil, "u%02d", i), fmt.Appendf(nil, "v%d", i))
		})
	}
	c.mustDo(func(ctx context.Context, n *Node) error { return n.Delete(ctx, "users", []byte("u03")) })
	c.mustDo(func(ctx context.Context, n *Node) error {
		return n.DeleteRange(ctx, "users", []byte("u10"), []byte("u15"))
	})
	c.mustDo(func(ctx context.Context, n *Node) error { return n.SetBit(ctx, "live", 42, true) })

	l := c.leader(5 * time.Second)
	v, err := l.Get(bg, "users", []byte("u07"), nil)
	if err != nil || string(v) != "v7" {
		t.Fatalf("Get u07 = %q, %v", v, err)
	}
	if _, err := l.Get(bg, "users", []byte("u03"), nil); !errors.Is(err, kvbuf.ErrNotFound) {
		t.Fatalf("Get of a deleted key: %v", err)
	}
	kvs, more, err := l.Scan(bg, "users", []byte("u1"), 0, nil)
	if err != nil || more || len(kvs) != 5 || string(kvs[0].Key) != "u15" {
		t.Fatalf("Scan u1 = %v %v %v", kvs, more, err)
	}
	kvs, more, err = l.Scan(bg, "users", nil, 3, nil)
	if err != nil || !more || len(kvs) != 3 {
		t.Fatalf("Scan limit 3 = %v %v %v", kvs, more, err)
	}
	if on, err := l.GetBit(bg, "live", 42, nil); err != nil || !on {
		t.Fatalf("GetBit 42 = %v, %v", on, err)
	}
	// Followers: writes refused with the leader's name, linearizable reads
	// served, stale reads eventually current.
	for _, n := range c.running() {
		if n == l {
			continue
		}
		err := n.Put(bg, "users", []byte("x"), []byte("y"))
		var nl *NotLeaderError
		if !errors.As(err, &nl) || nl.Leader != l.ID() || nl.Addr != c.tn(l.ID()).addr {
			t.Fatalf("Put on follower %d: %v", n.ID(), err)
		}
		if v, err := n.Get(bg, "users", []byte("u19"), nil); err != nil || string(v) != "v19" {
			t.Fatalf("linearizable Get on follower %d = %q, %v", n.ID(), v, err)
		}
		if _, err := n.Get(bg, "users", []byte("u19"), &ReadOptions{Stale: true}); err != nil {
			t.Fatalf("stale Get on follower %d: %v", n.ID(), err)
		}
	}
	c.converge(10 * time.Second)
}

// Bad input is refused with typed errors, kvbuf's where it has one: the
// engine checks each write as it applies it (the one check of a key),
// alike on every node, and a refused write changes nothing. A write larger
// than any the engine admits is refused before it is proposed.
func TestWriteBadInput(t *testing.T) {
	c := newCluster(t, 1, nil)
	l := c.leader(5 * time.Second)
	if err := l.CreateKeyspace(bg, "users"); err != nil {
		t.Fatal(err)
	}
	if err := l.CreateBitslice(bg, "bits"); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		err  error
		want error
	}{
		"unknown keyspace":     {l.Put(bg, "nope", []byte("k"), []byte("v")), ErrUnknownKeyspace},
		"unknown bitslice":     {l.SetBit(bg, "nope", 1, true), ErrUnknownBitslice},
		"empty key":            {l.Put(bg, "users", nil, []byte("v")), kvbuf.ErrEmptyKey},
		"oversize value":       {l.Put(bg, "users", []byte("k"), bytes.Repeat([]byte("v"), (1<<20)+1)), kvbuf.ErrValueTooLarge},
		"oversize key":         {l.Delete(bg, "users", bytes.Repeat([]byte("k"), 5000)), kvbuf.ErrKeyTooLarge},
		"bad range":            {l.DeleteRange(bg, "users", []byte("b"), []byte("a")), kvbuf.ErrBadRange},
		"bad keyspace name":    {l.CreateKeyspace(bg, "a/b"), kvbuf.ErrBadName},
		"bad bitslice name":    {l.CreateBitslice(bg, ""), kvbuf.ErrBadName},
		"bit of a keyspace":    {l.SetBit(bg, "users", 1, true), ErrUnknownBitslice},
		"bit out of range":     {l.SetBit(bg, "bits", 1<<40, true), kvbuf.ErrOutOfRange},
		"unknown read":         {func() error { _, err := l.Get(bg, "nope", []byte("k"), nil); return err }(), ErrUnknownKeyspace},
		"unknown bit read":     {func() error { _, err := l.GetBit(bg, "nope", 1, nil); return err }(), ErrUnknownBitslice},
		"unknown scan":         {func() error { _, _, err := l.Scan(bg, "nope", nil, 0, nil); return err }(), ErrUnknownKeyspace},
		"empty key read":       {func() error { _, err := l.Get(bg, "users", nil, nil); return err }(), kvbuf.ErrEmptyKey},
		"add node 0":           {l.AddNode(bg, 0, "127.0.0.1:1"), kvbuf.ErrBadOptions},
		"add node bad address": {l.AddNode(bg, 9, "nowhere"), kvbuf.ErrBadOptions},
		"remove node 0":        {l.RemoveNode(bg, 0), kvbuf.ErrBadOptions},
		"cancelled read": {func() error {
			ctx, cancel := context.WithCancel(bg)
			cancel()
			_, err := l.Get(ctx, "users", []byte("k"), nil)
			return err
		}(), context.Canceled},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", name, c.err, c.want)
		}
	}
	// Nothing refused was written.
	if _, err := l.Get(bg, "users", []byte("k"), nil); !errors.Is(err, kvbuf.ErrNotFound) {
		t.Errorf("a refused write left k: %v", err)
	}
	if ks := l.Keyspaces(); !slices.Equal(ks, []string{"users"}) {
		t.Errorf("keyspaces %v", ks)
	}
	// A write no engine limit admits is not proposed.
	before := l.Status().Commit
	huge := bytes.Repeat([]byte("v"), l.maxPayload+1)
	if err := l.Put(bg, "users", []byte("k"), huge); !errors.Is(err, kvbuf.ErrValueTooLarge) {
		t.Errorf("a value of %d bytes: %v", len(huge), err)
	}
	if err := l.Delete(bg, "users", huge); !errors.Is(err, kvbuf.ErrKeyTooLarge) {
		t.Errorf("a key of %d bytes: %v", len(huge), err)
	}
	if after := l.Status().Commit; after != before {
		t.Errorf("commit index went from %d to %d: an oversized write was proposed", before, after)
	}
}

// Writes queued together are proposed as one entry and applied as one op:
// each gets its own result, a refused one changes nothing and the others
// are applied.
func TestBatchedWrites(t *testing.T) {
	// Election timeouts of 2 s: the leader's loop is held below, and its
	// followers must not elect another meanwhile.
	c := newCluster(t, 3, func(o *Options) { o.ElectionTicks = 200 })
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateKeyspace(ctx, "ks") })
	l := c.leader(10 * time.Second)
	// Hold the Ready loop while the writes queue up (released on every
	// path: a held loop would keep the cluster from closing).
	release := make(chan struct{})
	var releaseOnce sync.Once
	unhold := func() { releaseOnce.Do(func() { close(release) }) }
	defer unhold()
	held := make(chan struct{})
	if err := l.enqueue(bg, func(*raft.RawNode) { close(held); <-release }); err != nil {
		t.Fatal(err)
	}
	<-held // the loop runs the call: the writes below queue behind it
	before := l.Status().LogLast
	const writes = 40
	errs := make([]error, writes)
	var finished atomic.Int32
	var wg sync.WaitGroup
	for i := range writes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Appendf(nil, "k%02d", i)
			if i%4 == 3 {
				key = nil // refused by the engine: empty key
			}
			errs[i] = l.Put(bg, "ks", key, fmt.Appendf(nil, "v%d", i))
			finished.Add(1)
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.propMu.Lock()
		queued := len(l.props)
		l.propMu.Unlock()
		if queued == writes {
			break
		}
		if time.Now().After(deadline) {
			unhold()
			wg.Wait()
			t.Fatalf("%d of %d writes queued within 10 s (%d returned first: %v)", queued, writes, finished.Load(), errs)
		}
		time.Sleep(time.Millisecond)
	}
	unhold()
	wg.Wait()
	for i, err := range errs {
		if i%4 == 3 {
			if !errors.Is(err, kvbuf.ErrEmptyKey) {
				t.Errorf("write %d (empty key): %v", i, err)
			}
		} else if err != nil {
			t.Errorf("write %d: %v", i, err)
		}
	}
	// One entry held them all (the leader may have appended a meta entry
	// too).
	if n := l.Status().LogLast - before; n < 1 || n > 2 {
		t.Errorf("%d entries for %d writes queued together", n, writes)
	}
	kvs, _, err := l.Scan(bg, "ks", nil, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(kvs) != writes-writes/4 {
		t.Errorf("%d keys after %d writes, %d of them refused", len(kvs), writes, writes/4)
	}
	c.converge(10 * time.Second)
}

// Close under load is a clean stop: no error recorded, Close returns nil,
// and every later call says ErrStopped.
func TestCloseUnderLoad(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateKeyspace(ctx, "ks") })
	w := startWriter(c, "ks")
	waitFor(t, 20*time.Second, "writes", func() bool { return w.count() > 50 })
	for _, id := range c.ids() {
		n := c.tn(id).cur.Swap(nil)
		if err := n.Close(); err != nil {
			t.Errorf("Close of node %d under load: %v", id, err)
		}
		if err := n.Err(); err != nil {
			t.Errorf("node %d recorded %v on a clean Close", id, err)
		}
		if err := n.Put(bg, "ks", []byte("k"), []byte("v")); !errors.Is(err, ErrStopped) {
			t.Errorf("Put after Close: %v", err)
		}
		if _, err := n.Get(bg, "ks", []byte("k"), nil); !errors.Is(err, ErrStopped) {
			t.Errorf("Get after Close: %v", err)
		}
		if st := n.Status(); st.State != "stopped" {
			t.Errorf("status after Close: %+v", st)
		}
	}
	w.finish()
}

// Node.Write queues its writes together and in order: they share raft
// entries, are applied in their order (the last put of a key wins, a
// delete after a put removes it), and each has its own result.
func TestWritePipelined(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateKeyspace(ctx, "ks") })
	l := c.leader(10 * time.Second)
	var ws []Write
	for i := range 300 {
		ws = append(ws, Write{Keyspace: "ks", Key: fmt.Appendf(nil, "k%03d", i%100), Value: fmt.Appendf(nil, "v%d", i)})
	}
	ws = append(ws,
		Write{Keyspace: "ks", Key: []byte("k000"), Delete: true},
		Write{Keyspace: "ks", Key: nil, Value: []byte("refused")},
		Write{Keyspace: "nope", Key: []byte("k"), Value: []byte("refused")},
		Write{Keyspace: "ks", Key: []byte("last"), Value: []byte("applied")},
	)
	before := l.Status().LogLast
	errs := l.Write(bg, ws)
	for i, err := range errs {
		switch {
		case i == len(ws)-3:
			if !errors.Is(err, kvbuf.ErrEmptyKey) {
				t.Errorf("write %d (empty key): %v", i, err)
			}
		case i == len(ws)-2:
			if !errors.Is(err, ErrUnknownKeyspace) {
				t.Errorf("write %d (unknown keyspace): %v", i, err)
			}
		case err != nil:
			t.Errorf("write %d: %v", i, err)
		}
	}
	if n := l.Status().LogLast - before; n > 3 {
		t.Errorf("%d entries for %d writes queued together", n, len(ws))
	}
	kvs, _, err := l.Scan(bg, "ks", nil, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	if len(got) != 100 || got["last"] != "applied" {
		t.Errorf("%d keys, last=%q", len(got), got["last"])
	}
	if _, ok := got["k000"]; ok {
		t.Errorf("k000 was deleted after its puts, but holds %q", got["k000"])
	}
	for i := 1; i < 100; i++ {
		if k, want := fmt.Sprintf("k%03d", i), fmt.Sprintf("v%d", 200+i); got[k] != want {
			t.Errorf("%s = %q, want %q (the last put)", k, got[k], want)
		}
	}
	// A follower refuses them all.
	for _, id := range c.ids() {
		if n := c.tn(id).node(); n != nil && n != l {
			for i, err := range n.Write(bg, ws[:3]) {
				if !errors.Is(err, ErrNotLeader) {
					t.Errorf("write %d on a follower: %v", i, err)
				}
			}
			break
		}
	}
	c.converge(10 * time.Second)
}

// Close cancels the node's context before it closes stopc; an apply that
// fails with the cancellation in between is Close's doing, not a failure
// the node records (TestCloseUnderLoad hit it about once in a few runs;
// the hook holds stop in that window).
func TestCloseCancelsApply(t *testing.T) {
	var armed atomic.Bool
	inApply, applyDone := make(chan struct{}), make(chan struct{})
	hooks := &testHooks{
		newSM: func(dir string) (stateMachine, error) {
			sm, err := openEngineSM(dir, nil)
			if err != nil {
				return nil, err
			}
			return &blockingSM{stateMachine: sm, armed: &armed, in: inApply, done: applyDone}, nil
		},
		afterCancel: func() {
			if armed.Load() {
				<-applyDone // the apply failed with the cancellation: stopc is not closed yet
			}
		},
	}
	c := newClusterHooks(t, 1, nil, hooks)
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateKeyspace(ctx, "ks") })
	l := c.leader(10 * time.Second)
	armed.Store(true)
	errc := make(chan error, 1)
	go func() { errc <- l.Put(bg, "ks", []byte("k"), []byte("v")) }()
	<-inApply
	n := c.tn(l.ID()).cur.Swap(nil)
	if err := n.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := n.Err(); err != nil {
		t.Errorf("the node recorded %v on a clean Close", err)
	}
	if err := <-errc; !errors.Is(err, ErrOutcomeUnknown) {
		t.Errorf("the write cut off by Close: %v, want ErrOutcomeUnknown", err)
	}
}

// blockingSM's apply, once armed, waits for the node's context to end and
// fails with it, as the engine's writes do.
type blockingSM struct {
	stateMachine
	armed    *atomic.Bool
	in, done chan struct{}
}

func (s *blockingSM) apply(ctx context.Context, index uint64, cmds []*command, results []error) error {
	if !s.armed.Load() {
		return s.stateMachine.apply(ctx, index, cmds, results)
	}
	close(s.in)
	<-ctx.Done()
	defer close(s.done)
	return errorf("apply entry %d: %w", index, ctx.Err())
}

// fail records the error before stop closes stopc; a caller that saw Err
// return ErrRemoved in between must get ErrRemoved from every call and
// "removed" from Status (TestRemoveAndReaddWiped once found the removed
// follower answering a write with "not the leader" there). The hook holds
// stop in that window.
func TestRemovedRefusesBeforeStop(t *testing.T) {
	var node atomic.Pointer[Node]
	type seen struct {
		put   error
		state string
	}
	seenc := make(chan seen, 1)
	hooks := &testHooks{
		afterCancel: func() {
			n := node.Load()
			if n == nil {
				return
			}
			ctx, cancel := context.WithTimeout(bg, 2*time.Second)
			defer cancel()
			seenc <- seen{put: n.Put(ctx, "ks", []byte("k"), []byte("v")), state: n.Status().State}
		},
	}
	c := newClusterHooks(t, 1, nil, hooks)
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateKeyspace(ctx, "ks") })
	l := c.leader(10 * time.Second)
	node.Store(l)
	l.removedByPeer(2)
	s := <-seenc
	if !errors.Is(s.put, ErrRemoved) {
		t.Errorf("a write after Err returned ErrRemoved, before stopc closed: %v", s.put)
	}
	if s.state != "removed" {
		t.Errorf("Status after Err returned ErrRemoved, before stopc closed: state %q", s.state)
	}
}
