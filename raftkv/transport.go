package raftkv

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
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
//	POST /raft/stream    a stream of messages: (uvarint length, protobuf raftpb.Message)*
//	POST /raft/snapshot  one snapshot (see snapshot.go)
//
// Each node keeps one stream open to each peer: a long-lived request whose
// body its send loop writes message batches into as raft hands them over,
// one write per batch, without waiting for an answer (raft's own messages
// acknowledge what arrived). A peer's messages keep their order. The
// receiver answers 200 at once, reads the frames as they arrive and steps
// each batch into raft; the stream ends when the sender closes it (the
// response body is then empty), or when the receiver refuses it later or
// stops (the response body is then "<status> <refusal kind>\n<reason>").
// A write that takes longer than SendTimeout (a peer that stopped reading)
// aborts the stream. A failed stream drops the messages it carried (raft
// retransmits), reports the peer unreachable to raft, and the next
// message opens a new one; so does a full queue.
//
// Every request carries the headers below: the sender's cluster ID and
// bootstrap hash, its ID and incarnation, the receiver's ID and the
// receiver's incarnation as the sender's membership records it (0 if none
// yet). The receiver refuses (see Node.checkPeer), when a stream opens and
// again for every batch, with 409 Conflict and the kind of refusal in the
// X-Kvraft-Refusal header (or the stream's last line):
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
// and answers 410 Gone to a removed node, which stops (ErrRemoved). A
// sender whose headers change (it learns the cluster ID, or the peer's
// incarnation) opens a new stream.
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

	pathStream   = "/raft/stream"
	pathSnapshot = "/raft/snapshot"

	// maxSendBatch bounds the bytes of messages a send loop writes at
	// once (it may exceed it by one message).
	maxSendBatch = 1 << 20
	// maxStepBatch bounds the messages a receiver steps into raft with one
	// call of the Ready loop.
	maxStepBatch = 512
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
	// down is whether the last stream to the peer failed (owned by its
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

// sendOff is send for a goroutine other than the Ready loop (the append
// loop): a full queue is reported to raft through the loop's queue.
func (tr *transport) sendOff(m *raftpb.Message) {
	p := tr.peer(m.GetTo())
	if p == nil {
		return
	}
	select {
	case p.queue <- m:
	default:
		tr.n.reportUnreachable(m.GetTo())
	}
}

// streamHeaders are the headers a stream was opened with that may change
// while it is open: the sender's cluster ID and bootstrap hash and the
// receiver's recorded incarnation.
type streamHeaders struct{ cluster, bootstrap, toIncarnation uint64 }

func (tr *transport) headers(to uint64) streamHeaders {
	n := tr.n
	return streamHeaders{n.cluster.Load(), n.bootstrap.Load(), n.view.Load().incarnations[to]}
}

func (tr *transport) setHeaders(req *http.Request, to uint64, sh streamHeaders) {
	n := tr.n
	req.Header.Set(headerCluster, strconv.FormatUint(sh.cluster, 16))
	req.Header.Set(headerBootstrap, strconv.FormatUint(sh.bootstrap, 16))
	req.Header.Set(headerFrom, strconv.FormatUint(n.id, 10))
	req.Header.Set(headerIncarnation, strconv.FormatUint(n.incarnation, 16))
	req.Header.Set(headerTo, strconv.FormatUint(to, 10))
	req.Header.Set(headerToIncarnation, strconv.FormatUint(sh.toIncarnation, 16))
}

// A stream is one open POST /raft/stream to a peer. The send loop writes
// batches of frames into w; the request runs in a goroutine of its own,
// which reports how it ended on done (nil: the sender closed it and the
// peer took everything).
type stream struct {
	w        *io.PipeWriter
	cancel   context.CancelFunc
	watchdog *time.Timer // cancels a write that takes longer than SendTimeout
	done     chan error
	accepted chan struct{} // closed when the peer answers 200
	hdr      streamHeaders
}

// openStream starts a stream to p.
func (tr *transport) openStream(p *peer) *stream {
	ctx, cancel := context.WithCancel(tr.ctx)
	pr, pw := io.Pipe()
	s := &stream{w: pw, cancel: cancel, done: make(chan error, 1), accepted: make(chan struct{}), hdr: tr.headers(p.id)}
	s.watchdog = time.AfterFunc(time.Hour, cancel)
	s.watchdog.Stop()
	// A cancelled request waits for its body's reader (the HTTP client's
	// write loop) to return: closing the pipe makes it, and fails a write
	// blocked on it.
	context.AfterFunc(ctx, func() { pw.CloseWithError(errStreamEnded) })
	go func() {
		err := tr.runStream(ctx, p, pr, s)
		pr.CloseWithError(cmp.Or(err, errStreamEnded))
		s.done <- err
	}()
	return s
}

// errStreamEnded fails a write to a stream whose request ended.
var errStreamEnded = errors.New("raftkv: the stream to the peer ended")

// runStream sends the request of stream s and returns how it ended.
func (tr *transport) runStream(ctx context.Context, p *peer, body io.Reader, s *stream) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, tr.url(p, pathStream), body)
	if err != nil {
		return err
	}
	tr.setHeaders(req, p.id, s.hdr)
	req.Close = true // one stream per connection (see handleStream)
	resp, err := tr.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return checkResponse(resp)
	}
	close(s.accepted)
	// The body is empty unless the peer ended the stream itself.
	end, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return err
	}
	if len(end) == 0 {
		return nil
	}
	line, msg, _ := bytes.Cut(end, []byte("\n"))
	codeText, kind, _ := strings.Cut(string(line), " ")
	code, err := strconv.Atoi(codeText)
	if err != nil {
		return errorf("the peer ended the stream with %q", end)
	}
	return refusalError(code, kind, msg)
}

// write writes a batch of frames to the stream, aborting it if that takes
// longer than timeout.
func (s *stream) write(b []byte, timeout time.Duration) error {
	s.watchdog.Reset(timeout)
	_, err := s.w.Write(b)
	s.watchdog.Stop()
	return err
}

// close ends the stream: gracefully (the peer reads everything written)
// unless that takes longer than timeout. It returns how the request ended.
func (s *stream) close(timeout time.Duration) error {
	s.watchdog.Reset(timeout)
	_ = s.w.Close()
	err := <-s.done
	s.watchdog.Stop()
	s.cancel()
	return err
}

// sendLoop sends the messages queued for p, in order, over one stream at a
// time.
func (tr *transport) sendLoop(p *peer) {
	defer tr.wg.Done()
	timeout := tr.n.opts.SendTimeout
	var s *stream
	defer func() {
		if s != nil {
			s.cancel()
			<-s.done
		}
	}()
	var buf, frame []byte
	for {
		var m *raftpb.Message
		var done <-chan error
		if s != nil {
			done = s.done
		}
		select {
		case m = <-p.queue:
		case err := <-done:
			// The peer ended the stream while it was idle.
			s.cancel()
			s = nil
			tr.streamFailed(p, cmp.Or(err, errStreamEnded))
			continue
		case <-p.stop:
			return
		}
		buf = buf[:0]
		for {
			var err error
			if frame, err = (proto.MarshalOptions{}).MarshalAppend(frame[:0], m); err != nil {
				tr.n.log.Error("raftkv: marshal message", "type", m.GetType(), "err", err)
			} else {
				buf = binary.AppendUvarint(buf, uint64(len(frame)))
				buf = append(buf, frame...)
			}
			if len(buf) >= maxSendBatch {
				break
			}
			select {
			case m = <-p.queue:
				continue
			default:
			}
			break
		}
		if s != nil && s.hdr != tr.headers(p.id) {
			// The stream's headers are out of date: a new one says what
			// this node knows now.
			if err := s.close(timeout); err != nil {
				tr.streamFailed(p, err)
			}
			s = nil
		}
		if s == nil {
			// Nothing is written before the peer accepts the stream: a
			// server that does not (another handler, an old version)
			// could read and drop the messages while it answers.
			s = tr.openStream(p)
			if err := s.waitAccepted(timeout, p.stop); err != nil {
				s = nil
				if err != errStopping {
					tr.streamFailed(p, err)
				}
				continue
			}
			tr.outcome(p, nil)
		}
		if err := s.write(buf, timeout); err != nil {
			s.cancel()
			err = cmp.Or(<-s.done, err) // the request's end says why
			s = nil
			tr.streamFailed(p, err)
			continue
		}
	}
}

// errStopping is waitAccepted's error when the send loop must stop.
var errStopping = errors.New("raftkv: stopping")

// waitAccepted waits until the peer accepts the stream, at most timeout.
// On error the stream is over.
func (s *stream) waitAccepted(timeout time.Duration, stop <-chan struct{}) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	var err error
	select {
	case <-s.accepted:
		return nil
	case err = <-s.done:
		s.cancel()
		return cmp.Or(err, errStreamEnded)
	case <-t.C:
		err = errorf("no answer to a new stream within %v", timeout)
	case <-stop:
		err = errStopping
	}
	s.cancel()
	<-s.done
	return err
}

// streamFailed handles the end of a stream to p that lost messages: raft
// learns the peer is unreachable; a peer that says this node was removed
// or replaced stops it.
func (tr *transport) streamFailed(p *peer, err error) {
	tr.outcome(p, err)
	if tr.ctx.Err() != nil {
		return
	}
	tr.n.reportUnreachable(p.id)
	switch {
	case errors.Is(err, ErrRemoved):
		tr.n.removedByPeer(p.id)
	case errors.As(err, new(*replacedError)):
		tr.n.fail(errorf("node %d: %v: %w; %s", tr.n.id, err, ErrLostState, replaceAdvice(tr.n.id)))
	}
}

// refusalLogEvery bounds how often a peer's refusals are logged.
const refusalLogEvery = 10 * time.Second

// outcome records how a stream (or a request) to p went: it counts a
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
	if tr.ctx.Err() != nil {
		return // stopping
	}
	tr.failed(p.id, err)
	if (errors.Is(err, ErrClusterMismatch) || errors.Is(err, ErrUnauthenticated)) && time.Since(p.lastLogged) >= refusalLogEvery {
		p.lastLogged = time.Now()
		n.log.Error("raftkv: a peer refused our messages", "peer", p.id, "addr", *p.addr.Load(), "err", err)
	}
	if !p.down {
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
	if resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusOK {
		return nil
	}
	return refusalError(resp.StatusCode, resp.Header.Get(headerRefusal), msg)
}

// refusalError is the error of a peer's answer with status code, refusal
// kind (headerRefusal) and body msg.
func refusalError(code int, kind string, msg []byte) error {
	switch {
	case code == http.StatusConflict && kind == refusedReplaced:
		return &replacedError{msg: string(bytes.TrimSpace(msg))}
	case code == http.StatusConflict:
		return refused(ErrClusterMismatch, msg)
	case code == http.StatusForbidden:
		return refused(ErrUnauthenticated, msg)
	case code == http.StatusGone:
		return refused(ErrRemoved, msg)
	}
	return fmt.Errorf("HTTP %d: %s", code, bytes.TrimSpace(msg))
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
			tr.failed(p.id, errorf("snapshot %d: %w", idx, err))
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
		tr.setHeaders(req, p.id, tr.headers(p.id))
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
		mux.HandleFunc("POST "+pathStream, n.handleStream)
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
		return errorf("node %d: a peer must present a certificate of the cluster's CA: %w", n.id, ErrUnauthenticated)
	}
	if err := VerifyPeerCert(r.TLS.PeerCertificates, n.opts.PeerTLS.RootCAs); err != nil {
		return errorf("node %d: the peer's certificate is not of the cluster's CA: %w: %w", n.id, err, ErrUnauthenticated)
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
			return h, errorf("bad %s header %q", f.name, r.Header.Get(f.name))
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

// checkPeerRequest parses a request's transport headers and checks them
// (checkPeer).
func (n *Node) checkPeerRequest(r *http.Request) (peerHeaders, *refusal) {
	h, err := parsePeerHeaders(r)
	if err != nil {
		return h, &refusal{code: http.StatusBadRequest, err: err}
	}
	return h, n.checkPeer(h)
}

// checkPeer refuses a request of another cluster or for another node, from
// a removed node or from a node whose directory was replaced (see the
// transport's refusals), and stops this node if the sender knows its ID by
// another directory. A joining node takes its cluster from the first
// request it accepts; the leader notes the sender's incarnation for the
// cluster to record if it has none. A stream is checked when it opens and
// again before each batch it carries is stepped.
func (n *Node) checkPeer(h peerHeaders) *refusal {
	cluster, bootstrap := n.cluster.Load(), n.bootstrap.Load()
	joining := bootstrap == 0
	switch {
	case joining:
	case cluster != 0 && h.cluster != 0:
		if h.cluster != cluster {
			return &refusal{http.StatusConflict, refusedCluster, errorf("node %d is in cluster %016x, the request is from node %d of cluster %016x: %w", n.id, cluster, h.from, h.cluster, ErrClusterMismatch)}
		}
	case h.bootstrap != bootstrap:
		// One side has no cluster ID yet: the bootstrap hashes say.
		return &refusal{http.StatusConflict, refusedCluster, errorf("node %d was bootstrapped as %016x, the request is from node %d bootstrapped as %016x (another cluster token or other initial members): %w", n.id, bootstrap, h.from, h.bootstrap, ErrClusterMismatch)}
	}
	if h.to != n.id {
		return &refusal{http.StatusConflict, refusedNode, errorf("this is node %d, not node %d: %w", n.id, h.to, ErrClusterMismatch)}
	}
	if h.toIncarnation != 0 && h.toIncarnation != n.incarnation {
		err := errorf("node %d: node %d knows node %d by another data directory (incarnation %016x, this one is %016x): this directory was wiped or replaced: %w; %s",
			n.id, h.from, n.id, h.toIncarnation, n.incarnation, ErrLostState, replaceAdvice(n.id))
		n.fail(err)
		return &refusal{http.StatusConflict, refusedNotYou, err}
	}
	if joining {
		if h.bootstrap == 0 {
			return &refusal{http.StatusConflict, refusedCluster, errorf("node %d is joining a cluster; node %d has none either: %w", n.id, h.from, ErrClusterMismatch)}
		}
		if err := n.adoptCluster(h.cluster, h.bootstrap); err != nil {
			return &refusal{code: http.StatusInternalServerError, err: err}
		}
	}
	if n.wasRemoved(h.from) {
		return &refusal{code: http.StatusGone, err: errorf("node %d was removed from the cluster", h.from)}
	}
	switch rec := n.view.Load().incarnations[h.from]; {
	case rec != 0 && rec != h.incarnation:
		if n.logEvery(fmt.Sprintf("replaced %d", h.from)) {
			n.log.Warn("raftkv: refused a node whose data directory was replaced", "peer", h.from, "incarnation", fmt.Sprintf("%016x", h.incarnation),
				"recorded", fmt.Sprintf("%016x", rec))
		}
		return &refusal{http.StatusConflict, refusedReplaced, errorf("node %d refuses node %d: the cluster knows node %d by another data directory (incarnation %016x, the request's is %016x)", n.id, h.from, h.from, rec, h.incarnation)}
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

// maxFrame bounds one message of a stream: raft's appends hold at most
// MaxSizePerMsg of entries, or one entry if it is larger, and an entry is
// at most a batch of writes or one write of the largest size.
func (n *Node) maxFrame() int {
	return int(n.opts.MaxSizePerMsg) + maxBatchEntryBytes + n.maxPayload + 1<<20
}

// handleStream receives a stream of messages from a peer (see the
// transport): it answers 200 once the headers pass, then steps the
// messages into raft a batch at a time, as they arrive, until the sender
// ends the stream, a check refuses it, or this node stops (or its server
// shuts down). Those end the response with "<status> <kind>\n<reason>".
func (n *Node) handleStream(w http.ResponseWriter, r *http.Request) {
	// HTTP/1.x: answer while the body is still coming (HTTP/2 always
	// can). Without it the server would read the body before sending a
	// refusal, and a stream's body does not end.
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex()
	// A stream's connection is not reused: the server would read the rest
	// of a body the handler did not (a refused stream's) as the next
	// request.
	w.Header().Set("Connection", "close")
	h, rf := n.checkPeerRequest(r)
	if rf != nil {
		rf.write(w)
		return
	}
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	// A read blocked on the body ends when the node stops or the server
	// shuts down.
	unblock := func() { _ = rc.SetReadDeadline(time.Now()) }
	stopNode := context.AfterFunc(n.ctx, unblock)
	defer stopNode()
	stopServer := context.AfterFunc(n.serverShutdown(r), unblock)
	defer stopServer()
	end := func(rf *refusal) {
		kind := rf.kind
		if kind == "" {
			kind = "-"
		}
		fmt.Fprintf(w, "%d %s\n%s", rf.code, kind, rf.err.Error())
	}
	br := bufio.NewReaderSize(r.Body, 64<<10)
	limit := n.maxFrame()
	var frame []byte
	for {
		var msgs []*raftpb.Message
		for len(msgs) == 0 || br.Buffered() > 0 && len(msgs) < maxStepBatch {
			m, err := n.readFrame(br, &frame, limit)
			switch {
			case err == nil:
				msgs = append(msgs, m)
				continue
			case errors.Is(err, io.EOF) && len(msgs) == 0:
				return // the sender closed the stream
			case n.ctx.Err() != nil:
				end(&refusal{code: http.StatusServiceUnavailable, err: n.stopped()})
			case errors.Is(err, errBadFrame):
				end(&refusal{code: http.StatusBadRequest, err: err})
			default:
				end(&refusal{code: http.StatusServiceUnavailable, err: errorf("read stream: %w", err)})
			}
			return
		}
		if rf := n.checkPeer(h); rf != nil {
			end(rf)
			return
		}
		if err := n.enqueue(r.Context(), func(rn *raft.RawNode) { n.stepMessages(rn, msgs) }); err != nil {
			end(&refusal{code: http.StatusServiceUnavailable, err: err}) // stopped, or the request ended
			return
		}
	}
}

// errBadFrame marks a stream frame that is not a message for this node.
var errBadFrame = errors.New("raftkv: malformed message stream")

// readFrame reads one message of a stream, using *buf for its bytes.
func (n *Node) readFrame(br *bufio.Reader, buf *[]byte, limit int) (*raftpb.Message, error) {
	size, err := binary.ReadUvarint(br)
	switch {
	case errors.Is(err, io.EOF):
		return nil, io.EOF
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, errorf("the stream ends within a frame: %w", errBadFrame)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, err
	case err != nil:
		return nil, errorf("frame length: %v: %w", err, errBadFrame)
	case size > uint64(limit):
		return nil, errorf("frame of %d bytes (at most %d): %w", size, limit, errBadFrame)
	}
	if cap(*buf) < int(size) {
		*buf = make([]byte, size)
	}
	b := (*buf)[:size]
	if _, err := io.ReadFull(br, b); errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return nil, errorf("the stream ends within a frame: %w", errBadFrame)
	} else if err != nil {
		return nil, err
	}
	m := &raftpb.Message{}
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, errorf("message: %v: %w", err, errBadFrame)
	}
	if m.GetTo() != n.id || m.GetType() == raftpb.MsgSnap {
		return nil, errorf("message %v to node %d in a stream for node %d: %w", m.GetType(), m.GetTo(), n.id, errBadFrame)
	}
	return m, nil
}

// serverShutdown returns a context that ends when the HTTP server serving
// r shuts down (http.Server.RegisterOnShutdown: streams are long-lived
// requests that Shutdown would otherwise wait for), or never if r carries
// no server.
func (n *Node) serverShutdown(r *http.Request) context.Context {
	srv, ok := r.Context().Value(http.ServerContextKey).(*http.Server)
	if !ok {
		return context.Background()
	}
	n.shutdownMu.Lock()
	defer n.shutdownMu.Unlock()
	if ctx, ok := n.shutdowns[srv]; ok {
		return ctx
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv.RegisterOnShutdown(cancel)
	if n.shutdowns == nil {
		n.shutdowns = map[*http.Server]context.Context{}
	}
	n.shutdowns[srv] = ctx
	return ctx
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
	return errorf("node %d: leader %d (term %d) says entries up to %d are committed here, but this node's log ends at %d: %w; %s",
		n.id, m.GetFrom(), m.GetTerm(), m.GetCommit(), last, ErrLostState, replaceAdvice(n.id))
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
