package raftkv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kvbuf/kvbuf/internal/testutil"
)

var bg = context.Background()

// childRoles are the roles this test binary plays when re-executed (see
// crash_test.go).
var childRoles = testutil.Roles{}

func TestMain(m *testing.M) {
	if code, ok := childRoles.RunChild(); ok {
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}

// faults is an http.RoundTripper for the transport that drops, delays and
// partitions requests between nodes (by the transport's From and To
// headers).
type faults struct {
	base http.RoundTripper

	mu    sync.Mutex
	rng   *rand.Rand
	drop  float64            // probability of dropping a request
	delay time.Duration      // requests wait up to this long (uniform)
	cut   map[[2]uint64]bool // directed links that drop everything
	down  map[uint64]bool    // nodes whose every link drops everything (TestRaftPowerCut's dead nodes; partition leaves them)

	dropped atomic.Int64
}

var errInjected = errors.New("injected network fault")

func newFaults(seed uint64) *faults {
	return &faults{
		base: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 8, DisableCompression: true},
		rng:  rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		cut:  map[[2]uint64]bool{},
		down: map[uint64]bool{},
	}
}

// setDown cuts (or restores) every link of node id, apart from partitions.
func (f *faults) setDown(id uint64, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if down {
		f.down[id] = true
	} else {
		delete(f.down, id)
	}
}

func (f *faults) RoundTrip(req *http.Request) (*http.Response, error) {
	from, _ := strconv.ParseUint(req.Header.Get(headerFrom), 10, 64)
	to, _ := strconv.ParseUint(req.Header.Get(headerTo), 10, 64)
	f.mu.Lock()
	cut := f.cut[[2]uint64{from, to}] || f.down[from] || f.down[to]
	drop := f.drop > 0 && f.rng.Float64() < f.drop
	var d time.Duration
	if f.delay > 0 {
		d = time.Duration(f.rng.Int64N(int64(f.delay)))
	}
	f.mu.Unlock()
	if cut || drop {
		f.dropped.Add(1)
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errInjected
	}
	if d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-req.Context().Done():
			t.Stop()
			if req.Body != nil {
				req.Body.Close()
			}
			return nil, req.Context().Err()
		}
	}
	if req.URL.Path == pathStream && req.Body != nil {
		// A stream lives for many batches: the faults apply to each (the
		// transport writes one batch per write, which the request reads
		// at once). A dropped batch or a cut link ends the stream, as a
		// broken connection would.
		req.Body = &faultyBody{f: f, from: from, to: to, body: req.Body}
	}
	return f.base.RoundTrip(req)
}

// faultyBody is a stream's body under faults: each read (a batch of
// messages) may be delayed, dropped (which fails the stream) or cut off by
// a partition.
type faultyBody struct {
	f        *faults
	from, to uint64
	body     io.ReadCloser
}

func (b *faultyBody) Read(p []byte) (int, error) {
	// The faults are decided once a batch arrived: a read that began
	// before a partition must not deliver after it.
	n, err := b.body.Read(p)
	f := b.f
	f.mu.Lock()
	cut := f.cut[[2]uint64{b.from, b.to}] || f.down[b.from] || f.down[b.to]
	drop := f.drop > 0 && f.rng.Float64() < f.drop
	var d time.Duration
	if f.delay > 0 {
		d = time.Duration(f.rng.Int64N(int64(f.delay)))
	}
	f.mu.Unlock()
	if cut || drop {
		f.dropped.Add(1)
		return 0, errInjected
	}
	time.Sleep(d)
	return n, err
}

func (b *faultyBody) Close() error { return b.body.Close() }

func (f *faults) set(drop float64, delay time.Duration) {
	f.mu.Lock()
	f.drop, f.delay = drop, delay
	f.mu.Unlock()
}

// partition cuts every link between nodes of different groups.
func (f *faults) partition(groups ...[]uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.cut)
	for i, g := range groups {
		for j, h := range groups {
			if i == j {
				continue
			}
			for _, a := range g {
				for _, b := range h {
					f.cut[[2]uint64{a, b}] = true
				}
			}
		}
	}
}

func (f *faults) heal() { f.partition() }

func (f *faults) close() {
	if t, ok := f.base.(*http.Transport); ok {
		t.CloseIdleConnections()
	}
}

// testNode is one member of a test cluster: a listener and HTTP server
// that live as long as the test (so the address survives restarts), and
// the Node behind it while it runs.
type testNode struct {
	id   uint64
	dir  string
	addr string
	srv  *http.Server
	cur  atomic.Pointer[Node]
	// extra serves other paths (the cmd tests' client API).
}

func (tn *testNode) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := tn.cur.Load()
	if n == nil {
		// Close the connection: a stream's body does not end, and the
		// server would otherwise read it before answering.
		w.Header().Set("Connection", "close")
		http.Error(w, "node down", http.StatusServiceUnavailable)
		return
	}
	n.Handler().ServeHTTP(w, r)
}

func (tn *testNode) node() *Node { return tn.cur.Load() }

// cluster is an in-process cluster on loopback.
type cluster struct {
	t      testing.TB
	faults *faults
	client *http.Client
	mu     sync.Mutex
	nodes  map[uint64]*testNode // guarded by mu (use tn, ids, rename)
	peers  map[uint64]string    // the initial members
	srvs   []*http.Server       // every server, shut down by close
	tune   func(o *Options)
	hooks  *testHooks
	logw   io.Writer

	// installed counts snapshots installed by nodes since stopped.
	installed atomic.Uint64
}

// newCluster starts n nodes (IDs 1..n) with fast ticks.
func newCluster(t testing.TB, n int, tune func(o *Options)) *cluster {
	t.Helper()
	return newClusterHooks(t, n, tune, nil)
}

// newClusterHooks is newCluster of nodes opened with hooks.
func newClusterHooks(t testing.TB, n int, tune func(o *Options), hooks *testHooks) *cluster {
	t.Helper()
	c := &cluster{t: t, faults: newFaults(rand.Uint64()), nodes: map[uint64]*testNode{}, peers: map[uint64]string{}, tune: tune, hooks: hooks}
	c.client = &http.Client{Transport: c.faults}
	if os.Getenv("RAFTKV_TEST_LOG") != "" {
		c.logw = os.Stderr
	}
	for id := uint64(1); id <= uint64(n); id++ {
		tn := c.listen(id)
		c.peers[id] = tn.addr
	}
	for id := uint64(1); id <= uint64(n); id++ {
		c.start(id, false)
	}
	t.Cleanup(c.close)
	return c
}

// tn returns node id's test node.
func (c *cluster) tn(id uint64) *testNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

// ids returns the IDs of the cluster's test nodes, sorted.
func (c *cluster) ids() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.nodes))
}

// rename makes node from's server and directory node to's (a node wiped
// and re-added under a new ID at the same address).
func (c *cluster) rename(from, to uint64) *testNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	tn := c.nodes[from]
	delete(c.nodes, from)
	tn.id = to
	c.nodes[to] = tn
	return tn
}

// forget stops node id and drops it from the cluster.
func (c *cluster) forget(id uint64) {
	c.stop(id)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.nodes, id)
}

// listen makes node id's directory and server.
func (c *cluster) listen(id uint64) *testNode {
	c.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	tn := &testNode{id: id, dir: filepath.Join(c.t.TempDir(), fmt.Sprintf("n%d", id)), addr: ln.Addr().String()}
	tn.srv = &http.Server{Handler: tn, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = tn.srv.Serve(ln) }()
	c.mu.Lock()
	c.nodes[id] = tn
	c.srvs = append(c.srvs, tn.srv)
	c.mu.Unlock()
	return tn
}

func (c *cluster) options(id uint64, join bool) *Options {
	o := &Options{
		ID:             id,
		Peers:          c.peers,
		Dir:            c.tn(id).dir,
		Join:           join,
		TickInterval:   10 * time.Millisecond,
		ElectionTicks:  10,
		HeartbeatTicks: 1,
		ReadIndexRetry: 100 * time.Millisecond,
		SendTimeout:    2 * time.Second,
		Client:         c.client,
	}
	if c.logw != nil {
		o.Logger = slog.New(slog.NewTextHandler(c.logw, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	if c.tune != nil {
		c.tune(o)
	}
	return o
}

// start opens node id (again).
func (c *cluster) start(id uint64, join bool) *Node {
	c.t.Helper()
	n, err := open(c.options(id, join), c.hooks)
	if err != nil {
		c.t.Fatalf("open node %d: %v", id, err)
	}
	c.tn(id).cur.Store(n)
	return n
}

// stop closes node id (as far as its peers see, it died).
func (c *cluster) stop(id uint64) {
	c.t.Helper()
	n := c.tn(id).cur.Swap(nil)
	if n == nil {
		return
	}
	c.installed.Add(n.Metrics().SnapshotsInstalled)
	if err := n.Close(); err != nil && !errors.Is(err, ErrRemoved) {
		c.t.Errorf("close node %d: %v", id, err)
	}
}

// snapshotsInstalled counts the snapshots every node installed.
func (c *cluster) snapshotsInstalled() uint64 {
	n := c.installed.Load()
	for _, node := range c.running() {
		n += node.Metrics().SnapshotsInstalled
	}
	return n
}

func (c *cluster) close() {
	for _, id := range c.ids() {
		c.stop(id)
	}
	c.mu.Lock()
	srvs := c.srvs
	c.mu.Unlock()
	for _, srv := range srvs {
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		_ = srv.Shutdown(ctx)
		cancel()
	}
	c.faults.close()
}

// leader waits for a leader among the running nodes and returns it.
func (c *cluster) leader(timeout time.Duration) *Node {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, id := range c.ids() {
			if n := c.tn(id).node(); n != nil && n.IsLeader() {
				return n
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.t.Fatalf("no leader within %v", timeout)
	return nil
}

// do runs a write on the leader, retrying while leadership moves, until it
// succeeds or timeout passes.
func (c *cluster) do(timeout time.Duration, write func(ctx context.Context, n *Node) error) error {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		n := c.leader(time.Until(deadline))
		ctx, cancel := context.WithTimeout(bg, time.Until(deadline))
		err = write(ctx, n)
		cancel()
		if err == nil || !(errors.Is(err, ErrNotLeader) || errors.Is(err, ErrProposalDropped) || errors.Is(err, ErrStopped)) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	return err
}

// mustDo is do that fails the test on error.
func (c *cluster) mustDo(write func(ctx context.Context, n *Node) error) {
	c.t.Helper()
	if err := c.do(20*time.Second, write); err != nil {
		c.t.Fatal(err)
	}
}

// running returns the running nodes.
func (c *cluster) running() []*Node {
	var out []*Node
	for _, id := range c.ids() {
		if n := c.tn(id).node(); n != nil {
			out = append(out, n)
		}
	}
	return out
}

// converge waits until every running node has applied the leader's commit
// index and returns the digests: they must all be equal.
func (c *cluster) converge(timeout time.Duration) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(bg, timeout)
	defer cancel()
	// A linearizable read on the leader fixes an index every node must reach.
	l := c.leader(timeout)
	if err := l.linearize(ctx, nil); err != nil {
		c.t.Fatalf("converge: read index on the leader: %v", err)
	}
	target := l.appliedNow.Load()
	for {
		type sum struct {
			index  uint64
			digest string
		}
		sums := map[uint64]sum{}
		same := true
		var first *sum
		for _, n := range c.running() {
			if err := n.WaitApplied(ctx, target); err != nil {
				c.t.Fatalf("node %d did not reach index %d: %v (status %+v)", n.id, target, err, n.Status())
			}
			idx, d, err := n.Digest(ctx)
			if err != nil {
				c.t.Fatalf("digest of node %d: %v", n.id, err)
			}
			s := sum{idx, d}
			sums[n.id] = s
			if first == nil {
				first = &s
			} else if s.index != first.index {
				same = false
			}
			target = max(target, idx)
		}
		if !same {
			continue // a node applied more meanwhile (a new leader's empty entry)
		}
		for id, s := range sums {
			if s.digest != first.digest {
				c.t.Fatalf("nodes differ at index %d: %v (node %d)", s.index, sums, id)
			}
		}
		return first.digest
	}
}

// settle waits until the cluster has its ID and has recorded the
// incarnation of every running member (the meta entries the leader
// proposes after an election), so that a test counting entries counts
// only its own.
func (c *cluster) settle(timeout time.Duration) {
	c.t.Helper()
	c.waitFor(timeout, "the cluster ID and incarnations to be recorded", func() bool {
		for _, n := range c.running() {
			if n.cluster.Load() == 0 {
				return false
			}
			for _, m := range c.running() {
				if n.view.Load().incarnations[m.id] != m.incarnation {
					return false
				}
			}
		}
		return true
	})
}

// peerHeaders returns transport headers of a request from node from (its
// incarnation if it runs in c, else 1) to node n.
func (c *cluster) peerHeaders(n *Node, from uint64) map[string]string {
	inc := uint64(1)
	if tn := c.tn(from); tn != nil && tn.node() != nil {
		inc = tn.node().incarnation
	}
	return map[string]string{
		headerCluster:       strconv.FormatUint(n.cluster.Load(), 16),
		headerBootstrap:     strconv.FormatUint(n.bootstrap.Load(), 16),
		headerFrom:          strconv.FormatUint(from, 10),
		headerTo:            strconv.FormatUint(n.id, 10),
		headerIncarnation:   strconv.FormatUint(inc, 16),
		headerToIncarnation: strconv.FormatUint(n.incarnation, 16),
	}
}
