package raftkv

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/internal/fsutil"
)

// Snapshots travel as one HTTP request to /raft/snapshot: the snapshot
// message (uvarint length, then the protobuf raftpb.Message, whose
// Snapshot carries the metadata and the membership but no data), then the
// engine stream of kvbuf's Snapshot.Export. The receiver installs the
// stream into Dir/engine-<index>.staging (kvbuf.Install: the new engine's
// watermark is the snapshot's index), renames it to Dir/engine-<index>,
// and only then steps the message into raft. When raft hands the snapshot
// back in a Ready, the node switches to that engine with one synced write
// of its log store (installSnapshot): a crash before it leaves the old
// engine live (and the received one is removed at the next Open), a crash
// after it the new one.

// maxSnapshotHeader bounds the message that precedes a snapshot stream.
const maxSnapshotHeader = 16 << 20

// installSnapshot handles a Ready carrying a snapshot: the received engine
// becomes the live one and the log restarts at the snapshot's index.
func (n *Node) installSnapshot(rd raft.Ready) error {
	n.switchMu.Lock()
	defer n.switchMu.Unlock()
	meta := rd.Snapshot.GetMetadata()
	idx := meta.GetIndex()
	name := engineDirName(idx)
	path := filepath.Join(n.dir, name)
	if _, err := os.Stat(path); err != nil {
		return errorf("snapshot %d was not received (%w)", idx, err)
	}
	m, err := decodeMembership(rd.Snapshot.GetData())
	if err != nil {
		return errorf("snapshot %d: %w", idx, err)
	}
	if wm := n.sm.durable(); idx <= wm || idx <= n.applied {
		// raft only hands over snapshots above the commit index; the
		// watermark must never go backwards.
		return errorf("snapshot %d at or below the applied index %d (watermark %d)", idx, n.applied, wm)
	}
	if err := n.ls.installSnapshot(meta, m, name, rd.HardState, rd.Entries); err != nil {
		return errorf("switch to snapshot %d: %w", idx, err)
	}
	// The switch is durable: from here a restart opens the new engine.
	n.engMu.Lock()
	oldName := n.engName
	cerr := n.sm.close()
	eng, err := n.openSM(path)
	if err == nil {
		n.sm, n.engName = eng, name
	}
	n.engMu.Unlock()
	if err != nil {
		return errorf("open the engine of snapshot %d: %w", idx, err)
	}
	if cerr != nil {
		n.log.Warn("raftkv: closing the replaced engine", "err", cerr)
	}
	if wm := eng.durable(); wm != idx {
		return errorf("the engine of snapshot %d has watermark %d", idx, wm)
	}
	if err := os.RemoveAll(filepath.Join(n.dir, oldName)); err != nil {
		n.log.Warn("raftkv: removing the replaced engine", "dir", oldName, "err", err)
	}
	if m.cluster != 0 && n.cluster.Load() == 0 {
		if err := n.assignCluster(m.cluster); err != nil {
			return err
		}
	}
	n.applied, n.conf, n.gone, n.incs = idx, m.conf, m.removed, m.incarnations
	for id := range n.peers {
		if _, ok := m.peers[id]; !ok && id != n.id {
			n.tr.removePeer(id)
		}
	}
	n.peers = m.peers
	for id, addr := range n.peers {
		if id != n.id {
			n.tr.addPeer(id, addr)
		}
	}
	n.publishMembers()
	n.publishApplied(idx)
	n.m.snapshotsInstalled.Add(1)
	n.log.Info("raftkv: installed a snapshot", "index", idx, "engine", name)
	return nil
}

// handleSnapshot receives a snapshot (see above).
func (n *Node) handleSnapshot(w http.ResponseWriter, r *http.Request) {
	if !n.enter() {
		http.Error(w, ErrStopped.Error(), http.StatusServiceUnavailable)
		return
	}
	defer n.inflight.Done()
	if _, rf := n.checkPeerRequest(r); rf != nil {
		rf.write(w)
		return
	}
	br := bufio.NewReaderSize(r.Body, 64<<10)
	m, err := readSnapshotHeader(br)
	if err == nil && (m.GetType() != raftpb.MsgSnap || m.GetTo() != n.id || raft.IsEmptySnap(m.GetSnapshot())) {
		err = fmt.Errorf("not a snapshot message for node %d", n.id)
	}
	if err != nil {
		http.Error(w, "raftkv: snapshot: "+err.Error(), http.StatusBadRequest)
		return
	}
	idx := m.GetSnapshot().GetMetadata().GetIndex()
	if !n.snapBusy.TryLock() {
		http.Error(w, "raftkv: already receiving a snapshot", http.StatusServiceUnavailable)
		return
	}
	defer n.snapBusy.Unlock()
	if idx > n.appliedNow.Load() {
		if code, err := n.receiveEngine(br, idx); err != nil {
			n.log.Warn("raftkv: snapshot receive failed", "index", idx, "from", m.GetFrom(), "err", err)
			http.Error(w, "raftkv: snapshot: "+err.Error(), code)
			return
		}
	}
	// Otherwise this node has it all already: raft answers with its index.
	if err := n.enqueue(r.Context(), func(rn *raft.RawNode) { _ = rn.Step(m) }); err != nil {
		http.Error(w, "raftkv: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// enter admits a request that must finish before Close returns.
func (n *Node) enter() bool {
	n.closing.RLock()
	defer n.closing.RUnlock()
	select {
	case <-n.stopc:
		return false
	default:
	}
	n.inflight.Add(1)
	return true
}

func readSnapshotHeader(br *bufio.Reader) (*raftpb.Message, error) {
	size, err := binary.ReadUvarint(br)
	if err != nil {
		return nil, fmt.Errorf("header length: %w", err)
	}
	if size > maxSnapshotHeader {
		return nil, fmt.Errorf("header of %d bytes", size)
	}
	buf := make([]byte, size)
	if _, err := io.ReadFull(br, buf); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	m := &raftpb.Message{}
	if err := proto.Unmarshal(buf, m); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	return m, nil
}

// receiveEngine installs the engine stream of the snapshot at idx into
// Dir/engine-<idx>, returning an HTTP status with an error. Receives are
// one at a time (snapBusy); the rename into place is ordered against the
// Ready loop's switch by switchMu.
func (n *Node) receiveEngine(r io.Reader, idx uint64) (int, error) {
	final := filepath.Join(n.dir, engineDirName(idx))
	staging := final + stagingSuffix
	if err := os.RemoveAll(staging); err != nil {
		return http.StatusInternalServerError, err
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.opts.SnapshotTimeout)
	defer cancel()
	op, err := kvbuf.Install(ctx, staging, r, n.opts.Engine)
	switch {
	case errors.Is(err, kvbuf.ErrBadStream):
		return http.StatusBadRequest, err
	case err != nil:
		return http.StatusInternalServerError, err
	case op != idx:
		_ = os.RemoveAll(staging)
		return http.StatusBadRequest, fmt.Errorf("engine stream of op %d in the snapshot message of index %d", op, idx)
	}
	n.switchMu.Lock()
	defer n.switchMu.Unlock()
	if idx <= n.appliedNow.Load() {
		// Installed meanwhile from an earlier copy of this snapshot.
		_ = os.RemoveAll(staging)
		return 0, nil
	}
	if err := os.RemoveAll(final); err != nil {
		return http.StatusInternalServerError, err
	}
	if err := os.Rename(staging, final); err != nil {
		_ = os.RemoveAll(staging)
		return http.StatusInternalServerError, err
	}
	if err := fsutil.SyncDir(n.dir); err != nil {
		return http.StatusInternalServerError, err
	}
	n.m.snapshotsReceived.Add(1)
	n.log.Info("raftkv: snapshot received", "index", idx, "dir", filepath.Base(final))
	return 0, nil
}
