package raftkv

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/kvbuf/kvbuf"
)

// The transport carries raft messages between nodes over HTTP:
//
//	POST /raft/message   a batch of messages: (uvarint length, protobuf raftpb.Message)*
//	POST /raft/snapshot  one snapshot (see snapshot.go)
//
// Every request carries the headers below: the sender's cluster ID and
// bootstrap hash, its ID and incarnation, the receiver's ID and the
// receiver's incarnation as the sender's membership records it (0 if none
// yet). The receiver refuses (see Node.checkPeerRequest), with 409 Conflict
// and the kind of refusal in the X-Kvraft-Refusal header:
//
//	cluster   another cluster's request: the cluster IDs differ, or (while
//	          either side has no cluster ID yet) the bootstrap hashes
//	node      a request addressed to another node ID
//	replaced  the sender's incarnation is not the one the cluster recorded
//	          for its ID: its data directory was wiped or replaced, and it
//	          stops (ErrLostState) when it reads the answer
//	not-you   the receiver's incarnation is not the one the sender knows:
//	          the receiver's directory was wiped or replaced, and it stops
//
// and answers 410 Gone to a removed node, which stops (ErrRemoved). One
// goroutine per peer sends its queued messages, a batch per request, so
// messages to a peer keep their order; a full queue or a failed request
// drops messages (raft retransmits) and reports the peer unreachable to
// raft.
const (
	headerCluster       = "X-Kvraft-Cluster"
	headerBootstrap     = "X-Kvraft-Bootstrap"
	headerFrom          = "X-Kvraft-From"
	headerTo            = "X-Kvraft-To"
	headerIncarnation   = "X-Kvraft-Incarnation"
	headerToIncarnation = "X-Kvraft-To-Incarnation"
	headerRefusal       = "X-Kvraft-Refusal"

	refusedCluster  = "cluster"
	refusedNode     = "node"
	refusedReplaced = "replaced"
	refusedNotYou   = "not-you"

	pathMessage  = "/raft/message"
	pathSnapshot = "/raft/snapshot"
)

type transport struct {
	n      *Node
	client *http.Client
	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	peers map[uint64]*peer
	wg    sync.WaitGroup

	sendErrors atomic.Uint64
	rejected   atomic.Uint64          // requests a peer refused (409)
	lastErr    atomic.Pointer[string] // the newest send error
}

type peer struct {
	id   uint64
	addr atomic.Pointer[string]
	// down is whether the last request to the peer failed (owned by its
	// send loop), since when, and when a refusal was last logged.
	down       bool
	downSince  time.Time
	lastLogged time.Time
	queue      chan *raftpb.Message
	stop       chan struct{}
}

func newTransport(n *Node) *transport {
	tr := &transport{n: n, client: n.opts.Client, peers: map[uint64]*peer{}}
	tr.ctx, tr.cancel = context.WithCancel(n.ctx)
	return tr
}

// addPeer starts sending to id at addr, or updates its address.
func (tr *transport) addPeer(id uint64, addr string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if p := tr.peers[id]; p != nil {
		p.addr.Store(&addr)
		return
	}
	select {
	case <-tr.ctx.Done():
		return
	default:
	}
	p := &peer{id: id, queue: make(chan *raftpb.Message, tr.n.opts.MaxPendingMessages), stop: make(chan struct{})}
	p.addr.Store(&addr)
	tr.peers[id] = p
	tr.wg.Add(1)
	go tr.sendLoop(p)
}

func (tr *transport) removePeer(id uint64) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if p := tr.peers[id]; p != nil {
		close(p.stop)
		delete(tr.peers, id)
	}
}

// stop ends every send, waiting for them.
func (tr *transport) stop() {
	tr.cancel()
	tr.mu.Lock()
	for id, p := range tr.peers {
		close(p.stop)
		delete(tr.peers, id)
	}
	tr.mu.Unlock()
	tr.wg.Wait()
}

func (tr *transport) peer(id uint64) *peer {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.peers[id]
}

// send queues m for its peer without blocking.
func (tr *transport) send(m *raftpb.Message) {
	p := tr.peer(m.GetTo())
	if p == nil {
		return // not a member (any more) or not known yet
	}
	select {
	case p.queue <- m:
	default:
		tr.n.rn.ReportUnreachable(m.GetTo()) // on the loop: send is called there
	}
}

func (tr *transport) setHeaders(req *http.Request, to uint64) {
	n := tr.n
	req.Header.Set(headerCluster, strconv.FormatUint(n.cluster.Load(), 16))
	req.Header.Set(headerBootstrap, strconv.FormatUint(n.bootstrap.Load(), 16))
	req.Header.Set(headerFrom, strconv.FormatUint(n.id, 10))
	req.Header.Set(headerIncarnation, strconv.FormatUint(n.incarnation, 16))
	req.Header.Set(headerTo, strconv.FormatUint(to, 10))
	req.Header.Set(headerToIncarnation, strconv.FormatUint(n.view.Load().incarnations[to], 16))
}

func (tr *transport) sendLoop(p *peer) {
	defer tr.wg.Done()
	var buf []byte
	for {
		var m *raftpb.Message
		select {
		case m = <-p.queue:
		case <-p.stop:
			return
		}
		buf = buf[:0]
		for {
			b, err := proto.Marshal(m)
			if err != nil {
				tr.n.log.Error("raftkv: marshal message", "type", m.GetType(), "err", err)
			} else {
				buf = binary.AppendUvarint(buf, uint64(len(b)))
				buf = append(buf, b...)
			}
			if len(buf) >= defaultMaxMessageBatchBytes {
				break
			}
			select {
			case m = <-p.queue:
				continue
			default:
			}
			break
		}
		err := tr.post(p, buf)
		tr.outcome(p, err)
		if err != nil {
			tr.n.reportUnreachable(p.id)
			switch {
			case errors.Is(err, ErrRemoved):
				tr.n.removedByPeer(p.id)
			case errors.As(err, new(*replacedError)):
				tr.n.fail(fmt.Errorf("%w: node %d: %v; %s", ErrLostState, tr.n.id, err, replaceAdvice(tr.n.id)))
			}
		}
	}
}

// refusalLogEvery bounds how often a peer's refusals are logged.
const refusalLogEvery = 10 * time.Second

// outcome records how a request of the send loop of p ended: it counts a
// failure, and logs the peer becoming unreachable, reachable again, or
// refusing our messages (at most every refusalLogEvery).
func (tr *transport) outcome(p *peer, err error) {
	n := tr.n
	if err == nil {
		if p.down {
			p.down = false
			n.log.Info("raftkv: peer reachable again", "peer", p.id, "addr", *p.addr.Load(), "after", time.Since(p.downSince).Round(time.Millisecond))
		}
		return
	}
	tr.failed(p.id, err)
	if (errors.Is(err, ErrClusterMismatch) || errors.Is(err, ErrUnauthenticated)) && time.Since(p.lastLogged) >= refusalLogEvery {
		p.lastLogged = time.Now()
		n.log.Error("raftkv: a peer refused our messages", "peer", p.id, "addr", *p.addr.Load(), "err", err)
	}
	if !p.down && tr.ctx.Err() == nil {
		p.down, p.downSince = true, time.Now()
		n.log.Info("raftkv: peer unreachable", "peer", p.id, "addr", *p.addr.Load(), "err", err)
	}
}

// failed counts a failed request to peer id.
func (tr *transport) failed(id uint64, err error) {
	tr.sendErrors.Add(1)
	s := fmt.Sprintf("to node %d: %v", id, err)
	tr.lastErr.Store(&s)
	if errors.Is(err, ErrClusterMismatch) || errors.Is(err, ErrUnauthenticated) {
		tr.rejected.Add(1)
	}
}

func (tr *transport) post(p *peer, body []byte) error {
	ctx, cancel := context.WithTimeout(tr.ctx, tr.n.opts.SendTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, tr.url(p, pathMessage), bytes.NewReader(body))
	if err != nil {
		return err
	}
	tr.setHeaders(req, p.id)
	resp, err := tr.client.Do(req)
	if err != nil {
		return err
	}
	return checkResponse(resp)
}

// url returns the URL of path on peer p.
func (tr *transport) url(p *peer, path string) string {
	scheme := "http://"
	if tr.n.opts.PeerTLS != nil {
		scheme = "https://"
	}
	return scheme + *p.addr.Load() + path
}

// refusedError is a peer's refusal: its reason (the body of its answer),
// matching the sentinel of the refusal.
type refusedError struct {
	msg  string
	kind error
}

func (e *refusedError) Error() string { return e.msg }
func (e *refusedError) Unwrap() error { return e.kind }

func refused(kind error, body []byte) error {
	msg := string(bytes.TrimSpace(body))
	if msg == "" {
		msg = kind.Error()
	}
	return &refusedError{msg: msg, kind: kind}
}

// replacedError is a peer's refusal of this node as replaced (its data
// directory is not the one the cluster recorded for its ID): the peer's
// reason.
type replacedError struct{ msg string }

func (e *replacedError) Error() string { return e.msg }

// checkResponse consumes resp and returns an error for a refusal.
func checkResponse(resp *http.Response) error {
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusOK:
		return nil
	case resp.StatusCode == http.StatusConflict && resp.Header.Get(headerRefusal) == refusedReplaced:
		return &replacedError{msg: string(bytes.TrimSpace(msg))}
	case resp.StatusCode == http.StatusConflict:
		return refused(ErrClusterMismatch, msg)
	case resp.StatusCode == http.StatusForbidden:
		return refused(ErrUnauthenticated, msg)
	case resp.StatusCode == http.StatusGone:
		return refused(ErrRemoved, msg)
	}
	return fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
}

// sendSnapshot streams snap as the snapshot of message m in the
// background, then reports the outcome to raft. snap is closed when done.
func (tr *transport) sendSnapshot(m *raftpb.Message, snap *kvbuf.Snapshot) {
	p := tr.peer(m.GetTo())
	if p == nil {
		snap.Close()
		tr.n.rn.ReportSnapshot(m.GetTo(), raft.SnapshotFailure) // on the loop: sendSnapshot is called there
		return
	}
	tr.wg.Add(1)
	go func() {
		defer tr.wg.Done()
		start := time.Now()
		idx := m.GetSnapshot().GetMetadata().GetIndex()
		tr.n.log.Info("raftkv: sending a snapshot", "to", p.id, "index", idx)
		size, err := tr.streamSnapshot(p, m, snap)
		snap.Close()
		status := raft.SnapshotFinish
		if err != nil {
			status = raft.SnapshotFailure
			tr.failed(p.id, fmt.Errorf("snapshot %d: %w", idx, err))
			tr.n.m.snapshotsFailed.Add(1)
			tr.n.log.Warn("raftkv: sending a snapshot failed", "to", p.id, "index", idx, "err", err)
		} else {
			tr.n.m.snapshotsSent.Add(1)
			tr.n.log.Info("raftkv: snapshot sent", "to", p.id, "index", idx, "bytes", size, "took", time.Since(start).Round(time.Millisecond))
		}
		tr.n.reportSnapshot(p.id, status)
	}()
}

// streamSnapshot sends snap as the snapshot of message m to p, and returns
// the engine stream's size.
func (tr *transport) streamSnapshot(p *peer, m *raftpb.Message, snap *kvbuf.Snapshot) (int64, error) {
	hdr, err := proto.Marshal(m)
	if err != nil {
		return 0, err
	}
	var size int64
	ctx, cancel := context.WithTimeout(tr.ctx, tr.n.opts.SnapshotTimeout)
	defer cancel()
	pr, pw := io.Pipe()
	written := make(chan error, 1)
	go func() {
		bw := bufio.NewWriterSize(pw, 64<<10)
		_, err := bw.Write(binary.AppendUvarint(nil, uint64(len(hdr))))
		if err == nil {
			_, err = bw.Write(hdr)
		}
		if err == nil {
			size, err = snap.Export(ctx, bw, m.GetSnapshot().GetMetadata().GetIndex())
		}
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
		written <- err
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, tr.url(p, pathSnapshot), pr)
	if err == nil {
		tr.setHeaders(req, p.id)
		var resp *http.Response
		if resp, err = tr.client.Do(req); err == nil {
			err = checkResponse(resp)
		}
	}
	// The writer stops at its next write if the request ended early.
	pr.CloseWithError(errors.New("raftkv: snapshot request ended"))
	if werr := <-written; err == nil && werr != nil {
		err = werr
	}
	return size, err
}

// Handler returns the HTTP handler of the node's transport (the /raft/
// paths). Serve it on the node's address, with the client API of the host
// beside it if any (cmd/kvraft does).
func (n *Node) Handler() http.Handler {
	n.handlerOnce.Do(func() {
		mux := http.NewServeMux()
		mux.HandleFunc("POST "+pathMessage, n.handleMessages)
		mux.HandleFunc("POST "+pathSnapshot, n.handleSnapshot)
		n.handler = mux
		if n.opts.PeerTLS != nil {
			n.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if err := n.checkPeerCert(r); err != nil {
					http.Error(w, err.Error(), http.StatusForbidden)
					return
				}
				mux.ServeHTTP(w, r)
			})
		}
	})
	return n.handler
}

// checkPeerCert refuses a request that did not come over TLS with a client
// certificate signed by the cluster's CA (PeerTLS.RootCAs).
func (n *Node) checkPeerCert(r *http.Request) error {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return fmt.Errorf("%w: node %d: a peer must present a certificate of the cluster's CA", ErrUnauthenticated, n.id)
	}
	if err := VerifyPeerCert(r.TLS.PeerCertificates, n.opts.PeerTLS.RootCAs); err != nil {
		return fmt.Errorf("%w: node %d: the peer's certificate is not of the cluster's CA: %w", ErrUnauthenticated, n.id, err)
	}
	return nil
}

// VerifyPeerCert verifies a TLS client's certificate chain (leaf first, as
// tls.ConnectionState.PeerCertificates holds it) against roots, for client
// authentication. Hosts use it to accept a peer's certificate (the
// cluster's CA) where they accept other credentials.
func VerifyPeerCert(chain []*x509.Certificate, roots *x509.CertPool) error {
	if len(chain) == 0 {
		return errors.New("no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err
}

// peerHeaders are the transport headers of a request.
type peerHeaders struct {
	cluster, bootstrap, from, to, incarnation, toIncarnation uint64
}

func parsePeerHeaders(r *http.Request) (peerHeaders, error) {
	var h peerHeaders
	for _, f := range []struct {
		name string
		base int
		v    *uint64
	}{
		{headerCluster, 16, &h.cluster}, {headerBootstrap, 16, &h.bootstrap}, {headerFrom, 10, &h.from},
		{headerTo, 10, &h.to}, {headerIncarnation, 16, &h.incarnation}, {headerToIncarnation, 16, &h.toIncarnation},
	} {
		v, err := strconv.ParseUint(r.Header.Get(f.name), f.base, 64)
		if err != nil {
			return h, fmt.Errorf("raftkv: bad %s header %q", f.name, r.Header.Get(f.name))
		}
		*f.v = v
	}
	return h, nil
}

// refusal is a refused peer request: the status, the kind (headerRefusal)
// and why.
type refusal struct {
	code int
	kind string
	err  error
}

func (rf *refusal) write(w http.ResponseWriter) {
	if rf.kind != "" {
		w.Header().Set(headerRefusal, rf.kind)
	}
	http.Error(w, rf.err.Error(), rf.code)
}

// checkPeerRequest refuses a request of another cluster or for another
// node, from a removed node or from a node whose directory was replaced
// (see the transport's refusals), and stops this node if the sender knows
// its ID by another directory. A joining node takes its cluster from the
// first request it accepts; the leader notes the sender's incarnation for
// the cluster to record if it has none.
func (n *Node) checkPeerRequest(r *http.Request) *refusal {
	h, err := parsePeerHeaders(r)
	if err != nil {
		return &refusal{code: http.StatusBadRequest, err: err}
	}
	cluster, bootstrap := n.cluster.Load(), n.bootstrap.Load()
	joining := bootstrap == 0
	switch {
	case joining:
	case cluster != 0 && h.cluster != 0:
		if h.cluster != cluster {
			return &refusal{http.StatusConflict, refusedCluster, fmt.Errorf("raftkv: node %d is in cluster %016x, the request is from node %d of cluster %016x: %w",
				n.id, cluster, h.from, h.cluster, ErrClusterMismatch)}
		}
	case h.bootstrap != bootstrap:
		// One side has no cluster ID yet: the bootstrap hashes say.
		return &refusal{http.StatusConflict, refusedCluster, fmt.Errorf("raftkv: node %d was bootstrapped as %016x, the request is from node %d bootstrapped as %016x (another cluster token or other initial members): %w",
			n.id, bootstrap, h.from, h.bootstrap, ErrClusterMismatch)}
	}
	if h.to != n.id {
		return &refusal{http.StatusConflict, refusedNode, fmt.Errorf("raftkv: this is node %d, not node %d: %w", n.id, h.to, ErrClusterMismatch)}
	}
	if h.toIncarnation != 0 && h.toIncarnation != n.incarnation {
		err := fmt.Errorf("%w: node %d: node %d knows node %d by another data directory (incarnation %016x, this one is %016x): this directory was wiped or replaced; %s",
			ErrLostState, n.id, h.from, n.id, h.toIncarnation, n.incarnation, replaceAdvice(n.id))
		n.fail(err)
		return &refusal{http.StatusConflict, refusedNotYou, err}
	}
	if joining {
		if h.bootstrap == 0 {
			return &refusal{http.StatusConflict, refusedCluster, fmt.Errorf("raftkv: node %d is joining a cluster; node %d has none either: %w", n.id, h.from, ErrClusterMismatch)}
		}
		if err := n.adoptCluster(h.cluster, h.bootstrap); err != nil {
			return &refusal{code: http.StatusInternalServerError, err: err}
		}
	}
	if n.wasRemoved(h.from) {
		return &refusal{code: http.StatusGone, err: fmt.Errorf("raftkv: node %d was removed from the cluster", h.from)}
	}
	switch rec := n.view.Load().incarnations[h.from]; {
	case rec != 0 && rec != h.incarnation:
		if n.logEvery(fmt.Sprintf("replaced %d", h.from)) {
			n.log.Warn("raftkv: refused a node whose data directory was replaced", "peer", h.from, "incarnation", fmt.Sprintf("%016x", h.incarnation),
				"recorded", fmt.Sprintf("%016x", rec))
		}
		return &refusal{http.StatusConflict, refusedReplaced, fmt.Errorf("raftkv: node %d refuses node %d: the cluster knows node %d by another data directory (incarnation %016x, the request's is %016x)",
			n.id, h.from, h.from, rec, h.incarnation)}
	case rec == 0 && n.leader.Load():
		n.noteIncarnation(h.from, h.incarnation)
	}
	return nil
}

// logEvery reports whether a line about key may be logged now: at most one
// every refusalLogEvery per key.
func (n *Node) logEvery(key string) bool {
	n.logMu.Lock()
	defer n.logMu.Unlock()
	if t, ok := n.logged[key]; ok && time.Since(t) < refusalLogEvery {
		return false
	}
	n.logged[key] = time.Now()
	return true
}

// maxMessageBody bounds a request of messages: a batch may exceed
// defaultMaxMessageBatchBytes by one message, which holds at most
// MaxSizePerMsg of entries, or one entry of the largest value.
func (n *Node) maxMessageBody() int64 {
	o := n.opts.Engine.EnsureDefaults()
	return int64(defaultMaxMessageBatchBytes) + int64(n.opts.MaxSizePerMsg) + int64(o.MaxKeySize+o.MaxValueSize) + 1<<20
}

func (n *Node) handleMessages(w http.ResponseWriter, r *http.Request) {
	if rf := n.checkPeerRequest(r); rf != nil {
		rf.write(w)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, n.maxMessageBody()))
	if err != nil {
		http.Error(w, "raftkv: read messages: "+err.Error(), http.StatusBadRequest)
		return
	}
	var msgs []*raftpb.Message
	for len(body) > 0 {
		size, k := binary.Uvarint(body)
		if k <= 0 || size > uint64(len(body)-k) {
			http.Error(w, "raftkv: malformed message batch", http.StatusBadRequest)
			return
		}
		m := &raftpb.Message{}
		if err := proto.Unmarshal(body[k:k+int(size)], m); err != nil {
			http.Error(w, "raftkv: malformed message: "+err.Error(), http.StatusBadRequest)
			return
		}
		if m.GetTo() != n.id || m.GetType() == raftpb.MsgSnap {
			http.Error(w, fmt.Sprintf("raftkv: message %v to node %d in a batch for node %d", m.GetType(), m.GetTo(), n.id), http.StatusBadRequest)
			return
		}
		msgs = append(msgs, m)
		body = body[k+int(size):]
	}
	if err := n.enqueue(r.Context(), func(rn *raft.RawNode) { n.stepMessages(rn, msgs) }); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable) // stopped, or the request ended
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// stepMessages steps messages from a peer into raft, on the Ready loop.
// raft ignores messages it cannot use (a stale term, a local message type);
// the rest of the batch still counts. A message raft would panic on is
// refused first (checkMessage), and stops the node.
func (n *Node) stepMessages(rn *raft.RawNode, msgs []*raftpb.Message) {
	for _, m := range msgs {
		if err := n.checkMessage(rn, m); err != nil {
			n.fail(err)
			return
		}
		_ = rn.Step(m)
	}
}

// checkMessage refuses a message that says this node lost state: a leader
// of the current term (or a newer one) that says entries past this node's
// log are committed here. A leader tells a follower it committed at most
// what that follower acknowledged, and a follower acknowledges entries only
// once they are in its log store; so the follower lost them (its directory
// was wiped, or restored from an old copy). raft would panic
// ("tocommit(N) is out of range [lastIndex(M)]").
func (n *Node) checkMessage(rn *raft.RawNode, m *raftpb.Message) error {
	if m.GetType() != raftpb.MsgHeartbeat {
		return nil
	}
	_, last := n.ls.bounds()
	if m.GetCommit() <= last || m.GetTerm() < rn.BasicStatus().GetTerm() {
		return nil
	}
	return fmt.Errorf("%w: node %d: leader %d (term %d) says entries up to %d are committed here, but this node's log ends at %d; %s",
		ErrLostState, n.id, m.GetFrom(), m.GetTerm(), m.GetCommit(), last, replaceAdvice(n.id))
}

// reportUnreachable tells raft that a message to peer id was lost.
func (n *Node) reportUnreachable(id uint64) {
	select {
	case n.calls <- func(rn *raft.RawNode) { rn.ReportUnreachable(id) }:
	default: // advisory: raft learns it again at the next failure
	}
}

// reportSnapshot tells raft how sending a snapshot to peer id ended.
func (n *Node) reportSnapshot(id uint64, status raft.SnapshotStatus) {
	_ = n.enqueue(context.Background(), func(rn *raft.RawNode) { rn.ReportSnapshot(id, status) })
}
