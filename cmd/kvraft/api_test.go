package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for a node's logger and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// checkOneLine asserts kvraft's error contract for a command that failed:
// exit status wantCode, one line on stderr holding want, and no panic or
// stack trace (as cmd/kvtool's checkError; TestFlags and the status tests
// count the line the same way).
func checkOneLine(t testing.TB, what string, code, wantCode int, stderr, want string) {
	t.Helper()
	if code != wantCode || strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") || !strings.Contains(stderr, want) {
		t.Errorf("%s: exit %d, stderr %q; want %d and one line with %q", what, code, stderr, wantCode, want)
	}
	for _, bad := range []string{"panic", "goroutine ", ".go:"} {
		if strings.Contains(stderr, bad) {
			t.Errorf("%s: stderr looks like a crash (%q): %s", what, bad, stderr)
		}
	}
}

// freePorts returns n loopback addresses that were free a moment ago.
func freePorts(t testing.TB, n int) []string {
	t.Helper()
	var out []string
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

func peerFlag(addrs []string) string {
	var parts []string
	for i, a := range addrs {
		parts = append(parts, fmt.Sprintf("%d=%s", i+1, a))
	}
	return strings.Join(parts, ",")
}

// inproc is a kvraft node running in this process (run in a goroutine).
type inproc struct {
	addr   string
	dir    string // --data
	cancel context.CancelFunc
	done   chan int
	stderr *syncBuffer
}

// startNode runs kvraft with args and waits until it serves.
func startNode(t testing.TB, args ...string) *inproc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &inproc{cancel: cancel, done: make(chan int, 1), stderr: &syncBuffer{}}
	for i, a := range args {
		if a == "--data" && i+1 < len(args) {
			p.dir = args[i+1]
		}
	}
	ready := make(chan string, 1)
	go func() {
		p.done <- run(ctx, append(args, "--log-level", "warn"), p.stderr, func(a string) { ready <- a })
	}()
	select {
	case p.addr = <-ready:
	case code := <-p.done:
		cancel()
		t.Fatalf("kvraft %v exited with %d: %s", args, code, p.stderr)
	}
	t.Cleanup(func() { p.stop(t) })
	return p
}

// stop shuts the node down and returns its exit status.
func (p *inproc) stop(t testing.TB) int {
	p.cancel()
	select {
	case code := <-p.done:
		p.done <- code
		return code
	case <-time.After(30 * time.Second):
		t.Fatalf("node %s did not stop", p.addr)
		return -1
	}
}

// startCluster runs a 3-node cluster in this process.
func startCluster(t testing.TB) ([]*inproc, []string) {
	t.Helper()
	addrs := freePorts(t, 3)
	dir := t.TempDir()
	var nodes []*inproc
	for i := range 3 {
		nodes = append(nodes, startNode(t, "--id", fmt.Sprint(i+1), "--peers", peerFlag(addrs),
			"--data", filepath.Join(dir, fmt.Sprint(i+1)), "--tick", "20ms"))
	}
	waitLeader(t, addrs)
	return nodes, addrs
}

type response struct {
	code int
	body string
}

// call makes a request, again while the answer is 503 (no leader known: an
// election under way) for up to 20 seconds, as a client does.
func call(t testing.TB, method, url string, body []byte) response {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := call1(t, method, url, body)
		if r.code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return r
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func call1(t testing.TB, method, url string, body []byte) response {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return response{code: -1, body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, string(b)}
}

// status is the part of GET /status the tests read.
type status struct {
	ID          uint64            `json:"id"`
	State       string            `json:"state"`
	Leader      uint64            `json:"leader"`
	Term        uint64            `json:"term"`
	Applied     uint64            `json:"applied"`
	Watermark   uint64            `json:"watermark"`
	Members     map[string]string `json:"members"`
	Digest      string            `json:"digest"`
	DigestIndex uint64            `json:"digest_index"`
	Error       string            `json:"error"`
	Metrics     struct {
		RestartWatermark   uint64 `json:"restart_watermark"`
		RestartLastIndex   uint64 `json:"restart_last_index"`
		RestartApplied     uint64 `json:"restart_applied"`
		Redelivered        uint64 `json:"redelivered"`
		Reapplied          uint64 `json:"reapplied"`
		SnapshotsInstalled uint64 `json:"snapshots_installed"`
	} `json:"metrics"`
}

func getStatus(addr string, digest bool) (status, error) {
	url := "http://" + addr + "/status"
	if digest {
		url += "?digest=1"
	}
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return status{}, err
	}
	defer resp.Body.Close()
	var st status
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return st, fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// waitLeader waits until a node reports itself leader and returns it.
func waitLeader(t testing.TB, addrs []string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, a := range addrs {
			if st, err := getStatus(a, false); err == nil && st.State == "leader" {
				return a
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no leader")
	return ""
}

// converged waits until every node reports the same digest at the same
// applied index, and returns it.
func converged(t testing.TB, addrs []string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last []string
	for time.Now().Before(deadline) {
		last = last[:0]
		var first *status
		same := true
		for _, a := range addrs {
			st, err := getStatus(a, true)
			if err != nil {
				same = false
				last = append(last, fmt.Sprintf("%s: %v", a, err))
				continue
			}
			last = append(last, fmt.Sprintf("%s: %s@%d", a, st.Digest, st.DigestIndex))
			if first == nil {
				first = &st
			} else if st.DigestIndex != first.DigestIndex || st.Digest != first.Digest {
				same = false
			}
		}
		if same && first != nil {
			return first.Digest
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("nodes did not converge: %v", last)
	return ""
}

func TestAPI(t *testing.T) {
	_, addrs := startCluster(t)
	u := func(i int, path string) string { return "http://" + addrs[i] + path }
	for _, step := range []struct {
		method, url, body string
		code              int
		want              string
	}{
		{"PUT", u(0, "/keyspaces/users"), "", 204, ""},
		{"PUT", u(1, "/keyspaces/users"), "", 204, ""}, // again: nothing
		{"PUT", u(2, "/bitslices/live"), "", 204, ""},
		{"GET", u(0, "/keyspaces"), "", 200, `"users"`},
		{"PUT", u(1, "/kv/users/alice"), "hello", 204, ""}, // a follower or the leader
		{"PUT", u(2, "/kv/users/al%2Fbob"), "slash", 204, ""},
		{"PUT", u(0, "/kv/users/bob"), "\xff\xfe", 204, ""},
		{"GET", u(2, "/kv/users/alice"), "", 200, "hello"},
		{"GET", u(0, "/kv/users/al%2Fbob"), "", 200, "slash"},
		{"GET", u(1, "/kv/users?prefix=al"), "", 200, `"key": "al/bob"`},
		{"GET", u(1, "/kv/users?prefix=b"), "", 200, `"value_b64": "//4="`},
		{"GET", u(1, "/kv/users?limit=1"), "", 200, `"more": true`},
		{"GET", u(1, "/kv/users/"), "", 200, `"pairs"`},
		{"PUT", u(0, "/bits/live/42"), "1", 204, ""},
		{"GET", u(1, "/bits/live/42"), "", 200, "1"},
		{"GET", u(1, "/bits/live/43?stale=1"), "", 200, "0"},
		{"DELETE", u(1, "/kv/users/alice"), "", 204, ""},
		{"GET", u(0, "/kv/users/alice"), "", 404, `"not found"`},
		{"DELETE", u(2, "/kv/users?start=a&end=b"), "", 204, ""},
		{"GET", u(0, "/kv/users/al%2Fbob"), "", 404, ""},
		{"GET", u(0, "/kv/users/bob"), "", 200, "\xff\xfe"},
		{"DELETE", u(2, "/kv/users?all=1"), "", 204, ""},
		{"GET", u(0, "/kv/users/bob?stale=0"), "", 404, ""},
	} {
		r := call(t, step.method, step.url, []byte(step.body))
		if r.code != step.code || !strings.Contains(r.body, step.want) {
			t.Fatalf("%s %s: HTTP %d %q, want %d with %q", step.method, step.url, r.code, r.body, step.code, step.want)
		}
	}
	d := converged(t, addrs, 20*time.Second)
	st, err := getStatus(addrs[0], true)
	if err != nil || st.Digest != d || st.Applied == 0 || len(st.Members) != 3 {
		t.Fatalf("status: %+v, %v", st, err)
	}
}

// Bad requests get a 4xx status and a JSON error, and change nothing.
func TestAPIBadInput(t *testing.T) {
	_, addrs := startCluster(t)
	u := func(path string) string { return "http://" + addrs[0] + path }
	for _, r := range []string{"/keyspaces/ks", "/bitslices/bs"} {
		if got := call(t, "PUT", u(r), nil); got.code != 204 {
			t.Fatalf("PUT %s: %+v", r, got)
		}
	}
	before := converged(t, addrs, 20*time.Second)
	big := bytes.Repeat([]byte("v"), 1<<20+1)
	for _, c := range []struct {
		method, path string
		body         []byte
		code         int
		want         string
	}{
		{"PUT", "/kv/nope/k", []byte("v"), 404, "unknown keyspace"},
		{"GET", "/kv/nope/k", nil, 404, "unknown keyspace"},
		{"GET", "/kv/nope", nil, 404, "unknown keyspace"},
		{"PUT", "/kv/ks/k", big, 413, "value"},
		{"PUT", "/kv/ks/", []byte("v"), 400, "empty key"},
		{"PUT", "/kv/ks/" + strings.Repeat("k", 5000), []byte("v"), 400, "key"},
		{"PUT", "/bits/bs/abc", []byte("1"), 400, "bit index"},
		{"PUT", "/bits/bs/-1", []byte("1"), 400, "bit index"},
		{"PUT", "/bits/bs/5", []byte("maybe"), 400, "1 or 0"},
		{"PUT", "/bits/bs/5", bytes.Repeat([]byte("1"), 100), 413, "larger"},
		{"PUT", "/bits/bs/99999999999999", []byte("1"), 400, "max"},
		{"PUT", "/bits/nope/5", []byte("1"), 404, "unknown bitslice"},
		{"GET", "/bits/bs/x", nil, 400, "bit index"},
		{"GET", "/kv/ks?limit=0", nil, 400, "limit"},
		{"GET", "/kv/ks?limit=abc", nil, 400, "limit"},
		{"GET", "/kv/ks/k?stale=maybe", nil, 400, "stale"},
		{"DELETE", "/kv/ks", nil, 400, "start"},
		{"DELETE", "/kv/ks?start=b&end=a", nil, 400, "lower bound above upper bound"},
		{"PUT", "/keyspaces/a%2Fb", nil, 400, "name"},
		{"PUT", "/keyspaces/" + strings.Repeat("x", 200), nil, 400, "name"},
		{"POST", "/members/abc?addr=127.0.0.1:1", nil, 400, "node ID"},
		{"POST", "/members/0?addr=127.0.0.1:1", nil, 400, "node ID"},
		{"POST", "/members/5", nil, 400, "addr"},
		{"POST", "/members/5?addr=nohost", nil, 400, "address"},
		{"DELETE", "/members/x", nil, 400, "node ID"},
		{"POST", "/members/1?addr=127.0.0.1:1", nil, 409, "already a member"},
		{"DELETE", "/members/9", nil, 404, "not a member"},
		{"POST", "/members/9/promote", nil, 404, "not a learner"},
		{"POST", "/members/1/promote", nil, 409, "already a voter"},
		{"PUT", "/members/9/addr", []byte("127.0.0.1:1"), 404, "not a member"},
		{"PUT", "/members/1/addr", nil, 400, "new address"},
		{"PUT", "/members/1/addr", []byte("nohost"), 400, "address"},
		{"GET", "/status?digest=x", nil, 400, "digest"},
		{"GET", "/nope", nil, 404, "no such endpoint"},
		{"PATCH", "/kv/ks/k", nil, 404, "no such endpoint: PATCH"},
		{"POST", "/raft/stream", []byte("junk"), 400, ""},
	} {
		r := call(t, c.method, u(c.path), c.body)
		if r.code != c.code || !strings.Contains(r.body, c.want) {
			t.Errorf("%s %s: HTTP %d %.200q, want %d with %q", c.method, c.path, r.code, r.body, c.code, c.want)
		}
		if !strings.HasPrefix(c.path, "/raft/") && !strings.Contains(r.body, `"error"`) {
			t.Errorf("%s %s: not a JSON error: %.200q", c.method, c.path, r.body)
		}
	}
	if after := converged(t, addrs, 20*time.Second); after != before {
		t.Fatalf("bad requests changed the content: digest %s, was %s", after, before)
	}
}

func TestFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{}, 2, "--id is required"},
		{[]string{"--id", "1"}, 2, "--peers"},
		{[]string{"--id", "1", "--peers", "1=nohost"}, 2, "--peers"},
		{[]string{"--id", "1", "--peers", "x=127.0.0.1:1"}, 2, "non-zero"},
		{[]string{"--id", "1", "--peers", "1=127.0.0.1:1,1=127.0.0.1:2"}, 2, "twice"},
		{[]string{"--id", "4", "--peers", "1=127.0.0.1:1"}, 2, "--http is required"},
		{[]string{"--id", "1", "--peers", "1=127.0.0.1:1", "--log-level", "loud"}, 2, "--log-level"},
		{[]string{"--id", "1", "--peers", "1=127.0.0.1:1", "--tick", "0s"}, 2, "positive"},
		{[]string{"--id", "1", "--peers", "1=127.0.0.1:1", "extra"}, 2, "unexpected argument"},
		{[]string{"--bogus"}, 2, "bogus"},
		{[]string{"--id", "1", "--peers", "1=10.1.2.3:7001"}, 2, "refusing to serve plain HTTP on 10.1.2.3:7001"},
		{[]string{"--id", "1", "--peers", "1=127.0.0.1:1", "--http", "0.0.0.0:7001"}, 2, "non-loopback"},
		{[]string{"--id", "1", "--peers", "1=127.0.0.1:1", "--tls-cert", "c.pem"}, 2, "--tls-cert and --tls-key go together"},
		{[]string{"--id", "1", "--peers", "1=127.0.0.1:1", "--tls-cert", "c.pem", "--tls-key", "k.pem"}, 2, "--peer-ca"},
		{[]string{"--id", "1", "--peers", "1=127.0.0.1:1", "--tls-cert", "c.pem", "--tls-key", "k.pem", "--peer-ca", "ca.pem"}, 2, "--client-ca or --token-file"},
		{[]string{"--id", "1", "--peers", "1=127.0.0.1:1", "--peer-ca", "ca.pem"}, 2, "need --tls-cert"},
		{[]string{"--id", "1", "--peers", "1=127.0.0.1:1", "--data-mode", "0600"}, 2, "--data-mode"},
		{[]string{"--id", "1", "--peers", "1=127.0.0.1:1", "--data-mode", "x"}, 2, "--data-mode"},
		{[]string{"--id", "1", "--peers", "1=127.0.0.1:1", "--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem",
			"--peer-ca", "ca.pem", "--client-ca", "ca.pem"}, 1, "--tls-cert"},
		{[]string{"--id", "1", "--peers", "1=127.0.0.1:1", "--token-file", "/nonexistent/token"}, 1, "--token-file"},
	} {
		var stderr syncBuffer
		code := run(context.Background(), c.args, &stderr, nil)
		if code != c.code || !strings.Contains(stderr.String(), c.want) || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("kvraft %v: exit %d, stderr %q; want %d with %q on one line", c.args, code, stderr.String(), c.code, c.want)
		}
	}
}

// A node started on another cluster's data directory refuses it (exit 1,
// one line on stderr saying why, no stack trace) and leaves it as it was; the directory's own
// cluster goes on.
func TestForeignDataDir(t *testing.T) {
	nodes, addrs := startCluster(t)
	if r := call(t, "PUT", "http://"+addrs[0]+"/keyspaces/ks", nil); r.code != 204 {
		t.Fatal(r)
	}
	if r := call(t, "PUT", "http://"+addrs[0]+"/kv/ks/k", []byte("v")); r.code != 204 {
		t.Fatal(r)
	}
	before := converged(t, addrs, 20*time.Second)
	if code := nodes[2].stop(t); code != 0 {
		t.Fatalf("clean stop: exit %d: %s", code, nodes[2].stderr)
	}
	// Node 3's directory under another cluster's token, and as node 5.
	other := freePorts(t, 1)
	for _, args := range [][]string{
		{"--id", "3", "--peers", peerFlag(addrs), "--cluster-token", "another"},
		{"--id", "5", "--peers", "5=" + other[0]},
	} {
		var stderr syncBuffer
		args = append(args, "--data", nodes[2].dir)
		code := run(context.Background(), args, &stderr, nil)
		checkOneLine(t, fmt.Sprintf("kvraft %v", args), code, 1, stderr.String(), "belongs to")
	}
	// Node 3 comes back with its own flags, with its data.
	startNode(t, "--id", "3", "--peers", peerFlag(addrs), "--data", nodes[2].dir, "--tick", "10ms")
	if after := converged(t, addrs, 20*time.Second); after != before {
		t.Fatalf("digest %s after the refused starts, was %s", after, before)
	}
}

// The member API: a learner is added, listed, refused promotion until it
// runs and catches up, and removed; a removed ID is never added again; a
// member cannot be removed twice.
func TestMemberAPI(t *testing.T) {
	_, addrs := startCluster(t)
	u := func(path string) string { return "http://" + addrs[0] + path }
	for _, step := range []struct {
		method, path, body string
		code               int
		want               string
	}{
		{"DELETE", "/members/3", "", 204, ""},
		{"POST", "/members/3?addr=127.0.0.1:1", "", 409, "never reused"},
		{"DELETE", "/members/3", "", 404, "removed already"},
		{"POST", "/members/4?addr=127.0.0.1:1", "", 204, ""},
		{"GET", "/members", "", 200, `"role": "learner"`},
		{"POST", "/members/4?addr=127.0.0.1:1", "", 409, "already a member"},
		{"POST", "/members/4/promote", "", 409, "not caught up"},
		{"PUT", "/members/4/addr", "127.0.0.1:2", 204, ""},
		{"GET", "/members", "", 200, `"addr": "127.0.0.1:2"`},
		{"DELETE", "/members/4", "", 204, ""},
		{"DELETE", "/members/4", "", 404, ""},
	} {
		// GET /members is the node's own view: it may apply a change the
		// leader acknowledged a moment later. A 503 or 504 is a leader
		// change under way (removing node 3 removes the leader when it
		// was 3, and node 1 forwards to it until the next election).
		deadline := time.Now().Add(10 * time.Second)
		for {
			r := call(t, step.method, u(step.path), []byte(step.body))
			if r.code == step.code && strings.Contains(r.body, step.want) {
				break
			}
			leaderChange := r.code == http.StatusServiceUnavailable || r.code == http.StatusGatewayTimeout
			if (step.method != "GET" && !leaderChange) || time.Now().After(deadline) {
				t.Fatalf("%s %s: HTTP %d %q, want %d with %q", step.method, step.path, r.code, r.body, step.code, step.want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// A node whose data directory was wiped, started again with its old
// command (bootstrapping, or with --join), exits 1 with one line naming
// the node and the remedy; the others go on.
func TestWipedNodeExits(t *testing.T) {
	nodes, addrs := startCluster(t)
	if r := call(t, "PUT", "http://"+addrs[0]+"/keyspaces/ks", nil); r.code != 204 {
		t.Fatal(r)
	}
	for i := range 20 {
		if r := call(t, "PUT", fmt.Sprintf("http://%s/kv/ks/k%d", addrs[i%3], i), []byte("v")); r.code != 204 {
			t.Fatal(r)
		}
	}
	converged(t, addrs, 20*time.Second)
	if code := nodes[2].stop(t); code != 0 {
		t.Fatalf("clean stop: exit %d: %s", code, nodes[2].stderr)
	}
	for _, extra := range [][]string{nil, {"--join"}} {
		if err := os.RemoveAll(nodes[2].dir); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"--id", "3", "--peers", peerFlag(addrs), "--data", nodes[2].dir, "--tick", "20ms", "--log-level", "error"}, extra...)
		var stderr syncBuffer
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		code := run(ctx, args, &stderr, nil)
		cancel()
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		last := lines[len(lines)-1]
		if code != 1 || !strings.HasPrefix(last, "kvraft: node 3 stopped: ") || !strings.Contains(last, "new ID") ||
			strings.Contains(stderr.String(), "goroutine ") {
			t.Fatalf("kvraft %v: exit %d, stderr:\n%s", extra, code, stderr.String())
		}
		t.Logf("%v: %s", extra, last)
	}
	if r := call(t, "PUT", "http://"+addrs[0]+"/kv/ks/after", []byte("v")); r.code != 204 {
		t.Fatalf("write after the refusals: %+v", r)
	}
}

// POST /kv/{ks} applies its lines' writes in order, pipelined, and answers
// one result per line; a malformed body is refused whole. Sent to every
// node (followers forward it).
func TestPipelinedWrites(t *testing.T) {
	_, addrs := startCluster(t)
	u := func(i int, path string) string { return "http://" + addrs[i] + path }
	if got := call(t, "PUT", u(0, "/keyspaces/ks"), nil); got.code != 204 {
		t.Fatalf("PUT /keyspaces/ks: %+v", got)
	}
	for i := range addrs {
		var body strings.Builder
		for j := range 50 {
			fmt.Fprintf(&body, "{\"key\":\"n%d-k%02d\",\"value\":\"v%d\"}\n", i, j%10, j)
		}
		fmt.Fprintf(&body, "{\"key\":\"n%d-k00\",\"delete\":true}\n", i)
		body.WriteString("{\"key\":\"\",\"value\":\"refused\"}\n")
		fmt.Fprintf(&body, "{\"key_b64\":\"%s\",\"value_b64\":\"AAE=\"}\n", base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "n%d-bin", i)))
		r := call(t, "POST", u(i, "/kv/ks"), []byte(body.String()))
		if r.code != 200 {
			t.Fatalf("node %d: POST /kv/ks: %+v", i+1, r)
		}
		lines := strings.Split(strings.TrimSpace(r.body), "\n")
		if len(lines) != 53 {
			t.Fatalf("node %d: %d result lines for 53 writes: %q", i+1, len(lines), r.body)
		}
		for j, l := range lines {
			want := `{"status":204}`
			if j == 51 {
				want = `{"status":400,"error":"raftkv: keyspace \"ks\": empty key"}`
			}
			if l != want {
				t.Errorf("node %d: result %d: %s, want %s", i+1, j, l, want)
			}
		}
		for j := 1; j < 10; j++ {
			if got := call(t, "GET", u(i, fmt.Sprintf("/kv/ks/n%d-k%02d", i, j)), nil); got.code != 200 || got.body != fmt.Sprintf("v%d", 40+j) {
				t.Errorf("node %d: key %d: %+v, want v%d (the last put)", i+1, j, got, 40+j)
			}
		}
		if got := call(t, "GET", u(i, fmt.Sprintf("/kv/ks/n%d-k00", i)), nil); got.code != 404 {
			t.Errorf("node %d: k00, deleted after its puts: %+v", i+1, got)
		}
		if got := call(t, "GET", u(i, fmt.Sprintf("/kv/ks/n%d-bin", i)), nil); got.code != 200 || got.body != "\x00\x01" {
			t.Errorf("node %d: the base64 write: %+v", i+1, got)
		}
	}
	for _, c := range []struct{ body, want string }{
		{"", "no writes"},
		{"junk\n", "line 1"},
		{"{\"key\":\"a\",\"value\":\"1\"}\n{\"key\":\"b\"}\n", "line 2: a put needs a value"},
		{"{\"value\":\"1\"}\n", "no key"},
		{"{\"key\":\"a\",\"key_b64\":\"YQ==\",\"value\":\"1\"}\n", "one key"},
		{"{\"key\":\"a\",\"value\":\"1\",\"value_b64\":\"YQ==\"}\n", "one value"},
		{"{\"key\":\"a\",\"delete\":true,\"value\":\"1\"}\n", "a delete has no value"},
		{"{\"key\":\"a\",\"value\":\"1\",\"ttl\":5}\n", "unknown field"},
	} {
		r := call(t, "POST", u(0, "/kv/ks"), []byte(c.body))
		if r.code != 400 || !strings.Contains(r.body, c.want) {
			t.Errorf("POST /kv/ks %q: %+v, want 400 with %q", c.body, r, c.want)
		}
	}
	// Nothing of a refused body was applied.
	if got := call(t, "GET", u(0, "/kv/ks/a"), nil); got.code != 404 {
		t.Errorf("a refused body wrote key a: %+v", got)
	}
	if r := call(t, "POST", u(0, "/kv/nope"), []byte("{\"key\":\"a\",\"value\":\"1\"}\n")); r.code != 200 || !strings.Contains(r.body, `"status":404`) {
		t.Errorf("a write to an unknown keyspace: %+v", r)
	}
}
