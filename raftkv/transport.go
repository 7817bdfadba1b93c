package raftkv

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

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
// Every request carries the headers below; a node answers 409 Conflict to
// a request of another cluster, or addressed to another node ID, and the
// sender logs it. One goroutine per peer sends its queued messages, a batch
// per request, so messages to a peer keep their order; a full queue or a
// failed request drops messages (raft retransmits) and reports the peer
// unreachable to raft.
const (
	headerCluster = "X-Kvraft-Cluster"
	headerFrom    = "X-Kvraft-From"
	headerTo      = "X-Kvraft-To"

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
	id    uint64
	addr  atomic.Pointer[string]
	queue chan *raftpb.Message
	stop  chan struct{}
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
	req.Header.Set(headerCluster, strconv.FormatUint(tr.n.cluster.Load(), 16))
	req.Header.Set(headerFrom, strconv.FormatUint(tr.n.id, 10))
	req.Header.Set(headerTo, strconv.FormatUint(to, 10))
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
		if err := tr.post(p, buf); err != nil {
			tr.failed(p.id, err)
			tr.n.reportUnreachable(p.id)
			if errors.Is(err, ErrRemoved) {
				tr.n.removedByPeer(p.id)
			}
		}
	}
}

func (tr *transport) failed(id uint64, err error) {
	tr.sendErrors.Add(1)
	s := fmt.Sprintf("to node %d: %v", id, err)
	tr.lastErr.Store(&s)
	if errors.Is(err, ErrClusterMismatch) {
		tr.rejected.Add(1)
		tr.n.log.Error("raftkv: a peer refused our messages", "peer", id, "err", err)
	}
}

func (tr *transport) post(p *peer, body []byte) error {
	ctx, cancel := context.WithTimeout(tr.ctx, tr.n.opts.SendTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+*p.addr.Load()+pathMessage, bytes.NewReader(body))
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

// checkResponse consumes resp and returns an error for a refusal.
func checkResponse(resp *http.Response) error {
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusOK:
		return nil
	case resp.StatusCode == http.StatusConflict:
		return fmt.Errorf("%w: %s", ErrClusterMismatch, bytes.TrimSpace(msg))
	case resp.StatusCode == http.StatusGone:
		return fmt.Errorf("%w: %s", ErrRemoved, bytes.TrimSpace(msg))
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
		err := tr.streamSnapshot(p, m, snap)
		snap.Close()
		status := raft.SnapshotFinish
		if err != nil {
			status = raft.SnapshotFailure
			tr.failed(p.id, fmt.Errorf("snapshot %d: %w", m.GetSnapshot().GetMetadata().GetIndex(), err))
			tr.n.m.snapshotsFailed.Add(1)
		} else {
			tr.n.m.snapshotsSent.Add(1)
		}
		tr.n.reportSnapshot(p.id, status)
	}()
}

func (tr *transport) streamSnapshot(p *peer, m *raftpb.Message, snap *kvbuf.Snapshot) error {
	hdr, err := proto.Marshal(m)
	if err != nil {
		return err
	}
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
			_, err = snap.Export(ctx, bw, m.GetSnapshot().GetMetadata().GetIndex())
		}
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
		written <- err
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+*p.addr.Load()+pathSnapshot, pr)
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
	return err
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
	})
	return n.handler
}

// checkPeerRequest refuses a request of another cluster or for another
// node, or from a removed node: the status code and the reason.
func (n *Node) checkPeerRequest(r *http.Request) (int, error) {
	cluster, err := strconv.ParseUint(r.Header.Get(headerCluster), 16, 64)
	if err != nil {
		return http.StatusBadRequest, fmt.Errorf("raftkv: bad %s header %q", headerCluster, r.Header.Get(headerCluster))
	}
	to, err := strconv.ParseUint(r.Header.Get(headerTo), 10, 64)
	if err != nil {
		return http.StatusBadRequest, fmt.Errorf("raftkv: bad %s header %q", headerTo, r.Header.Get(headerTo))
	}
	ok, err := n.adoptCluster(cluster)
	if err != nil {
		return http.StatusInternalServerError, err
	}
	if !ok {
		return http.StatusConflict, fmt.Errorf("raftkv: node %d is in cluster %016x, the request is from cluster %016x: %w", n.id, n.cluster.Load(), cluster, ErrClusterMismatch)
	}
	if to != n.id {
		return http.StatusConflict, fmt.Errorf("raftkv: this is node %d, not node %d", n.id, to)
	}
	from, err := strconv.ParseUint(r.Header.Get(headerFrom), 10, 64)
	if err != nil {
		return http.StatusBadRequest, fmt.Errorf("raftkv: bad %s header %q", headerFrom, r.Header.Get(headerFrom))
	}
	if n.wasRemoved(from) {
		return http.StatusGone, fmt.Errorf("raftkv: node %d was removed from the cluster", from)
	}
	return 0, nil
}

// maxMessageBody bounds a request of messages: a batch may exceed
// defaultMaxMessageBatchBytes by one message, which holds at most
// MaxSizePerMsg of entries, or one entry of the largest value.
func (n *Node) maxMessageBody() int64 {
	o := n.opts.Engine.EnsureDefaults()
	return int64(defaultMaxMessageBatchBytes) + int64(n.opts.MaxSizePerMsg) + int64(o.MaxKeySize+o.MaxValueSize) + 1<<20
}

func (n *Node) handleMessages(w http.ResponseWriter, r *http.Request) {
	if code, err := n.checkPeerRequest(r); err != nil {
		http.Error(w, err.Error(), code)
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
		http.Error(w, ErrStopped.Error(), http.StatusServiceUnavailable)
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
