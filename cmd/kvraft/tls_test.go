package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tlsClient is an HTTPS client trusting ca, presenting the certificate
// certFile (none if empty), sending token (none if empty).
type tlsClient struct {
	hc    *http.Client
	token string
}

func newTLSClient(t testing.TB, caFile, certFile, keyFile, token string) *tlsClient {
	t.Helper()
	cfg, err := tlsClientConfig(caFile, certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{Proxy: nil, TLSClientConfig: cfg}
	t.Cleanup(tr.CloseIdleConnections)
	return &tlsClient{hc: &http.Client{Transport: tr, Timeout: 10 * time.Second}, token: token}
}

// do makes one request and returns the status (-1 and the error text if
// it failed).
func (c *tlsClient) do(method, url string, body []byte) response {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return response{-1, err.Error()}
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return response{-1, err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, string(b)}
}

// retry repeats do while the answer is 503 (an election), up to 20s.
func (c *tlsClient) retry(t testing.TB, method, url string, body []byte) response {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := c.do(method, url, body)
		if r.code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return r
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A cluster over TLS: peers authenticate each other with the cluster's
// CA; clients read without credentials and write with a bearer token or a
// certificate of the client CA; a peer or client without them is refused.
func TestTLS(t *testing.T) {
	ca, clients, foreign := newTestCA(t, "cluster"), newTestCA(t, "clients"), newTestCA(t, "foreign")
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := freePorts(t, 3)
	dir := t.TempDir()
	for i := range 3 {
		cert, key := ca.issue(t, fmt.Sprintf("node%d", i+1))
		startNode(t, "--id", fmt.Sprint(i+1), "--peers", peerFlag(addrs), "--data", filepath.Join(dir, fmt.Sprint(i+1)), "--tick", "20ms",
			"--tls-cert", cert, "--tls-key", key, "--peer-ca", ca.file, "--client-ca", clients.file, "--token-file", token)
	}
	u := func(i int, path string) string { return "https://" + addrs[i] + path }
	anon := newTLSClient(t, ca.file, "", "", "")
	withToken := newTLSClient(t, ca.file, "", "", "s3cret-token")
	badToken := newTLSClient(t, ca.file, "", "", "guess")
	aliceCert, aliceKey := clients.issue(t, "alice")
	alice := newTLSClient(t, ca.file, aliceCert, aliceKey, "")
	malloryCert, malloryKey := foreign.issue(t, "mallory")
	mallory := newTLSClient(t, ca.file, malloryCert, malloryKey, "")
	peerCert, peerKey := ca.issue(t, "node9")
	peer := newTLSClient(t, ca.file, peerCert, peerKey, "")

	if r := withToken.retry(t, "PUT", u(0, "/keyspaces/ks"), nil); r.code != 204 {
		t.Fatalf("create a keyspace with the token: %+v", r)
	}
	for _, step := range []struct {
		name   string
		c      *tlsClient
		method string
		url    string
		body   string
		code   int
		want   string
	}{
		{"write with the token (forwarded by a follower or not)", withToken, "PUT", u(1, "/kv/ks/a"), "1", 204, ""},
		{"write with a client certificate", alice, "PUT", u(2, "/kv/ks/b"), "2", 204, ""},
		{"read without credentials", anon, "GET", u(0, "/kv/ks/a"), "", 200, "1"},
		{"write without credentials", anon, "PUT", u(0, "/kv/ks/c"), "3", 401, "bearer token"},
		{"write with a wrong token", badToken, "PUT", u(0, "/kv/ks/c"), "3", 401, "not this node's"},
		{"admin call without credentials", anon, "DELETE", u(0, "/members/3"), "", 401, ""},
		{"snapshot without credentials", anon, "GET", u(0, "/snapshot"), "", 401, ""},
		// Go's client sends no certificate the server's CAs did not sign.
		{"a certificate of another CA", mallory, "PUT", u(0, "/kv/ks/c"), "3", 401, "client certificate"},
		{"a peer without a certificate", anon, "POST", u(0, "/raft/stream"), "junk", 403, "certificate of the cluster's CA"},
		{"a client certificate is not a peer's", alice, "POST", u(0, "/raft/stream"), "junk", 403, "certificate"},
		// The control: the endpoint exists, and a certificate of the
		// cluster's CA gets past the check to the stream's own (junk is
		// not a message).
		{"a peer's certificate reaches the stream", peer, "POST", u(0, "/raft/stream"), "junk", 400, ""},
		{"health without credentials", anon, "GET", u(1, "/health"), "", 200, `"healthy": true`},
	} {
		r := step.c.retry(t, step.method, step.url, []byte(step.body))
		if r.code != step.code || !strings.Contains(r.body, step.want) {
			t.Errorf("%s: %s %s: HTTP %d %.300q, want %d with %q", step.name, step.method, step.url, r.code, r.body, step.code, step.want)
		}
	}
	// Plain HTTP to a TLS node is refused.
	if r := call1(t, "GET", "http://"+addrs[0]+"/status", nil); r.code != http.StatusBadRequest {
		t.Errorf("plain HTTP to a TLS node: %+v", r)
	}
	// kvraft status over TLS.
	var out, errb syncBuffer
	code := runStatus(context.Background(), []string{"--endpoints", strings.Join(addrs, ","), "--cacert", ca.file, "--json"}, &out, &errb)
	if code != 0 {
		t.Fatalf("kvraft status over TLS: exit %d: %s %s", code, out.String(), errb.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var row endpointStatus
		if err := json.Unmarshal([]byte(line), &row); err != nil || row.ID == 0 || row.Err != "" {
			t.Fatalf("status row %q: %v", line, err)
		}
	}
	out, errb = syncBuffer{}, syncBuffer{}
	code = runStatus(context.Background(), []string{"--endpoints", addrs[0]}, &out, &errb)
	checkOneLine(t, "kvraft status over plain HTTP to a TLS node", code, 1, errb.String(), addrs[0]+" serves HTTPS: give --cacert")
	if !strings.Contains(out.String(), "unreachable") {
		t.Errorf("kvraft status over plain HTTP to a TLS node: %s", &out)
	}
}

// A node whose certificate is not of the cluster's CA is refused by its
// peers (it cannot join the cluster's traffic) and they go on.
func TestTLSForeignPeer(t *testing.T) {
	ca, foreign := newTestCA(t, "cluster"), newTestCA(t, "foreign")
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := freePorts(t, 3)
	dir := t.TempDir()
	for i := range 3 {
		c, peerCA := ca, ca.file
		if i == 2 {
			// Node 3 has a certificate of another CA, and trusts the
			// cluster's: it can verify its peers, they cannot verify it.
			c = foreign
		}
		cert, key := c.issue(t, fmt.Sprintf("node%d", i+1))
		startNode(t, "--id", fmt.Sprint(i+1), "--peers", peerFlag(addrs), "--data", filepath.Join(dir, fmt.Sprint(i+1)),
			"--tick", "20ms", "--tls-cert", cert, "--tls-key", key, "--peer-ca", peerCA, "--token-file", token)
	}
	cl := newTLSClient(t, ca.file, "", "", "t")
	if r := cl.retry(t, "PUT", "https://"+addrs[0]+"/keyspaces/ks", nil); r.code != 204 {
		t.Fatalf("the two good nodes: %+v", r)
	}
	time.Sleep(500 * time.Millisecond) // node 3 tries meanwhile
	var st struct {
		Applied uint64 `json:"applied"`
		Metrics struct {
			SendErrors uint64 `json:"send_errors"`
			LastError  string `json:"last_send_error"`
		} `json:"metrics"`
	}
	bad := newTLSClient(t, foreign.file, "", "", "")
	r := bad.do("GET", "https://"+addrs[2]+"/status", nil)
	if r.code != 200 || json.Unmarshal([]byte(r.body), &st) != nil {
		t.Fatalf("node 3's status: %+v", r)
	}
	// Node 3 applied its bootstrap entries (1 to 3) and nothing of the
	// cluster's since.
	if st.Applied > 3 || st.Metrics.SendErrors == 0 || !strings.Contains(st.Metrics.LastError, "certificate") {
		t.Fatalf("node 3 took part: %+v", st)
	}
	t.Logf("node 3: %s", st.Metrics.LastError)
}

// --insecure lets a node serve plain HTTP on a non-loopback address
// (refused without it: TestFlags): here the wildcard address, reached
// through loopback and, if the machine has one, a non-loopback address.
func TestInsecureNonLoopback(t *testing.T) {
	_, port, _ := net.SplitHostPort(freePorts(t, 1)[0])
	p := startNode(t, "--id", "1", "--peers", "1=127.0.0.1:"+port, "--http", "0.0.0.0:"+port, "--insecure",
		"--data", filepath.Join(t.TempDir(), "1"), "--tick", "20ms")
	hosts := []string{"127.0.0.1"}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
				hosts = append(hosts, ipn.IP.String())
				break
			}
		}
	}
	if r := call(t, "PUT", "http://127.0.0.1:"+port+"/keyspaces/ks", nil); r.code != 204 {
		t.Fatalf("create a keyspace: %+v", r)
	}
	for _, h := range hosts {
		u := "http://" + net.JoinHostPort(h, port)
		if r := call(t, "PUT", u+"/kv/ks/"+h, []byte("v")); r.code != 204 {
			t.Fatalf("write through %s: %+v", h, r)
		}
		if r := call(t, "GET", u+"/health", nil); r.code != 200 {
			t.Fatalf("health through %s: %+v", h, r)
		}
	}
	t.Logf("served on %s through %v", p.addr, hosts)
}

// A non-default --data-mode: the data directory, the raft log's
// directories and the node's own files get it (files without the execute
// bits: 0750 gives 0640); the engine's directories stay 0700 and its files
// 0600, whatever the mode.
func TestDataMode(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "1")
	addr := freePorts(t, 1)[0]
	startNode(t, "--id", "1", "--peers", "1="+addr, "--data", dir, "--tick", "20ms", "--data-mode", "0750")
	for _, path := range []string{"/keyspaces/ks", "/bitslices/bs", "/kv/ks/k"} {
		if r := call(t, "PUT", "http://"+addr+path, []byte("v")); r.code != 204 {
			t.Fatalf("PUT %s: %+v", path, r)
		}
	}
	var node, engine int
	checkModes(t, dir, func(rel string, _ bool) (os.FileMode, os.FileMode) {
		if strings.HasPrefix(rel, "engine") {
			engine++
			return 0o700, 0o600
		}
		node++
		return 0o750, 0o640
	})
	if node < 3 || engine < 3 {
		t.Fatalf("%d paths of the node's, %d of the engine's: too few to check", node, engine)
	}
	t.Logf("%d paths of the node's, %d of the engine's", node, engine)
}
