package raftkv

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/internal/fsutil"
)

// Backups. Backup streams the engine of a running node as of one applied
// index, in kvbuf's snapshot stream format (Snapshot.Export: framed,
// checksummed records and a trailer with the content's digest), the format
// the nodes send each other. Restore makes the data directory of a node of
// a new cluster from such a stream: run it once per node of the new
// cluster, with the same stream and the same Peers, then Open each (not
// Join). The new cluster starts at the backup's index with those members,
// and gets a cluster ID of its own.

// BackupOptions chooses what Backup waits for. nil means the defaults.
type BackupOptions struct {
	// Stale backs up this node's applied state as it is, without a
	// ReadIndex round: it may miss writes acknowledged elsewhere.
	// Default: false, the backup holds every write acknowledged before
	// Backup was called.
	Stale bool

	// Snapshot, if set, is called with the engine snapshot the backup
	// streams and its index before the stream is written (cmd/kvraft
	// computes the snapshot's digest with it). The snapshot is closed
	// when Backup returns.
	Snapshot func(s *kvbuf.Snapshot, index uint64) error
}

// Backup writes a snapshot stream of this node's engine to w and returns
// the applied index it holds exactly the entries up to, and the stream's
// size. The engine is read from a kvbuf snapshot: writes go on meanwhile.
// Errors: ErrUnsupported for another state machine, ctx.Err(), ErrStopped,
// w's write errors, and kvbuf.ErrClosed if this node replaced its engine
// meanwhile (a follower that fell behind installed a snapshot: retry, or
// back up another node).
func (n *Node) Backup(ctx context.Context, w io.Writer, o *BackupOptions) (index uint64, size int64, err error) {
	if o == nil {
		o = &BackupOptions{}
	}
	if err := n.linearize(ctx, &ReadOptions{Stale: o.Stale}); err != nil {
		return 0, 0, err
	}
	s, idx, err := n.snapshotAt(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer s.Close()
	if o.Snapshot != nil {
		if err := o.Snapshot(s, idx); err != nil {
			return idx, 0, err
		}
	}
	size, err = s.Export(ctx, w, idx)
	if err != nil {
		return idx, size, errorf("node %d: backup at %d: %w", n.id, idx, err)
	}
	return idx, size, nil
}

// Restore makes opts.Dir the data directory of node opts.ID of a new
// cluster of opts.Peers (opts.ID among them), holding the content of the
// snapshot stream r (written by Backup or GET /snapshot), and returns the
// stream's index, where the new cluster's log starts. opts.Dir must not
// exist or be empty. Every node of the new cluster is restored from the
// same stream with the same Peers and ClusterToken; Open then starts each
// (without Join), and the first leader gives the cluster a new cluster ID:
// the old cluster's nodes and messages are refused.
//
// Errors: kvbuf.ErrBadOptions (Join set, opts.ID not in Peers), an error wrapping
// fs.ErrExist for a directory that is not empty, kvbuf's stream errors
// (kvbuf.ErrBadStream), ctx.Err(). On error opts.Dir is removed if Restore
// created it.
func Restore(ctx context.Context, opts *Options, r io.Reader) (index uint64, err error) {
	o, err := opts.resolve()
	if err != nil {
		return 0, err
	}
	if o.Join {
		return 0, errorf("Restore makes a node of a new cluster: Join must be false: %w", kvbuf.ErrBadOptions)
	}
	if _, in := o.Peers[o.ID]; !in {
		return 0, errorf("node %d is not in Peers: %w", o.ID, kvbuf.ErrBadOptions)
	}
	if ents, err := os.ReadDir(o.Dir); err == nil && len(ents) > 0 {
		return 0, errorf("restore into %s: not empty: %w", o.Dir, fs.ErrExist)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, errorf("restore into %s: %w", o.Dir, err)
	}
	// Durably, as Open makes it (see mkdirAllDurable).
	if err := mkdirAllDurable(nodeFS(nil, o.DirMode), o.Dir, o.DirMode); err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(o.Dir)
		}
	}()
	lock, err := lockDir(o.Dir, fileMode(o.DirMode))
	if err != nil {
		return 0, err
	}
	defer lock.Close()
	staging := filepath.Join(o.Dir, initialEngine+stagingSuffix)
	idx, err := kvbuf.Install(ctx, staging, r, o.Engine)
	if err != nil {
		return 0, errorf("restore into %s: %w", o.Dir, err)
	}
	name := engineDirName(idx)
	if err := os.Rename(staging, filepath.Join(o.Dir, name)); err != nil {
		return 0, errorf("%w", err)
	}
	if err := fsutil.SyncDir(o.Dir); err != nil {
		return 0, errorf("%w", err)
	}
	// The log starts at the backup's index, in term 1, with the new
	// members as voters; the engine pointer names the restored engine.
	ls, err := openLogStore(nodeFS(nil, o.DirMode), filepath.Join(o.Dir, logDir))
	if err != nil {
		return 0, err
	}
	defer func() {
		if cerr := ls.close(); err == nil && cerr != nil {
			err = errorf("%w", cerr)
		}
	}()
	const term = 1
	m := membership{
		conf:         &raftpb.ConfState{Voters: slices.Sorted(maps.Keys(o.Peers))},
		peers:        maps.Clone(o.Peers),
		incarnations: map[uint64]uint64{},
	}
	b := ls.db.NewBatch()
	defer b.Close()
	tr := binary.LittleEndian.AppendUint64(nil, idx)
	tr = binary.LittleEndian.AppendUint64(tr, term)
	hs, err := proto.Marshal(&raftpb.HardState{Term: proto.Uint64(term), Commit: proto.Uint64(idx)})
	if err != nil {
		return 0, err
	}
	for _, kv := range []struct{ k, v []byte }{
		{keyTrunc, tr}, {keyHardState, hs}, {keyEngine, []byte(name)}, {indexKey(prefixMembership, idx), m.encode()},
	} {
		if err := b.Set(kv.k, kv.v, nil); err != nil {
			return 0, err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return 0, errorf("restore into %s: %w", o.Dir, err)
	}
	// A bootstrap hash of its own: before the new cluster has its ID, it
	// must not take an old node bootstrapped with the same flags for one
	// of its own.
	id := identity{bootstrap: bootstrapHash(fmt.Sprintf("%s\x00restored at %d", o.ClusterToken, idx), o.Peers),
		node: o.ID, incarnation: randomID(), token: o.ClusterToken}
	if err := writeIdentity(nodeFS(nil, o.DirMode), o.Dir, id); err != nil {
		return 0, err
	}
	return idx, nil
}
