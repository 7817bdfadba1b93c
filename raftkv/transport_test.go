package raftkv

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/kvbuf/kvbuf"
)

// post sends body to a node's transport path with the given headers and
// returns the status and body. For a stream the receiver accepted, they
// are those of the line that ended it, or 204 if the stream ended as the
// sender closed it.
func post(t *testing.T, addr, path string, hdr map[string]string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if path != pathStream || resp.StatusCode != http.StatusOK {
		return resp.StatusCode, string(b)
	}
	if len(b) == 0 {
		return http.StatusNoContent, ""
	}
	line, msg, _ := strings.Cut(string(b), "\n")
	codeText, _, _ := strings.Cut(line, " ")
	code, err := strconv.Atoi(codeText)
	if err != nil {
		t.Fatalf("stream ended with %q", b)
	}
	return code, msg
}

func batch(msgs ...*raftpb.Message) []byte {
	var out []byte
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			panic(err)
		}
		out = binary.AppendUvarint(out, uint64(len(b)))
		out = append(out, b...)
	}
	return out
}

// The transport refuses malformed, misaddressed and foreign requests with
// 4xx statuses, and the node goes on.
func TestTransportBadInput(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateKeyspace(ctx, "ks") })
	n1 := c.tn(1)
	c.settle(10 * time.Second)
	good := c.peerHeaders(n1.node(), 2)
	with := func(k, v string) map[string]string {
		h := map[string]string{}
		for kk, vv := range good {
			h[kk] = vv
		}
		if v == "" {
			delete(h, k)
		} else {
			h[k] = v
		}
		return h
	}
	heartbeat := &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), To: proto.Uint64(1), From: proto.Uint64(2), Term: proto.Uint64(0)}
	cases := []struct {
		name string
		path string
		hdr  map[string]string
		body []byte
		want int
	}{
		{"no headers", pathStream, nil, batch(heartbeat), 400},
		{"bad cluster header", pathStream, with(headerCluster, "zz"), batch(heartbeat), 400},
		{"no from header", pathStream, with(headerFrom, ""), batch(heartbeat), 400},
		{"no bootstrap header", pathStream, with(headerBootstrap, ""), batch(heartbeat), 400},
		{"no incarnation header", pathStream, with(headerIncarnation, ""), batch(heartbeat), 400},
		{"other cluster", pathStream, with(headerCluster, "1234"), batch(heartbeat), 409},
		{"other node", pathStream, with(headerTo, "7"), batch(heartbeat), 409},
		{"replaced sender", pathStream, with(headerIncarnation, "1234"), batch(heartbeat), 409},
		{"bad length", pathStream, good, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 400},
		{"length past the end", pathStream, good, []byte{40, 1, 2}, 400},
		{"not protobuf", pathStream, good, append([]byte{3}, 0xff, 0xff, 0xff), 400},
		{"message for another node", pathStream, good, batch(&raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), To: proto.Uint64(3)}), 400},
		{"snapshot in a batch", pathStream, good, batch(&raftpb.Message{Type: raftpb.MsgSnap.Enum(), To: proto.Uint64(1)}), 400},
		{"snapshot: no header", pathSnapshot, good, nil, 400},
		{"snapshot: garbage header", pathSnapshot, good, []byte{5, 1, 2, 3, 4, 5}, 400},
		{"snapshot: not a snapshot", pathSnapshot, good, batch(heartbeat), 400},
		{"snapshot: other cluster", pathSnapshot, with(headerCluster, "1234"), batch(heartbeat), 409},
	}
	for _, tc := range cases {
		code, body := post(t, n1.addr, tc.path, tc.hdr, bytes.NewReader(tc.body))
		if code != tc.want {
			t.Errorf("%s: HTTP %d (%s), want %d", tc.name, code, strings.TrimSpace(body), tc.want)
		}
	}
	// A corrupt engine stream after a valid snapshot header: refused,
	// nothing installed, nothing left behind.
	snap := &raftpb.Message{
		Type: raftpb.MsgSnap.Enum(), To: proto.Uint64(1), From: proto.Uint64(2), Term: proto.Uint64(1),
		Snapshot: &raftpb.Snapshot{
			Data: membership{conf: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}, peers: map[uint64]string{}}.encode(),
			Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(1 << 40), Term: proto.Uint64(1),
				ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}},
		},
	}
	for name, stream := range map[string][]byte{
		"empty":   nil,
		"garbage": bytes.Repeat([]byte("kvbuf"), 1000),
	} {
		code, body := post(t, n1.addr, pathSnapshot, good, bytes.NewReader(append(batch(snap), stream...)))
		if code != 400 {
			t.Errorf("snapshot with a %s stream: HTTP %d (%s), want 400", name, code, body)
		}
	}
	ents, err := os.ReadDir(n1.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "engine-") {
			t.Errorf("a refused snapshot left %s", e.Name())
		}
	}
	if n := n1.node().Metrics().SnapshotsReceived; n != 0 {
		t.Errorf("%d snapshots received", n)
	}
	// GET is not a transport method.
	resp, err := http.Get("http://" + n1.addr + pathStream)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET %s: HTTP %d", pathStream, resp.StatusCode)
	}
	// The cluster still works.
	c.mustDo(func(ctx context.Context, n *Node) error { return n.Put(ctx, "ks", []byte("k"), []byte("v")) })
	c.converge(10 * time.Second)
}

// A stream frame larger than the transport accepts is refused before it
// is read.
func TestTransportOversizeFrame(t *testing.T) {
	c := newCluster(t, 1, func(o *Options) {
		o.MaxSizePerMsg = 1 << 10
		o.Engine = &kvbuf.Options{MaxValueSize: 1 << 10}
	})
	n := c.leader(5 * time.Second)
	hdr := c.peerHeaders(n, 2)
	size := n.maxFrame() + 1
	body := io.MultiReader(bytes.NewReader(binary.AppendUvarint(nil, uint64(size))), io.LimitReader(zeros{}, int64(size)))
	code, msg := post(t, c.tn(1).addr, pathStream, hdr, body)
	if code != 400 || !strings.Contains(msg, "frame of") {
		t.Fatalf("a frame of %d bytes: HTTP %d %s, want 400", size, code, msg)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// Two clusters refuse each other's messages, and each sender counts the
// refusals: by cluster ID once the clusters have one, by bootstrap hash
// before.
func TestTransportOtherCluster(t *testing.T) {
	a := newCluster(t, 1, nil)
	b := newCluster(t, 1, nil)
	a.settle(10 * time.Second)
	b.settle(10 * time.Second)
	la, lb := a.leader(5*time.Second), b.leader(5*time.Second)
	if la.cluster.Load() == lb.cluster.Load() {
		t.Fatal("two clusters have the same ID")
	}
	// A message of b's cluster to a's node: by ID, and by bootstrap hash
	// from a node of b that has no ID yet.
	for name, tune := range map[string]func(h map[string]string){
		"cluster ID":     func(map[string]string) {},
		"bootstrap hash": func(h map[string]string) { h[headerCluster] = "0" },
	} {
		hdr := b.peerHeaders(lb, 2)
		hdr[headerTo], hdr[headerToIncarnation] = "1", "0"
		tune(hdr)
		code, body := post(t, a.tn(1).addr, pathStream, hdr, bytes.NewReader(nil))
		if code != http.StatusConflict || !strings.Contains(body, "cluster") {
			t.Fatalf("a message of another cluster (%s): HTTP %d %s", name, code, body)
		}
	}
	// A node's own transport: add a's address as a peer of b and send.
	send := func(rn *raft.RawNode) {
		lb.tr.addPeer(2, a.tn(1).addr)
		lb.tr.send(&raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), To: proto.Uint64(2), From: proto.Uint64(1)})
	}
	if err := lb.enqueue(bg, send); err != nil {
		t.Fatal(err)
	}
	defer lb.tr.removePeer(2)
	waitFor(t, 5*time.Second, "the refusal to be counted", func() bool { return lb.Metrics().Rejected > 0 })
	if m := lb.Metrics(); !strings.Contains(m.LastSendError, "cluster") {
		t.Fatalf("last send error %q", m.LastSendError)
	}
	if la.Err() != nil || lb.Err() != nil {
		t.Fatalf("a refusal stopped a node: %v, %v", la.Err(), lb.Err())
	}
}

// Two clusters bootstrapped with the same flags (token and initial
// members) get different cluster IDs: a node of one is refused by the
// other once both have their IDs.
func TestClusterIDRandomPerBootstrap(t *testing.T) {
	var ids []identity
	for range 2 {
		dir := filepath.Join(t.TempDir(), "node")
		singleNode(t, dir, nil)
		id, ok, err := readIdentity(nodeFS(nil, DefaultDirMode), dir)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		ids = append(ids, id)
	}
	if ids[0].bootstrap != ids[1].bootstrap {
		t.Fatalf("the same flags gave bootstrap hashes %016x and %016x", ids[0].bootstrap, ids[1].bootstrap)
	}
	if ids[0].cluster == 0 || ids[0].cluster == ids[1].cluster || ids[0].incarnation == ids[1].incarnation {
		t.Fatalf("two bootstraps: %+v and %+v", ids[0], ids[1])
	}
}
