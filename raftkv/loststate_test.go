package raftkv

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// raisedByRaft tells raft's panics from every other.
func TestRaisedByRaft(t *testing.T) {
	raised := func(f func()) (got bool) {
		defer func() { got = raisedByRaft(recover()) }()
		f()
		return false
	}
	for name, c := range map[string]struct {
		f    func()
		want bool
	}{
		"raft's logger": {func() { (&raftLogger{l: discard()}).Panicf("tocommit(%d) is out of range", 9) }, true},
		"raft's code":   {func() { _, _ = raft.NewRawNode(&raft.Config{}) }, true}, // ID 0: panic(err.Error())
		"runtime error": {func() {
			var p *raftpb.Message
			_ = *p.Term
		}, false},
		"this package": {func() { panic("not raft's") }, false},
	} {
		if got := raised(c.f); got != c.want {
			t.Errorf("%s: raisedByRaft = %v, want %v", name, got, c.want)
		}
	}
}

// A leader's heartbeat that says more is committed here than this node's
// log holds (the node was wiped or restored from an old copy: raft panics
// "tocommit(N) is out of range [lastIndex(M)]") stops the node with
// ErrLostState, naming the node, the index and the remedy; the process
// goes on.
func TestLostStateHeartbeat(t *testing.T) {
	c := newCluster(t, 1, nil)
	n := c.leader(5 * time.Second)
	term := n.Status().Term
	hb := &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: proto.Uint64(2), To: proto.Uint64(1),
		Term: proto.Uint64(term + 1), Commit: proto.Uint64(20024)}
	hdr := c.peerHeaders(n, 2)
	if code, body := post(t, c.tn(1).addr, pathStream, hdr, bytes.NewReader(batch(hb))); code != 204 {
		t.Fatalf("HTTP %d %s", code, body)
	}
	waitFor(t, 10*time.Second, "the node to stop", func() bool { return n.Err() != nil })
	err := n.Err()
	if !errors.Is(err, ErrLostState) || !strings.Contains(err.Error(), "20024") || !strings.Contains(err.Error(), "node 1") ||
		!strings.Contains(err.Error(), "new ID") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("node error: %v", err)
	}
	if _, err := n.Get(bg, "ks", []byte("k"), nil); !errors.Is(err, ErrStopped) {
		t.Fatalf("a read of the stopped node: %v", err)
	}
	t.Log(err)
}

// A panic of raft's on the Ready loop (here: the heartbeat above, stepped
// without the node's check) stops the node with ErrRaftState carrying
// raft's message and the node's indexes, instead of killing the process.
func TestRaftPanicStopsNode(t *testing.T) {
	c := newCluster(t, 1, nil)
	n := c.leader(5 * time.Second)
	hb := &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: proto.Uint64(2), To: proto.Uint64(1),
		Term: proto.Uint64(n.Status().Term + 1), Commit: proto.Uint64(20024)}
	if err := n.enqueue(bg, func(rn *raft.RawNode) { _ = rn.Step(hb) }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the node to stop", func() bool { return n.Err() != nil })
	err := n.Err()
	if !errors.Is(err, ErrRaftState) || !strings.Contains(err.Error(), "tocommit(20024)") || !strings.Contains(err.Error(), "node 1") {
		t.Fatalf("node error: %v", err)
	}
	t.Log(err)
}

// Open refuses a log whose commit index is past its last entry (raft would
// panic on restart) with ErrLostState.
func TestOpenCommitPastLog(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "node")
	singleNode(t, dir, nil)
	ls, err := openLogStore(nodeFS(nil, DefaultDirMode), filepath.Join(dir, logDir))
	if err != nil {
		t.Fatal(err)
	}
	_, last := ls.bounds()
	hs := ls.hardState()
	hs.Commit = proto.Uint64(last + 100)
	if err := ls.save(hs, nil, true); err != nil {
		t.Fatal(err)
	}
	ls.close()
	_, err = Open(crashOptions(dir))
	if !errors.Is(err, ErrLostState) || !strings.Contains(err.Error(), strconv.FormatUint(last+100, 10)) {
		t.Fatalf("Open: %v, want ErrLostState naming the commit index", err)
	}
	t.Log(err)
}

// Open refuses a node whose engine has applied entries its log no longer
// holds (the log lost synced writes: its syncs were off, or it was
// restored from an older copy than the engine) with ErrLostState, one line
// naming the node, both indexes and the remedy. Without the check the node
// started and then never caught up.
func TestOpenEngineAheadOfLog(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "node")
	singleNode(t, dir, nil)
	ls, err := openLogStore(nodeFS(nil, DefaultDirMode), filepath.Join(dir, logDir))
	if err != nil {
		t.Fatal(err)
	}
	trunc, last := ls.bounds()
	if last < trunc+3 {
		t.Fatalf("log (%d, %d]: too short to cut", trunc, last)
	}
	// The log loses its last two entries; its commit index stays inside it.
	if err := ls.db.DeleteRange(entryKey(last-1), entryKey(last+1), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	hs := ls.hardState()
	hs.Commit = proto.Uint64(last - 2)
	if err := ls.save(hs, nil, true); err != nil {
		t.Fatal(err)
	}
	if err := ls.close(); err != nil {
		t.Fatal(err)
	}
	_, err = Open(crashOptions(dir))
	msg := fmt.Sprint(err)
	if !errors.Is(err, ErrLostState) || !strings.Contains(msg, "node 1") || !strings.Contains(msg, "log ends at "+strconv.FormatUint(last-2, 10)) ||
		!strings.Contains(msg, "new ID") || strings.Contains(msg, "\n") {
		t.Fatalf("Open: %v, want ErrLostState naming the node, the indexes and the remedy", err)
	}
	t.Log(err)
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
