package raftkv

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/zeebo/xxh3"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/internal/enginedir"
)

// Node is one raft peer whose state machine is a kvbuf engine. Open starts
// it; serve Handler on the node's address so that its peers reach it; Close
// stops it. All methods are safe for concurrent use.
//
// See the package documentation for the applied index, the durable
// watermark, log compaction and snapshots.
type Node struct {
	opts *Options
	id   uint64
	dir  string
	log  *slog.Logger
	lock io.Closer // the data directory's lock
	fs   vfs.FS    // the file system of the log store, IDENTITY and LOCK (nodeFS)
	ls   *logStore
	rn   *raft.RawNode // the Ready loop's alone (see loop.go)
	tr   *transport

	calls chan loopCall // work for the Ready loop
	// appends is the queue to the append loop (appendloop.go); nil if
	// Readies are handled synchronously.
	appends *appendQueue

	// The identity (see identity): the cluster ID (0 until assigned), the
	// bootstrap hash (0 while a joining node has not heard from its
	// cluster) and this directory's incarnation.
	cluster     atomic.Uint64
	bootstrap   atomic.Uint64
	incarnation uint64
	identMu     sync.Mutex // serializes writes of the identity

	// engMu guards swapping the state machine (snapshot install, Close):
	// readers hold it shared while they read the engine. The Ready loop is
	// the only writer of the state machine and the only swapper.
	engMu   sync.RWMutex
	sm      stateMachine
	engName string // the live engine's directory name under dir
	hooks   *testHooks

	// Writes queued for the Ready loop (see propose); propSpare and
	// propBatch are the loop's.
	propMu     sync.Mutex
	props      []*proposal
	propKick   chan struct{}
	propSpare  []*proposal
	propBatch  []*proposal
	maxPayload int // checkSize's bound

	// Owned by the Ready loop.
	applied    uint64
	conf       *raftpb.ConfState
	peers      map[uint64]string
	gone       []uint64          // removed IDs, sorted
	incs       map[uint64]uint64 // the members' incarnations (copied on write)
	metaTerm   uint64            // the term metaSent is of
	metaSent   map[uint64]bool   // meta commands proposed this term (0: the cluster ID)
	ccProposed []uint64          // conf changes proposed since the last Ready
	// confIndex bounds the index of the last membership change in the
	// log (see trackConfIndex): the membership the leader checks a change
	// against is current only once applied reaches it.
	confIndex uint64
	acks      []ack      // results to deliver after the state machine commits
	cmds      []*command // applyNormal's scratch
	results   []error

	seenMu sync.Mutex
	seen   map[uint64]uint64 // incarnations heard by the leader (noteIncarnation)

	logMu  sync.Mutex
	logged map[string]time.Time // see logEvery

	appliedMu  sync.Mutex
	appliedNow atomic.Uint64
	appliedCh  chan struct{} // closed and replaced when applied advances

	// What raft's last Ready said, for readers off the loop.
	lead       atomic.Uint64
	leader     atomic.Bool
	raftTerm   atomic.Uint64
	raftCommit atomic.Uint64
	raftRole   atomic.Int32 // raft.StateType

	removed atomic.Bool
	view    atomic.Pointer[memberView] // see publishMembers

	waitMu  sync.Mutex
	waiters map[uint64]chan error
	reqBase uint64
	reqSeq  atomic.Uint64

	readMu     sync.Mutex
	readNext   *readRound
	readKick   chan struct{}
	readStates chan raft.ReadState

	snapReqs chan chan snapReply
	snapBusy sync.Mutex // one snapshot received at a time
	switchMu sync.Mutex // orders a received engine's rename against the switch to it

	ctx      context.Context // cancelled by Close and by a fatal error
	cancel   context.CancelFunc
	stopc    chan struct{} // closed once the loops must stop
	stopOnce sync.Once
	loops    sync.WaitGroup
	inflight sync.WaitGroup // snapshot receives in progress
	closing  sync.RWMutex   // held shared by inflight.Add, exclusively by Close

	errMu sync.Mutex
	err   error // the fatal error that stopped the node

	closeOnce sync.Once
	closeErr  error

	handlerOnce sync.Once
	handler     http.Handler
	shutdownMu  sync.Mutex
	shutdowns   map[*http.Server]context.Context // see serverShutdown

	m metrics
}

// metrics are the node's counters (see Metrics).
type metrics struct {
	restartWatermark, restartLast, restartApplied uint64 // at Open
	redelivered, reapplied                        atomic.Uint64
	applied                                       atomic.Uint64
	snapshotsSent, snapshotsFailed                atomic.Uint64
	snapshotsReceived, snapshotsInstalled         atomic.Uint64
	compactions                                   atomic.Uint64
	proposalsDropped                              atomic.Uint64
	leaderChanges, elections                      atomic.Uint64
	readRounds, readRetries                       atomic.Uint64
}

type readRound struct {
	done    chan struct{}
	index   uint64
	err     error
	waiters atomic.Int64
}

type snapReply struct {
	snap  *kvbuf.Snapshot
	index uint64
	err   error
}

// bootstrapHash derives the bootstrap hash from the token and the initial
// members, so that every node bootstrapped with the same flags computes the
// same: it names the cluster until its first leader assigns the cluster ID.
func bootstrapHash(token string, peers map[uint64]string) uint64 {
	var b strings.Builder
	b.WriteString(token)
	for _, id := range slices.Sorted(maps.Keys(peers)) {
		fmt.Fprintf(&b, "\x00%d=%s", id, peers[id])
	}
	if h := xxh3.HashString(b.String()); h != 0 {
		return h
	}
	return 1
}

// engineDirName is the directory of the engine installed from the snapshot
// at index (the first engine is initialEngine).
func engineDirName(index uint64) string { return fmt.Sprintf("engine-%020d", index) }

const (
	initialEngine = "engine"
	stagingSuffix = ".staging"
	logDir        = "log"
)

// Open opens (creating if needed) the data directory opts.Dir and starts
// the node: it restarts raft from min(engine watermark, HardState.Commit),
// so that entries the engine already made durable are redelivered at most
// as cheap no-ops and none the engine lost is skipped (etcd-io/etcd#10217).
// A directory with no raft state bootstraps a new cluster of opts.Peers
// (or, with opts.Join, waits to be contacted by the cluster that added it).
// The node needs its Handler served on its address to hear its peers.
//
// Errors: kvbuf.ErrBadOptions; kvbuf.ErrLocked if another node has the directory
// open; ErrClusterMismatch for a directory of another
// cluster, token or node ID; ErrRemoved for a node removed from its
// cluster; ErrDataDir for a directory whose engine and log do not fit;
// ErrCorruptLog (matching kvbuf.ErrCorrupt) for a damaged log store record; the engine's and pebble's open
// errors (kvbuf.ErrCorrupt, ...).
func Open(opts *Options) (*Node, error) { return open(opts, nil) }

// testHooks change how a node is built, for tests and benchmarks only:
// newSM replaces the kvbuf engine as the state machine (W9's baselines);
// noLogSync writes the raft log without syncs (W9's -w9.nologsync: how
// much of a write's cost the log's syncs are; never safe); afterCancel
// widens stop's window (TestCloseCancelsApply).
//
// fs is the file system of the node's own files (the log store, IDENTITY,
// LOCK; the engine directories stay on the OS's): TestRaftPowerCut puts
// them on pebble's crashable MemFS.
type testHooks struct {
	fs        vfs.FS
	newSM     func(dir string) (stateMachine, error)
	noLogSync bool
	syncReady bool // handle Readies synchronously (no AsyncStorageWrites): W9's comparison
	// pendingAppends replaces maxPendingAppends if not 0 (<0: no bound).
	pendingAppends int
	loopSends      bool   // the append loop's responses for peers are sent by the Ready loop
	logMemTable    uint64 // the log store's memtable size (0: storage's default)
	afterCancel    func() // runs in stop, between cancelling the context and closing stopc
	confWait       func() // runs when a membership change begins to wait for a pending one (changeConf)
}

// open is Open with hooks (nil: none).
func open(opts *Options, hooks *testHooks) (*Node, error) {
	o, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	fsys := nodeFS(hooks, o.DirMode)
	if err := mkdirAllDurable(fsys, o.Dir, o.DirMode); err != nil {
		return nil, err
	}
	if hooks != nil && hooks.fs != nil {
		// The engine directories' side of Dir, on the OS's file system.
		if err := os.MkdirAll(o.Dir, o.DirMode); err != nil {
			return nil, errorf("%w", err)
		}
	}
	eo := o.Engine.EnsureDefaults()
	n := &Node{
		opts:       o,
		hooks:      hooks,
		fs:         fsys,
		propKick:   make(chan struct{}, 1),
		maxPayload: enginedir.MaxNameLen + eo.MaxKeySize + eo.MaxValueSize,
		id:         o.ID,
		dir:        o.Dir,
		log:        o.Logger.With("node", o.ID),
		waiters:    map[uint64]chan error{},
		appliedCh:  make(chan struct{}),
		readNext:   &readRound{done: make(chan struct{})},
		readKick:   make(chan struct{}, 1),
		readStates: make(chan raft.ReadState, 64),
		snapReqs:   make(chan chan snapReply),
		stopc:      make(chan struct{}),
		calls:      make(chan loopCall, 4096),
		metaSent:   map[uint64]bool{},
		seen:       map[uint64]uint64{},
		logged:     map[string]time.Time{},
	}
	var rb [8]byte
	_, _ = rand.Read(rb[:])
	n.reqBase = binary.LittleEndian.Uint64(rb[:])
	n.ctx, n.cancel = context.WithCancel(context.Background())
	if err := n.start(); err != nil {
		n.cancel()
		if n.sm != nil {
			_ = n.sm.close()
		}
		if n.ls != nil {
			_ = n.ls.close()
		}
		if n.lock != nil {
			_ = n.lock.Close()
		}
		return nil, err
	}
	return n, nil
}

func (n *Node) start() error {
	o := n.opts
	n.checkDirMode(n.dir, o.DirMode)
	lock, err := n.lockNodeDir()
	if err != nil {
		return err
	}
	n.lock = lock
	id, haveID, err := readIdentity(n.fs, n.dir)
	if err != nil {
		return err
	}
	if haveID {
		if err := n.checkIdentity(id); err != nil {
			return err
		}
	}
	var memTable uint64
	if n.hooks != nil {
		memTable = n.hooks.logMemTable
	}
	ls, err := openLogStoreSized(n.fs, filepath.Join(n.dir, logDir), memTable)
	if err != nil {
		return err
	}
	n.ls = ls
	fresh := ls.empty()
	if !haveID {
		if err := n.newIdentity(fresh); err != nil {
			return err
		}
	} else if id.incarnation == 0 {
		// A directory of the first format: give it an incarnation.
		n.incarnation = randomID()
		if err := n.writeIdentity(n.identity()); err != nil {
			return err
		}
	}
	if removed, err := ls.removed(); err != nil {
		return err
	} else if removed {
		return errorf("%s: node %d: %w", n.dir, n.id, ErrRemoved)
	}
	if err := n.openEngine(); err != nil {
		return err
	}
	trunc, last := ls.bounds()
	hs := ls.hardState()
	wm := n.sm.durable()
	if fresh && wm > 0 {
		return errorf("%s: the engine has data up to op %d but there is no raft log: %w", n.dir, wm, ErrDataDir)
	}
	// raft panics on restart for a commit index outside the log; say what
	// it means first.
	if c := hs.GetCommit(); c > last {
		return errorf("node %d: %s: its commit index %d is past the end of its log (%d): %w; %s",
			n.id, n.dir, c, last, ErrLostState, replaceAdvice(n.id))
	} else if c < trunc {
		return errorf("%s: the commit index %d is below the log's compacted index %d: %w", n.dir, c, trunc, ErrDataDir)
	}
	// A node applies only entries its log has made durable, so an engine
	// ahead of the log means the log lost writes it had synced (or was
	// restored from an older copy than the engine). raft would start, and
	// the node would never catch up: it refuses the leader's snapshots,
	// which are at or below its engine's watermark.
	if wm > last {
		return errorf("node %d: %s: its engine has applied up to index %d but its raft log ends at %d: %w; %s",
			n.id, n.dir, wm, last, ErrLostState, replaceAdvice(n.id))
	}
	applied := min(wm, hs.GetCommit())
	if applied < trunc {
		return errorf("%s: the engine's watermark %d (commit %d) is below the log's compacted index %d: %w", n.dir, wm, hs.GetCommit(), trunc, ErrDataDir)
	}
	mem, ok, err := ls.membershipAt(applied)
	if err != nil {
		return errorf("%s: %w", n.dir, err)
	}
	if !ok {
		mem = membership{conf: &raftpb.ConfState{}, peers: map[uint64]string{}}
	}
	if mem.cluster != 0 && n.cluster.Load() != mem.cluster {
		if cur := n.cluster.Load(); cur != 0 {
			return errorf("%s: the log says cluster %016x, %s says %016x: %w", n.dir, mem.cluster, identityFile, cur, ErrDataDir)
		}
		if err := n.assignCluster(mem.cluster); err != nil {
			return err
		}
	}
	ls.setInitConf(mem.conf)
	n.applied, n.conf, n.gone, n.incs = applied, mem.conf, mem.removed, mem.incarnations
	if n.incs == nil {
		n.incs = map[uint64]uint64{}
	}
	n.peers = maps.Clone(mem.peers)
	for id, addr := range o.Peers {
		if _, known := n.peers[id]; !known {
			n.peers[id] = addr
		}
	}
	n.publishMembers()
	n.appliedNow.Store(applied)
	n.m.restartWatermark, n.m.restartLast, n.m.restartApplied = wm, last, applied

	cfg := &raft.Config{
		ID:                        n.id,
		ElectionTick:              o.ElectionTicks,
		HeartbeatTick:             o.HeartbeatTicks,
		Storage:                   ls,
		Applied:                   applied,
		MaxSizePerMsg:             o.MaxSizePerMsg,
		MaxInflightMsgs:           o.MaxInflightMsgs,
		MaxUncommittedEntriesSize: o.MaxUncommittedBytes,
		CheckQuorum:               true,
		PreVote:                   true,
		DisableProposalForwarding: true,
		StepDownOnRemoval:         true,
		Logger:                    &raftLogger{l: n.log},
		AsyncStorageWrites:        n.hooks == nil || !n.hooks.syncReady,
	}
	if cfg.AsyncStorageWrites {
		maxPending := int64(maxPendingAppends)
		if n.hooks != nil && n.hooks.pendingAppends != 0 {
			maxPending = int64(n.hooks.pendingAppends)
		}
		n.appends = newAppendQueue(maxPending)
		n.appends.direct = n.hooks == nil || !n.hooks.loopSends
	}
	n.tr = newTransport(n)
	for id, addr := range n.peers {
		if id != n.id {
			n.tr.addPeer(id, addr)
		}
	}
	// raft checks the restored state as it starts, by panicking.
	if err := n.guard(func() error {
		rn, err := raft.NewRawNode(cfg)
		if err != nil {
			return err
		}
		if fresh && !o.Join {
			peers := make([]raft.Peer, 0, len(o.Peers))
			for _, id := range slices.Sorted(maps.Keys(o.Peers)) {
				peers = append(peers, raft.Peer{ID: id, Context: []byte(o.Peers[id])})
			}
			if err := rn.Bootstrap(peers); err != nil {
				return err
			}
		}
		n.rn = rn
		return nil
	}); err != nil {
		return errorf("start raft: %w", err)
	}
	bs := n.rn.BasicStatus()
	n.raftTerm.Store(bs.HardState.GetTerm())
	n.raftCommit.Store(bs.HardState.GetCommit())
	n.raftRole.Store(int32(bs.RaftState))
	n.log.Info("raftkv: node started", "dir", n.dir, "applied", applied, "watermark", wm,
		"commit", hs.GetCommit(), "log", fmt.Sprintf("(%d, %d]", trunc, last), "bootstrap", fresh && !o.Join)
	n.loops.Add(2)
	go n.run()
	go n.readLoop()
	if n.appends != nil {
		n.loops.Add(1)
		go n.appendLoop()
	}
	return nil
}

// checkIdentity refuses a data directory of another cluster or node, and
// takes its identity otherwise.
func (n *Node) checkIdentity(id identity) error {
	switch {
	case id.node != n.id:
		return errorf("%s belongs to node %d of cluster %016x, not node %d: %w", n.dir, id.node, id.cluster, n.id, ErrClusterMismatch)
	case id.token != n.opts.ClusterToken:
		return errorf("%s belongs to cluster %q (%016x), not %q: %w", n.dir, id.token, id.cluster, n.opts.ClusterToken, ErrClusterMismatch)
	}
	n.cluster.Store(id.cluster)
	n.bootstrap.Store(id.bootstrap)
	n.incarnation = id.incarnation
	return nil
}

// newIdentity records the identity of a data directory that has none: a
// new incarnation, and the bootstrap hash of the cluster it bootstraps (a
// joining node learns it from its first message).
func (n *Node) newIdentity(fresh bool) error {
	o := n.opts
	if !fresh {
		return errorf("%s: a raft log without an %s file: %w", n.dir, identityFile, ErrDataDir)
	}
	n.incarnation = randomID()
	if !o.Join {
		if _, in := o.Peers[n.id]; !in {
			return errorf("bootstrapping node %d is not in Peers (use Join to join a running cluster): %w", n.id, kvbuf.ErrBadOptions)
		}
		n.bootstrap.Store(bootstrapHash(o.ClusterToken, o.Peers))
	}
	return n.writeIdentity(n.identity())
}

// adoptCluster records the cluster (ID and bootstrap hash) a joining node
// learns from its first message.
func (n *Node) adoptCluster(cluster, bootstrap uint64) error {
	n.identMu.Lock()
	defer n.identMu.Unlock()
	if n.bootstrap.Load() != 0 {
		return nil
	}
	id := n.identity()
	id.cluster, id.bootstrap = cluster, bootstrap
	if err := n.writeIdentity(id); err != nil {
		return err
	}
	n.cluster.Store(cluster)
	n.bootstrap.Store(bootstrap)
	n.log.Info("raftkv: joined cluster", "cluster", fmt.Sprintf("%016x", cluster))
	return nil
}

// openEngine opens the state machine the log store points to and removes
// leftovers of snapshot installs (received but never switched to, or
// switched away from).
func (n *Node) openEngine() error {
	name, err := n.ls.engineName()
	if err != nil {
		return errorf("%s: %w", n.dir, err)
	}
	if name == "" {
		name = initialEngine
	} else if _, err := os.Stat(filepath.Join(n.dir, name)); err != nil {
		return errorf("%s: the log names engine %s: %w: %w", n.dir, name, ErrDataDir, err)
	}
	if err := n.removeStaleEngines(name); err != nil {
		return err
	}
	n.engName = name
	path := filepath.Join(n.dir, name)
	if n.sm, err = n.openSM(path); err != nil {
		return errorf("open engine %s: %w", path, err)
	}
	return nil
}

// openSM opens the state machine in dir: the kvbuf engine, unless a test
// hook builds another.
func (n *Node) openSM(dir string) (stateMachine, error) {
	if n.hooks != nil && n.hooks.newSM != nil {
		return n.hooks.newSM(dir)
	}
	e, err := openEngineSM(dir, n.opts.Engine)
	if err != nil {
		return nil, err // not a nil *engineSM in an interface
	}
	return e, nil
}

// removeStaleEngines removes every engine directory under dir but live.
func (n *Node) removeStaleEngines(live string) error {
	ents, err := os.ReadDir(n.dir)
	if err != nil {
		return errorf("%w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if name == live || !e.IsDir() || !(name == initialEngine || strings.HasPrefix(name, "engine-")) {
			continue
		}
		n.log.Info("raftkv: removing a stale engine directory", "dir", name)
		if err := os.RemoveAll(filepath.Join(n.dir, name)); err != nil {
			return errorf("%w", err)
		}
	}
	return nil
}

// run is the Ready loop: the one goroutine that drives raft (see loop.go).
// It runs the calls queued for it (proposals, reads, messages from peers),
// ticks raft, handles raft's Readies (persists, sends, applies and
// advances), compacts the log when the engine's durable watermark
// advances, and serves snapshot requests.
func (n *Node) run() {
	defer n.loops.Done()
	ticker := time.NewTicker(n.opts.TickInterval)
	defer ticker.Stop()
	// The engine says when its durable watermark advances (the log may be
	// compacted up to it); a replaced engine's channel closes with it, and
	// the loop then listens to the new one.
	var wmAdvanced <-chan struct{}
	listen := func() { wmAdvanced = n.sm.durableNotify() }
	listen()
	var appended <-chan struct{} // the append loop delivered responses
	if n.appends != nil {
		appended = n.appends.done
	}
	for {
		var err error
		select {
		case <-ticker.C:
			err = n.guard(func() error { n.rn.Tick(); return nil })
		case c := <-n.calls:
			err = n.guard(func() error { n.runCalls(c); return nil })
		case <-n.propKick:
		case <-appended:
			err = n.guard(n.takeAppended)
		case <-wmAdvanced:
			listen()
			n.maybeCompact()
		case reply := <-n.snapReqs:
			reply <- n.snapshotNow()
		case <-n.stopc:
			return
		}
		if err == nil {
			err = n.guard(func() error {
				// The writes queued meanwhile ride this Ready.
				if n.appends.mayPropose() {
					n.proposeQueued(n.rn)
				}
				if err := n.handleReadies(); err != nil {
					return err
				}
				// A new leader records what the cluster lacks at once.
				n.proposeMeta()
				return n.handleReadies()
			})
		}
		if err != nil {
			if !n.stopping(err) {
				n.fail(err)
			}
			return
		}
		if n.removed.Load() {
			n.log.Warn("raftkv: this node was removed from the cluster; stopping")
			n.fail(errorf("node %d: %w", n.id, ErrRemoved))
			return
		}
	}
}

// runCalls runs c and the calls queued after it, up to maxCallsPerTurn.
func (n *Node) runCalls(c loopCall) {
	c(n.rn)
	for range maxCallsPerTurn - 1 {
		select {
		case c = <-n.calls:
			c(n.rn)
		default:
			return
		}
	}
}

// handleReadies handles raft's Readies until it has none, or the node
// fails (a lost state detected while stepping stops it too).
func (n *Node) handleReadies() error {
	for n.rn.HasReady() {
		rd := n.rn.Ready()
		if n.appends != nil {
			if err := n.handleReadyAsync(rd); err != nil {
				return err
			}
			continue
		}
		if err := n.handleReady(rd); err != nil {
			return err
		}
		n.rn.Advance(rd)
	}
	select {
	case <-n.stopc:
		return n.stopped()
	default:
	}
	return nil
}

// fail stops the node after a fatal error: every call then returns
// ErrStopped wrapping it (ErrRemoved as is).
func (n *Node) fail(err error) {
	n.errMu.Lock()
	if n.err == nil {
		n.err = err
	}
	n.errMu.Unlock()
	if !errors.Is(err, ErrRemoved) {
		n.log.Error("raftkv: node failed; stopping", "err", err)
	}
	n.stop()
}

func (n *Node) stop() {
	n.stopOnce.Do(func() {
		n.cancel()
		if n.hooks != nil && n.hooks.afterCancel != nil {
			n.hooks.afterCancel()
		}
		close(n.stopc)
	})
}

// stopping reports whether err, which stopped the Ready loop, is Close's
// doing rather than a failure: stop cancels the node's context before it
// closes stopc, so an apply that fails with the cancellation may return
// before stopc is closed.
func (n *Node) stopping(err error) bool {
	select {
	case <-n.stopc:
		return true
	default:
	}
	return n.ctx.Err() != nil && errors.Is(err, context.Canceled)
}

// Done returns a channel that is closed once the node stops: Close began,
// or a fatal error or its removal from the cluster stopped it (see Err).
func (n *Node) Done() <-chan struct{} { return n.stopc }

// Err returns the error that stopped the node (nil while it runs or if
// Close stopped it).
func (n *Node) Err() error {
	n.errMu.Lock()
	defer n.errMu.Unlock()
	return n.err
}

// halted reports whether a call must fail with stopped's error: the node
// stopped, or is stopping after a fatal error or its removal. fail records
// the error before stop closes stopc, so a caller that saw Err return
// ErrRemoved must not find the node still taking calls in between.
func (n *Node) halted() bool {
	select {
	case <-n.stopc:
		return true
	default:
	}
	return n.Err() != nil
}

// stopped returns the error of a call on a stopped node.
func (n *Node) stopped() error {
	if err := n.Err(); errors.Is(err, ErrRemoved) {
		return err
	} else if err != nil {
		return errorf("%w: %w", ErrStopped, err)
	}
	return ErrStopped
}

// readyState records a Ready's hard state (term and commit index) and soft
// state (leadership): the first step of handleReady and handleReadyAsync.
func (n *Node) readyState(rd raft.Ready) {
	if hs := rd.HardState; hs != nil {
		n.raftTerm.Store(hs.GetTerm())
		n.raftCommit.Store(hs.GetCommit())
	}
	if ss := rd.SoftState; ss != nil {
		n.softState(ss)
	}
	n.trackConfIndex(rd)
}

// trackConfIndex keeps confIndex, raft's pendingConfIndex on our side: the
// index of the newest conf change entry appended here, and, on becoming
// the leader, the end of the log (a new leader may hold a membership change
// committed under the last leader that it has not applied yet: raft knows
// an entry is committed only once the leader's first entry is, so until
// then every entry of its log may be one). Ready loop only.
func (n *Node) trackConfIndex(rd raft.Ready) {
	last := uint64(0)
	if k := len(rd.Entries); k > 0 {
		last = rd.Entries[k-1].GetIndex()
	}
	if ss := rd.SoftState; ss != nil && ss.RaftState == raft.StateLeader {
		// raft appends the leader's empty entry in the step that elects
		// it, so this Ready carries it.
		n.confIndex = max(last, n.raftCommit.Load())
	}
	for _, e := range rd.Entries {
		if t := e.GetType(); t == raftpb.EntryConfChange || t == raftpb.EntryConfChangeV2 {
			n.confIndex = max(n.confIndex, e.GetIndex())
		}
	}
}

func (n *Node) handleReady(rd raft.Ready) error {
	n.readyState(rd)
	leader := n.leader.Load()
	n.checkProposedConfChanges(rd.Entries)
	if leader {
		// Raft thesis 10.2.1: the leader sends its appends while it writes
		// them itself (etcd does the same); its term and vote are durable
		// since it campaigned.
		n.sendMessages(rd.Messages)
	}
	committed := rd.CommittedEntries
	if raft.IsEmptySnap(rd.Snapshot) {
		// Committed entries that an earlier Ready made durable here are
		// applied (and their writers acknowledged) before this Ready's
		// entries are synced: a write's acknowledgement does not wait for
		// the sync of the writes proposed after it. Committed entries are
		// never overwritten, so the ones at or below the log's last index
		// are the durable ones.
		_, last := n.ls.bounds()
		k := 0
		for k < len(committed) && committed[k].GetIndex() <= last {
			k++
		}
		if err := n.applyEntries(committed[:k]); err != nil {
			return err
		}
		committed = committed[k:]
		if err := n.ls.save(rd.HardState, rd.Entries, rd.MustSync && (n.hooks == nil || !n.hooks.noLogSync)); err != nil {
			return errorf("persist ready: %w", err)
		}
	} else if err := n.installSnapshot(rd); err != nil {
		return err
	}
	if !leader {
		n.sendMessages(rd.Messages)
	}
	if err := n.applyEntries(committed); err != nil {
		return err
	}
	for _, rs := range rd.ReadStates {
		select {
		case n.readStates <- rs:
		default: // the read loop asks again
		}
	}
	return nil
}

// softState records raft's new role and leader, and logs elections and
// leader changes.
func (n *Node) softState(ss *raft.SoftState) {
	prevLead, prevRole := n.lead.Load(), raft.StateType(n.raftRole.Load())
	n.lead.Store(ss.Lead)
	n.leader.Store(ss.RaftState == raft.StateLeader)
	n.raftRole.Store(int32(ss.RaftState))
	term := n.rn.BasicStatus().GetTerm()
	if ss.RaftState != prevRole {
		switch ss.RaftState {
		case raft.StateCandidate:
			n.m.elections.Add(1)
			n.log.Info("raftkv: starting an election", "term", term)
		case raft.StateLeader:
			n.log.Info("raftkv: became the leader", "term", term)
		}
	}
	if ss.Lead != prevLead {
		if ss.Lead != raft.None {
			n.m.leaderChanges.Add(1)
			n.log.Info("raftkv: leader changed", "leader", ss.Lead, "addr", n.view.Load().peers[ss.Lead], "previous", prevLead, "term", term)
		} else {
			n.log.Info("raftkv: no leader", "previous", prevLead, "term", term)
		}
	}
}

// sendMessages hands messages to the transport; a snapshot message is
// turned into a stream of the engine as of the applied index.
func (n *Node) sendMessages(msgs []*raftpb.Message) {
	for _, m := range msgs {
		if m.GetType() == raftpb.MsgSnap {
			n.sendSnapshot(m)
			continue
		}
		n.tr.send(m)
	}
}

// sendSnapshot replaces the snapshot raft chose (the log's base, which is
// only metadata: see logStore.Snapshot) with the engine as of the applied
// index, which the Ready loop is between entries of: the kvbuf snapshot
// holds exactly the entries up to n.applied. The stream is sent in the
// background; the snapshot is pinned until then.
func (n *Node) sendSnapshot(m *raftpb.Message) {
	fail := func(err error) {
		n.m.snapshotsFailed.Add(1)
		n.log.Warn("raftkv: cannot send a snapshot", "to", m.GetTo(), "err", err)
		n.rn.ReportSnapshot(m.GetTo(), raft.SnapshotFailure)
	}
	term, err := n.ls.Term(n.applied)
	if err != nil {
		fail(errorf("term of applied index %d: %w", n.applied, err))
		return
	}
	snap, err := n.sm.snapshot()
	if err != nil {
		fail(err)
		return
	}
	m.Snapshot = &raftpb.Snapshot{
		Data: n.membership().encode(),
		Metadata: &raftpb.SnapshotMetadata{
			Index:     proto.Uint64(n.applied),
			Term:      proto.Uint64(term),
			ConfState: proto.CloneOf(n.conf),
		},
	}
	n.tr.sendSnapshot(m, snap)
}

// applyEntries applies committed entries in order, commits the state
// machine, then acknowledges their writers and publishes the applied index.
func (n *Node) applyEntries(ents []*raftpb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	for _, e := range ents {
		idx := e.GetIndex()
		if idx <= n.applied {
			continue // raft never redelivers below Config.Applied; kept for a snapshot race
		}
		if idx != n.applied+1 {
			return errorf("committed entry %d after applied index %d: a gap", idx, n.applied)
		}
		var err error
		switch e.GetType() {
		case raftpb.EntryNormal:
			err = n.applyNormal(idx, e.GetData())
		case raftpb.EntryConfChange:
			cc := &raftpb.ConfChange{}
			if uerr := proto.Unmarshal(e.GetData(), cc); uerr != nil {
				return errorf("conf change entry %d: %v: %w", idx, uerr, ErrCorruptLog)
			}
			err = n.applyConfChange(idx, cc)
		default:
			return errorf("entry %d of unsupported type %v", idx, e.GetType())
		}
		if err != nil {
			return err
		}
		n.applied = idx
		n.m.applied.Add(1)
		switch {
		case idx <= n.m.restartWatermark:
			n.m.redelivered.Add(1)
		case idx <= n.m.restartLast:
			n.m.reapplied.Add(1)
		}
	}
	if err := n.sm.commit(n.ctx); err != nil {
		return errorf("commit entries up to %d: %w", n.applied, err)
	}
	for i, a := range n.acks {
		n.complete(a.id, a.result)
		n.acks[i] = ack{}
	}
	n.acks = n.acks[:0]
	n.publishApplied(n.applied)
	return nil
}

// ack is the result of an applied command, for its writer.
type ack struct {
	id     uint64
	result error
}

// ackLater records the result of request id, delivered once the state
// machine has committed the entries being applied (applyEntries).
func (n *Node) ackLater(id uint64, result error) {
	if id != 0 {
		n.acks = append(n.acks, ack{id, result})
	}
}

// applyNormal applies a normal entry: its commands as one op of the state
// machine, or the node's own meta command.
func (n *Node) applyNormal(idx uint64, data []byte) error {
	if len(data) == 0 {
		// A new leader's empty entry: it changes nothing but the op.
		return n.sm.skip(n.ctx, idx)
	}
	cmds, err := decodeEntry(n.cmds[:0], data)
	if err != nil {
		// Every node holds the same bytes and skips them alike.
		n.log.Error("raftkv: skipping an entry that does not decode", "index", idx, "err", err)
		return n.sm.skip(n.ctx, idx)
	}
	defer func() { clear(cmds); n.cmds = cmds[:0] }()
	if len(cmds) == 1 && cmds[0].kind == cmdMeta {
		return n.applyMeta(idx, cmds[0])
	}
	results := n.results[:0]
	for range cmds {
		results = append(results, nil)
	}
	defer func() { clear(results); n.results = results[:0] }()
	if err := n.sm.apply(n.ctx, idx, cmds, results); err != nil {
		return err
	}
	for i, c := range cmds {
		if results[i] != nil {
			results[i] = errorf("%w", results[i])
		}
		n.ackLater(c.id, results[i])
	}
	return nil
}

func (n *Node) applyConfChange(idx uint64, cc *raftpb.ConfChange) error {
	id := cc.GetNodeId()
	if err := n.membership().check(cc); err != nil {
		// Refused alike on every node (the membership is replicated):
		// raft applies no change (node 0), as etcd does.
		n.conf = n.rn.ApplyConfChange(&raftpb.ConfChange{Type: cc.GetType().Enum()})
		n.log.Warn("raftkv: refused a membership change", "index", idx, "change", cc.GetType().String(), "node", id, "err", err)
		if err := n.sm.skip(n.ctx, idx); err != nil {
			return err
		}
		n.ackLater(cc.GetId(), err)
		return nil
	}
	cs := n.rn.ApplyConfChange(cc)
	n.conf = cs
	switch cc.GetType() {
	case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode, raftpb.ConfChangeUpdateNode:
		if addr := string(cc.GetContext()); addr != "" {
			n.peers[id] = addr
			if id != n.id {
				n.tr.addPeer(id, addr)
			}
		}
	case raftpb.ConfChangeRemoveNode:
		delete(n.peers, id)
		if i, found := slices.BinarySearch(n.gone, id); !found {
			n.gone = slices.Insert(slices.Clone(n.gone), i, id)
		}
		if id == n.id {
			if err := n.ls.setRemoved(); err != nil {
				return errorf("record removal: %w", err)
			}
			n.removed.Store(true)
		} else {
			n.tr.removePeer(id)
		}
	}
	// Durable before the engine's watermark can cover idx: a restart at or
	// above idx starts from this membership.
	if err := n.ls.saveMembership(idx, n.membership()); err != nil {
		return errorf("record membership at %d: %w", idx, err)
	}
	n.publishMembers()
	n.log.Info("raftkv: membership changed", "index", idx, "change", changeName(cc), "node", id,
		"addr", n.peers[id], "voters", cs.GetVoters(), "learners", cs.GetLearners())
	if err := n.sm.skip(n.ctx, idx); err != nil {
		return err
	}
	n.ackLater(cc.GetId(), nil)
	return nil
}

// changeName names a conf change for the log.
func changeName(cc *raftpb.ConfChange) string {
	switch {
	case isPromotion(cc):
		return "promote"
	case cc.GetType() == raftpb.ConfChangeAddNode:
		return "add-voter"
	case cc.GetType() == raftpb.ConfChangeAddLearnerNode:
		return "add-learner"
	case cc.GetType() == raftpb.ConfChangeRemoveNode:
		return "remove"
	case cc.GetType() == raftpb.ConfChangeUpdateNode:
		return "update-address"
	}
	return cc.GetType().String()
}

// removedByPeer stops a node that a peer says was removed: it missed the
// commit of its own removal (the leader stops sending to a removed node).
func (n *Node) removedByPeer(peer uint64) {
	if n.removed.Swap(true) {
		return
	}
	n.log.Warn("raftkv: a peer says this node was removed from the cluster; stopping", "peer", peer)
	if err := n.ls.setRemoved(); err != nil {
		n.log.Error("raftkv: record removal", "err", err)
	}
	n.fail(errorf("node %d (as node %d says): %w", n.id, peer, ErrRemoved))
}

func (n *Node) publishApplied(idx uint64) {
	n.appliedMu.Lock()
	n.appliedNow.Store(idx)
	close(n.appliedCh)
	n.appliedCh = make(chan struct{})
	n.appliedMu.Unlock()
}

// waitApplied returns once the applied index reaches idx.
func (n *Node) waitApplied(ctx context.Context, idx uint64) error {
	for {
		n.appliedMu.Lock()
		ch, cur := n.appliedCh, n.appliedNow.Load()
		n.appliedMu.Unlock()
		if cur >= idx {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-n.stopc:
			return n.stopped()
		}
	}
}

// WaitApplied blocks until this node has applied every entry up to index,
// or ctx ends (ctx.Err()), or the node stops (ErrStopped).
func (n *Node) WaitApplied(ctx context.Context, index uint64) error {
	return n.waitApplied(ctx, index)
}

// maybeCompact truncates the log below the engine's durable watermark,
// keeping LogRetain entries, once enough have accumulated. A leader also
// keeps the entries its followers are catching up with (those after a
// snapshot it is sending, and after a follower's match index), up to
// followerHold entries below the watermark: a follower
// that just installed a snapshot continues from the log rather than
// needing another (under load it might never catch up), and one that
// cannot keep up even so gets a snapshot, so the log stays bounded.
func (n *Node) maybeCompact() {
	wm := min(n.sm.durable(), n.applied)
	if wm <= n.opts.LogRetain {
		return
	}
	target := wm - n.opts.LogRetain
	if n.leader.Load() {
		trunc, _ := n.ls.bounds()
		floor := wm - min(wm, followerHold(n.opts.LogRetain))
		n.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
			switch {
			case id == n.id:
			case pr.State == tracker.StateSnapshot && pr.PendingSnapshot > 0:
				target = min(target, max(pr.PendingSnapshot, floor))
			default:
				// Entries after Match may be sent again; a follower probed
				// after a snapshot (Match not known yet) needs those from
				// Next on. RecentActive is no guide: CheckQuorum clears it
				// every election timeout, until the follower answers.
				need := pr.Match
				if pr.State == tracker.StateProbe {
					need = max(need, pr.Next-1)
				}
				if need >= trunc {
					target = min(target, max(need, floor))
				}
			}
		})
	}
	trunc, _ := n.ls.bounds()
	if target <= trunc || target-trunc < max(n.opts.LogRetain/4, 1) {
		return
	}
	if err := n.ls.compact(target); err != nil {
		n.log.Error("raftkv: log compaction failed", "to", target, "err", err)
		return
	}
	n.m.compactions.Add(1)
}

// followerHold is how many entries below the durable watermark a leader's
// log may keep for its followers (see maybeCompact).
func followerHold(logRetain uint64) uint64 { return 10 * max(logRetain, 1000) }

// snapshotNow takes an engine snapshot at the applied index (the Ready
// loop is between entries).
func (n *Node) snapshotNow() snapReply {
	s, err := n.sm.snapshot()
	return snapReply{snap: s, index: n.applied, err: err}
}

// snapshotAt returns an engine snapshot holding exactly the entries up to
// the returned index.
func (n *Node) snapshotAt(ctx context.Context) (*kvbuf.Snapshot, uint64, error) {
	reply := make(chan snapReply, 1)
	select {
	case n.snapReqs <- reply:
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	case <-n.stopc:
		return nil, 0, n.stopped()
	}
	r := <-reply
	return r.snap, r.index, r.err
}

// Digest returns the content digest of this node's engine (kvbuf's
// Snapshot.Digest, which kvtool inspect --digest prints for a closed
// engine) and the applied index it was taken at: two nodes at the same
// index must have the same digest.
func (n *Node) Digest(ctx context.Context) (index uint64, digest string, err error) {
	s, idx, err := n.snapshotAt(ctx)
	if err != nil {
		return 0, "", err
	}
	defer s.Close()
	d, err := s.Digest(ctx)
	return idx, d, err
}

// complete hands a proposal's result to the client waiting for it here.
func (n *Node) complete(id uint64, result error) {
	if id == 0 {
		return
	}
	n.waitMu.Lock()
	ch := n.waiters[id]
	delete(n.waiters, id)
	n.waitMu.Unlock()
	if ch != nil {
		ch <- result
	}
}

// Close stops the node: the Ready loop, raft, the transport (waiting for
// snapshot transfers and receives in progress), then closes the engine
// (its final flush) and the log store. Calls waiting for a proposal return
// ErrOutcomeUnknown; later calls ErrStopped. It is idempotent; every call
// returns the first one's result.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.closing.Lock()
		n.stop()
		n.closing.Unlock()
		n.loops.Wait()
		n.tr.stop()
		n.inflight.Wait()
		n.engMu.Lock()
		err := n.sm.close()
		n.engMu.Unlock()
		if cerr := n.ls.close(); err == nil {
			err = cerr
		}
		if cerr := n.lock.Close(); err == nil {
			err = cerr
		}
		n.closeErr = err
	})
	return n.closeErr
}

// ID returns the node's raft ID.
func (n *Node) ID() uint64 { return n.id }

// Leader returns the leader this node knows of (0: none) and its address.
func (n *Node) Leader() (uint64, string) {
	l := n.lead.Load()
	return l, n.view.Load().peers[l]
}

// IsLeader reports whether this node is the leader.
func (n *Node) IsLeader() bool { return n.leader.Load() }

// raftLogger sends raft's log lines to the node's logger: raft's info lines
// (elections, appends) as debug lines.
type raftLogger struct{ l *slog.Logger }

func (r *raftLogger) Debug(v ...any)                 { r.l.Debug(fmt.Sprint(v...)) }
func (r *raftLogger) Debugf(format string, v ...any) { r.l.Debug(fmt.Sprintf(format, v...)) }
func (r *raftLogger) Info(v ...any)                  { r.l.Debug(fmt.Sprint(v...)) }
func (r *raftLogger) Infof(format string, v ...any)  { r.l.Debug(fmt.Sprintf(format, v...)) }
func (r *raftLogger) Warning(v ...any)               { r.l.Warn(fmt.Sprint(v...)) }
func (r *raftLogger) Warningf(format string, v ...any) {
	r.l.Warn(fmt.Sprintf(format, v...))
}
func (r *raftLogger) Error(v ...any)                 { r.l.Error(fmt.Sprint(v...)) }
func (r *raftLogger) Errorf(format string, v ...any) { r.l.Error(fmt.Sprintf(format, v...)) }

// Fatal and Panic must not return (raft's own logger exits or panics):
// both panic with a raftPanic, after logging, which the Ready loop
// recovers (see Node.guard).
func (r *raftLogger) Fatal(v ...any) { r.Panic(v...) }
func (r *raftLogger) Fatalf(format string, v ...any) {
	r.Panicf(format, v...)
}
func (r *raftLogger) Panic(v ...any) {
	s := fmt.Sprint(v...)
	r.l.Error(s)
	panic(raftPanic(s))
}
func (r *raftLogger) Panicf(format string, v ...any) {
	s := fmt.Sprintf(format, v...)
	r.l.Error(s)
	panic(raftPanic(s))
}
