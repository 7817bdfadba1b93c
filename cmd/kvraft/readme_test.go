package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestREADMEReplicated runs every command of the README's "Replicated"
// section, in order, as an operator pastes them: the sh blocks, one line
// at a time, each in its own sh -c, from the repository root. Node
// commands (bin/kvraft with --id) run in the background, as in their own
// terminal, and the next command waits until they serve (and answer
// /health, for a cluster that has a leader to find). A curl must get a 2xx
// answer (the test adds --fail-with-body); one commented "run it again" is
// run again until it does, for up to a minute. Every other command must
// exit 0. What a command's # comment says it prints or answers is checked
// (readmeClaims: a status, a value, a scan's pairs or cursor, a JSON
// object's fields, the digest kvraft snapshot printed), and so is the
// prose's promise that kvtool inspect --digest prints the digest the
// node's /status?digest=1 reported; a comment that states nothing
// checkable must be one of readmeProse, so that a comment added to the
// README without a check fails the test. HTML comments between the blocks
// stand for what the operator does by hand:
//
//	<!-- readme-test: stop DIR -->   Ctrl-C the node of --data DIR (it must exit 0)
//	<!-- readme-test: start DIR -->  run its command again
//	<!-- readme-test: exits DIR -->  the node of --data DIR stops by itself (exit 1)
//
// Any other exit of a node fails the test, and at the end every node still
// running must stop cleanly on SIGINT. The commands run on free ports
// instead of the README's 7xxx ones, and under a temporary directory
// instead of /tmp/kvraft*; the binaries are built (by the README's own go
// build line) into a temporary bin/. Skipped by -short: it builds kvraft
// and kvtool.
func TestREADMEReplicated(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and starts processes")
	}
	for _, tool := range []string{"curl", "openssl", "grep"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the README's commands need %s: %v", tool, err)
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	steps := readmeSteps(t, filepath.Join(root, "README.md"))
	r := &readmeRun{t: t, root: root, tmp: t.TempDir(), ports: map[string]string{}, nodes: map[string]*readmeNode{}, digests: map[string]string{}}
	defer r.stopAll()
	for i, st := range steps {
		if st.marker != "" {
			r.marker(st.marker)
			continue
		}
		line := r.rewrite(st.line)
		if isNodeCommand(line) {
			r.startNode(line)
			continue
		}
		r.waitNodes()
		if i+1 < len(steps) {
			r.expectExit(steps[i+1].marker) // this command makes a node stop
		}
		r.command(line)
		r.checkNodes()
	}
	r.waitNodes()
	r.checkNodes()
}

// readmeStep is a command line of the README or a readme-test marker.
type readmeStep struct {
	line, marker string
}

// readmeSteps returns the command lines and markers of the README's
// "## Replicated" section.
func readmeSteps(t *testing.T, file string) []readmeStep {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "\n## Replicated\n")
	if start < 0 {
		t.Fatal("README.md has no ## Replicated section")
	}
	text = text[start+1:]
	if end := strings.Index(text, "\n## "); end >= 0 {
		text = text[:end]
	}
	var steps []readmeStep
	inBlock := false
	marker := regexp.MustCompile(`^<!-- readme-test: (.*) -->$`)
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "```sh":
			inBlock = true
		case line == "```":
			inBlock = false
		case inBlock && strings.TrimSpace(line) != "":
			steps = append(steps, readmeStep{line: line})
		case !inBlock && marker.MatchString(line):
			steps = append(steps, readmeStep{marker: marker.FindStringSubmatch(line)[1]})
		}
	}
	if len(steps) < 20 {
		t.Fatalf("only %d commands in the README's Replicated section", len(steps))
	}
	return steps
}

func isNodeCommand(line string) bool {
	f := strings.Fields(line)
	return len(f) > 1 && strings.HasSuffix(f[0], "/kvraft") && f[1] == "--id"
}

type readmeRun struct {
	t     *testing.T
	root  string
	tmp   string
	ports map[string]string      // README port -> free port
	nodes map[string]*readmeNode // by --data
	// digests are the content digests the commands saw: by node port
	// (the last /status?digest=1 of it), and "snapshot" for the one
	// kvraft snapshot printed.
	digests map[string]string
}

// readmeOutput is what a README command printed: for a curl without a
// pipe, the body and the HTTP status apart (the test adds --write-out).
type readmeOutput struct {
	line string // the command, as run (rewritten)
	body string
	code int // 0 when not a curl's
}

// readmeClaim checks one form of # comment: what the command prints or
// answers, parsed from the comment itself (the README is the reference:
// changing its stated output without changing the program fails).
type readmeClaim struct {
	re    *regexp.Regexp
	check func(r *readmeRun, out readmeOutput, m []string) error
}

var readmeClaims = []readmeClaim{
	// "204 once applied on the leader", "run it again until it answers 204"
	{regexp.MustCompile(`^(?:(\d{3})\b|.*\banswers (\d{3})$)`), func(_ *readmeRun, out readmeOutput, m []string) error {
		want, _ := strconv.Atoi(m[1] + m[2])
		if out.code != want {
			return fmt.Errorf("HTTP %d, want %d", out.code, want)
		}
		return nil
	}},
	// "JSON: pairs [...], more false": a scan's page.
	{regexp.MustCompile(`^JSON: pairs (\[.*\]), more (true|false)$`), func(_ *readmeRun, out readmeOutput, m []string) error {
		var want []map[string]any
		if err := json.Unmarshal([]byte(m[1]), &want); err != nil {
			return fmt.Errorf("the comment's pairs: %w", err)
		}
		page, err := scanPage(out.body)
		if err != nil {
			return err
		}
		if !reflect.DeepEqual(page.Pairs, want) || fmt.Sprint(page.More) != m[2] {
			return fmt.Errorf("pairs %v, more %v; want pairs %v, more %s", page.Pairs, page.More, want, m[2])
		}
		return nil
	}},
	// `more true, next "alice": ...`: a scan's cursor.
	{regexp.MustCompile(`^more (true|false), next "([^"]*)"`), func(_ *readmeRun, out readmeOutput, m []string) error {
		page, err := scanPage(out.body)
		if err != nil {
			return err
		}
		if fmt.Sprint(page.More) != m[1] || page.Next != m[2] {
			return fmt.Errorf("more %v, next %q; want more %s, next %q", page.More, page.Next, m[1], m[2])
		}
		return nil
	}},
	// "hello", "1": the value read; "bob; ...": the one key of a scan's page.
	{regexp.MustCompile(`^([A-Za-z0-9]+)(?:;.*)?$`), func(_ *readmeRun, out readmeOutput, m []string) error {
		if page, err := scanPage(out.body); err == nil && page.Pairs != nil {
			if len(page.Pairs) != 1 || page.Pairs[0]["key"] != m[1] {
				return fmt.Errorf("pairs %v, want the one key %q", page.Pairs, m[1])
			}
			return nil
		}
		if out.body != m[1] {
			return fmt.Errorf("printed %q, want %q", out.body, m[1])
		}
		return nil
	}},
	// "term, commit, applied, ...": the fields of a JSON object.
	{regexp.MustCompile(`^[a-z_]+(?:, [a-z_]+)+$`), func(_ *readmeRun, out readmeOutput, m []string) error {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal([]byte(out.body), &obj); err != nil {
			return fmt.Errorf("not a JSON object: %w", err)
		}
		for _, f := range strings.Split(m[0], ", ") {
			if _, ok := obj[f]; !ok {
				return fmt.Errorf("no field %q", f)
			}
		}
		return nil
	}},
	// "the digest kvraft snapshot printed" (a /status?digest=1 of the
	// restored cluster).
	{regexp.MustCompile(`^the digest kvraft snapshot printed$`), func(r *readmeRun, out readmeOutput, _ []string) error {
		var st struct{ Digest string }
		if err := json.Unmarshal([]byte(out.body), &st); err != nil {
			return err
		}
		if r.digests["snapshot"] == "" || st.Digest != r.digests["snapshot"] {
			return fmt.Errorf("digest %q, kvraft snapshot printed %q", st.Digest, r.digests["snapshot"])
		}
		return nil
	}},
}

// readmeProse are the # comments that state no output (a 2xx answer is
// all there is to check, and the test checks it for every curl).
var readmeProse = map[string]bool{
	"keyspaces are created explicitly": true,
	"reads need no credentials":        true,
}

// scanPage parses a scan's answer.
func scanPage(body string) (page struct {
	Pairs []map[string]any `json:"pairs"`
	More  bool             `json:"more"`
	Next  string           `json:"next"`
}, err error) {
	err = json.Unmarshal([]byte(body), &page)
	return page, err
}

var (
	readmeComment        = regexp.MustCompile(`\s#\s+(.*)$`)
	readmeSnapshotDigest = regexp.MustCompile(`digest ([0-9a-f]+),`)
	readmeInspectDigest  = regexp.MustCompile(`(?m)^digest:\s+([0-9a-f]+)$`)
)

// checkOutput checks what a command printed against its # comment, and
// notes the digests it saw.
func (r *readmeRun) checkOutput(out readmeOutput) {
	r.t.Helper()
	line := out.line
	switch {
	case strings.Contains(line, "/status?digest=1"):
		var st struct{ Digest string }
		if err := json.Unmarshal([]byte(out.body), &st); err != nil || st.Digest == "" {
			r.t.Fatalf("$ %s\nno digest in %q (%v)", line, out.body, err)
		}
		if u, err := url.Parse("http://" + strings.Trim(strings.Fields(line)[1], "'")); err == nil {
			r.digests[u.Port()] = st.Digest
		}
	case strings.Contains(line, "kvraft snapshot "):
		m := readmeSnapshotDigest.FindStringSubmatch(out.body)
		if m == nil {
			r.t.Fatalf("$ %s\nno digest in %q", line, out.body)
		}
		r.digests["snapshot"] = m[1]
	case strings.Contains(line, "kvtool inspect --digest "):
		// "prints a stopped node's content digest, the one its
		// /status?digest=1 reported"
		f := strings.Fields(line)
		var want string
		if n := r.nodes[filepath.Dir(f[len(f)-1])]; n != nil {
			_, port, _ := net.SplitHostPort(n.addr)
			want = r.digests[port]
		}
		if m := readmeInspectDigest.FindStringSubmatch(out.body); m == nil || want == "" || m[1] != want {
			r.t.Fatalf("$ %s\n%s\nwant the digest the node's /status?digest=1 reported, %q", line, out.body, want)
		}
		r.t.Logf("checked: the digest /status?digest=1 reported, %s", want)
	}
	c := readmeComment.FindStringSubmatch(line)
	if c == nil || readmeProse[c[1]] {
		return
	}
	for _, claim := range readmeClaims {
		if m := claim.re.FindStringSubmatch(c[1]); m != nil {
			if err := claim.check(r, out, m); err != nil {
				r.t.Fatalf("$ %s\n%s\nnot what its comment says: %v", line, out.body, err)
			}
			r.t.Logf("checked: %q", c[1])
			return
		}
	}
	r.t.Fatalf("README comment %q states nothing the test checks: add a readmeClaims entry (or to readmeProse if it states no output)", c[1])
}

type readmeNode struct {
	line   string
	addr   string // where it serves
	tls    bool
	join   bool
	cmd    *exec.Cmd
	done   chan struct{}
	log    string
	expect bool // its exit is expected (exits marker)
	ready  bool
}

var readmePort = regexp.MustCompile(`(127\.0\.0\.1|localhost):(7\d\d\d)\b`)

// rewrite moves a README line to free ports, the temporary directory and
// the temporary bin/.
func (r *readmeRun) rewrite(line string) string {
	line = readmePort.ReplaceAllStringFunc(line, func(m string) string {
		host, port, _ := strings.Cut(m, ":")
		if r.ports[port] == "" {
			_, p, _ := net.SplitHostPort(freePorts(r.t, 1)[0])
			r.ports[port] = p
		}
		return host + ":" + r.ports[port]
	})
	line = strings.ReplaceAll(line, "/tmp/kvraft", filepath.Join(r.tmp, "kvraft"))
	return regexp.MustCompile(`(^|\s)bin/`).ReplaceAllString(line, "${1}"+filepath.Join(r.tmp, "bin")+"/")
}

// flagValue returns the value of --name in a command line.
func flagValue(line, name string) string {
	f := strings.Fields(line)
	for i := range f[:len(f)-1] {
		if f[i] == "--"+name {
			return f[i+1]
		}
	}
	return ""
}

func (r *readmeRun) startNode(line string) {
	r.t.Helper()
	data := flagValue(line, "data")
	n := r.nodes[data]
	if n == nil {
		n = &readmeNode{log: filepath.Join(r.tmp, fmt.Sprintf("node%d.log", len(r.nodes)))}
		r.nodes[data] = n
	}
	n.line, n.tls, n.join, n.ready, n.expect = line, flagValue(line, "tls-cert") != "", strings.Contains(line, " --join "), false, false
	n.addr = flagValue(line, "http")
	if n.addr == "" {
		for _, p := range strings.Split(flagValue(line, "peers"), ",") {
			if id, a, _ := strings.Cut(p, "="); id == flagValue(line, "id") {
				n.addr = a
			}
		}
	}
	f, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	n.cmd = exec.Command("sh", "-c", "exec "+line)
	n.cmd.Dir, n.cmd.Stdout, n.cmd.Stderr = r.root, f, f
	if err := n.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	n.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(n.cmd, n.done)
	r.t.Logf("started: %s", line)
}

// waitNodes waits until every node started serves and is healthy (a node
// of a cluster that cannot have a leader yet, not all of whose members run,
// only serves).
func (r *readmeRun) waitNodes() {
	r.t.Helper()
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // readiness only: the commands verify
	defer hc.CloseIdleConnections()
	for data, n := range r.nodes {
		if n.ready || n.expect {
			continue
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			r.checkNode(data, n)
			scheme := "http"
			if n.tls {
				scheme = "https"
			}
			resp, err := hc.Get(scheme + "://" + n.addr + "/health")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				r.t.Fatalf("node %s did not become healthy (%v)\n%s", data, err, r.tail(n))
			}
			time.Sleep(50 * time.Millisecond)
		}
		n.ready = true
	}
}

func (r *readmeRun) tail(n *readmeNode) string {
	b, _ := os.ReadFile(n.log)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// checkNode fails the test if the node exited unexpectedly.
func (r *readmeRun) checkNode(data string, n *readmeNode) {
	r.t.Helper()
	select {
	case <-n.done:
		if !n.expect {
			r.t.Fatalf("node %s exited (%v) after: %s\n%s", data, n.cmd.ProcessState, n.line, r.tail(n))
		}
	default:
	}
}

func (r *readmeRun) checkNodes() {
	r.t.Helper()
	for data, n := range r.nodes {
		r.checkNode(data, n)
	}
}

// command runs a command line, which must succeed.
func (r *readmeRun) command(line string) {
	r.t.Helper()
	run := line
	withCode := strings.HasPrefix(line, "curl ") && !strings.Contains(line, "|")
	switch {
	case withCode:
		run = "curl --fail-with-body -sS --write-out '\n%{http_code}' " + strings.TrimPrefix(line, "curl ")
	case strings.HasPrefix(line, "curl "):
		run = "curl --fail-with-body -sS " + strings.TrimPrefix(line, "curl ")
	}
	again := strings.Contains(line, "run it again")
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		cmd := exec.CommandContext(ctx, "sh", "-c", run)
		cmd.Dir = r.root
		out, err := cmd.CombinedOutput()
		cancel()
		if err == nil {
			r.t.Logf("$ %s\n%s", line, strings.TrimSpace(string(out)))
			o := readmeOutput{line: line, body: strings.TrimSpace(string(out))}
			if i := strings.LastIndex(string(out), "\n"); withCode && i >= 0 {
				o.body = strings.TrimSpace(string(out[:i]))
				o.code, _ = strconv.Atoi(string(out[i+1:]))
			}
			r.checkOutput(o)
			return
		}
		if !again || time.Now().After(deadline) {
			r.t.Fatalf("$ %s\n%s\n%v", line, out, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// expectExit marks the node of an "exits" marker as about to stop.
func (r *readmeRun) expectExit(m string) {
	if dir, ok := strings.CutPrefix(m, "exits "); ok {
		if n := r.nodes[r.rewrite(dir)]; n != nil {
			n.expect = true
		}
	}
}

// marker does what a readme-test marker stands for.
func (r *readmeRun) marker(m string) {
	r.t.Helper()
	verb, dir, _ := strings.Cut(m, " ")
	dir = r.rewrite(dir)
	n := r.nodes[dir]
	if n == nil {
		r.t.Fatalf("marker %q: no node with --data %s", m, dir)
	}
	switch verb {
	case "stop":
		r.waitNodes()
		n.expect = true
		_ = n.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-n.done:
		case <-time.After(30 * time.Second):
			r.t.Fatalf("node %s did not stop on SIGINT", dir)
		}
		if code := n.cmd.ProcessState.ExitCode(); code != 0 {
			r.t.Fatalf("node %s: exit %d on SIGINT\n%s", dir, code, r.tail(n))
		}
	case "start":
		r.startNode(n.line)
	case "exits":
		n.expect = true
		select {
		case <-n.done:
		case <-time.After(30 * time.Second):
			r.t.Fatalf("node %s did not stop by itself", dir)
		}
		if code := n.cmd.ProcessState.ExitCode(); code != 1 {
			r.t.Fatalf("node %s: exit %d, want 1\n%s", dir, code, r.tail(n))
		}
		r.t.Logf("node %s stopped by itself: %s", dir, lastLine(r.tail(n)))
	default:
		r.t.Fatalf("unknown readme-test marker %q", m)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// stopAll stops every node still running with SIGINT: each must exit 0.
func (r *readmeRun) stopAll() {
	for data, n := range r.nodes {
		select {
		case <-n.done:
			continue
		default:
		}
		_ = n.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-n.done:
			if code := n.cmd.ProcessState.ExitCode(); code != 0 && !n.expect {
				r.t.Errorf("node %s: exit %d on SIGINT\n%s", data, code, r.tail(n))
			}
		case <-time.After(30 * time.Second):
			_ = n.cmd.Process.Kill()
			<-n.done
			r.t.Errorf("node %s did not stop on SIGINT", data)
		}
	}
}
