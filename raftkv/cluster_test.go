package raftkv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

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

// Bad input is refused before anything is proposed, with typed errors.
func TestWriteBadInput(t *testing.T) {
	c := newCluster(t, 1, nil)
	l := c.leader(5 * time.Second)
	if err := l.CreateKeyspace(bg, "users"); err != nil {
		t.Fatal(err)
	}
	c.settle(10 * time.Second)
	before := l.Status().Commit
	big := bytes.Repeat([]byte("v"), (1<<20)+1)
	for name, c := range map[string]struct {
		err  error
		want error
	}{
		"unknown keyspace":  {l.Put(bg, "nope", []byte("k"), []byte("v")), ErrUnknownKeyspace},
		"unknown bitslice":  {l.SetBit(bg, "nope", 1, true), ErrUnknownBitslice},
		"empty key":         {l.Put(bg, "users", nil, []byte("v")), kvbuf.ErrEmptyKey},
		"oversize value":    {l.Put(bg, "users", []byte("k"), big), kvbuf.ErrValueTooLarge},
		"oversize key":      {l.Delete(bg, "users", bytes.Repeat([]byte("k"), 5000)), kvbuf.ErrKeyTooLarge},
		"bad range":         {l.DeleteRange(bg, "users", []byte("b"), []byte("a")), kvbuf.ErrBadRange},
		"bad keyspace name": {l.CreateKeyspace(bg, "a/b"), kvbuf.ErrBadName},
		"bad bitslice name": {l.CreateBitslice(bg, ""), kvbuf.ErrBadName},
		"bit out of range":  {l.SetBit(bg, "users", 1<<40, true), ErrUnknownBitslice},
		"unknown read":      {func() error { _, err := l.Get(bg, "nope", []byte("k"), nil); return err }(), ErrUnknownKeyspace},
		"unknown bit read":  {func() error { _, err := l.GetBit(bg, "nope", 1, nil); return err }(), ErrUnknownBitslice},
		"unknown scan":      {func() error { _, _, err := l.Scan(bg, "nope", nil, 0, nil); return err }(), ErrUnknownKeyspace},
		"add node 0":        {l.AddNode(bg, 0, "127.0.0.1:1"), ErrBadOptions},
		"add node bad addr": {l.AddNode(bg, 9, "nowhere"), ErrBadOptions},
		"remove node 0":     {l.RemoveNode(bg, 0), ErrBadOptions},
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
	if err := l.CreateBitslice(bg, "bits"); err != nil {
		t.Fatal(err)
	}
	if err := l.SetBit(bg, "bits", 1<<40, true); !errors.Is(err, kvbuf.ErrOutOfRange) {
		t.Errorf("bit past MaxBits: %v", err)
	}
	// Only the two creates were proposed (plus nothing else).
	if after := l.Status().Commit; after != before+1 {
		t.Errorf("commit index went from %d to %d: a refused write was proposed", before, after)
	}
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
