package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvbuf/kvbuf/internal/testutil"
)

// Three kvraft processes on 127.0.0.1, SIGKILLed one at a time (the leader
// and followers, alternately) while clients write through every node.
// After each round (a kill and a restart) the test stops the clients and
// checks that every node holds every acknowledged write and that all nodes
// have the same content digest at the same applied index, and that the
// restarted node re-applied at most the entries appended after its
// durable watermark. KVRAFT_KILLS=N runs N rounds (default 3).

// proc is one kvraft process.
type proc struct {
	id   int
	args []string
	log  string // its stderr, appended to across restarts
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *proc) start(t *testing.T) {
	t.Helper()
	cmd := testutil.Reexec(t, kvraftRole, "KVRAFT_ARGS="+strings.Join(p.args, "\n"), "GORACE=atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	p.cmd, p.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(p.done) }()
}

func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// term stops the process cleanly and returns its exit status.
func (p *proc) term(t *testing.T) int {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.kill()
		t.Errorf("node %d did not stop on SIGTERM", p.id)
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// loader writes keys through every node until stopped: each client
// writes through one node (client c through node c mod n) and moves to the
// next after a failed write or 100 writes, so that a stopped or killed
// node costs a client a timeout now and then, not one in every n writes.
type loader struct {
	addrs  []string
	prefix string
	stop   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	acked  []string
	errors atomic.Int64
}

func startLoad(addrs []string, prefix string, clients int) *loader {
	l := &loader{addrs: addrs, prefix: prefix, stop: make(chan struct{})}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: clients}}
	for c := range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer hc.CloseIdleConnections()
			node := c % len(addrs)
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				key := fmt.Sprintf("%s-%d-%06d", prefix, c, i)
				addr := addrs[node]
				req, _ := http.NewRequest(http.MethodPut, "http://"+addr+"/kv/ks/"+key, strings.NewReader(key))
				resp, err := hc.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				if err != nil || resp.StatusCode != http.StatusNoContent {
					l.errors.Add(1)
					node = (node + 1) % len(addrs)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				l.mu.Lock()
				l.acked = append(l.acked, key)
				l.mu.Unlock()
				if i%100 == 99 {
					node = (node + 1) % len(addrs)
				}
			}
		}()
	}
	return l
}

func (l *loader) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

func (l *loader) finish() []string {
	close(l.stop)
	l.wg.Wait()
	return l.acked
}

// keysOf returns every pair of keyspace ks on the node at addr, read
// locally (stale: the test checks each node's own state), page by page.
func keysOf(t *testing.T, addr string) map[string]string {
	t.Helper()
	m := map[string]string{}
	after := ""
	for {
		resp, err := http.Get("http://" + addr + "/kv/ks?stale=1&limit=10000" + after)
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Pairs []struct{ Key, Value string } `json:"pairs"`
			More  bool                          `json:"more"`
			Next  string                        `json:"next"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("scan of %s: %v", addr, err)
		}
		for _, p := range out.Pairs {
			m[p.Key] = p.Value
		}
		if !out.More {
			return m
		}
		after = "&after=" + url.QueryEscape(out.Next)
	}
}

func TestProcessKills(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	rounds := 3
	if s := os.Getenv("KVRAFT_KILLS"); s != "" {
		var err error
		if rounds, err = strconv.Atoi(s); err != nil || rounds < 1 {
			t.Fatalf("KVRAFT_KILLS=%q", s)
		}
	}
	addrs := freePorts(t, 3)
	dir := t.TempDir()
	var procs []*proc
	for i := range 3 {
		p := &proc{id: i + 1, log: filepath.Join(dir, fmt.Sprintf("node%d.log", i+1)), args: []string{
			"--id", fmt.Sprint(i + 1), "--peers", peerFlag(addrs), "--data", filepath.Join(dir, fmt.Sprint(i+1)),
			"--tick", "20ms", "--log-retain", "200", "--log-level", "warn",
		}}
		p.start(t)
		procs = append(procs, p)
	}
	defer func() {
		for _, p := range procs {
			select {
			case <-p.done:
			default:
				if code := p.term(t); code != 0 {
					t.Errorf("node %d: exit %d on SIGTERM\n%s", p.id, code, p.tail())
				}
			}
		}
		if t.Failed() {
			for _, p := range procs {
				t.Logf("node %d log:\n%s", p.id, p.tail())
			}
		}
	}()
	waitLeader(t, addrs)
	for {
		r := call(t, "PUT", "http://"+addrs[0]+"/keyspaces/ks", nil)
		if r.code == 204 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var acked []string
	var maxReplayed, maxLog uint64
	for round := range rounds {
		load := startLoad(addrs, fmt.Sprintf("r%d", round), 8)
		time.Sleep(time.Duration(200+rand.IntN(500)) * time.Millisecond)
		// Alternate: the leader, then a random node.
		victim := procs[rand.IntN(3)]
		if round%2 == 0 {
			lead := waitLeader(t, addrs)
			for _, p := range procs {
				if addrs[p.id-1] == lead {
					victim = p
				}
			}
		}
		victim.kill()
		time.Sleep(time.Duration(100+rand.IntN(700)) * time.Millisecond)
		victim.start(t)
		// Writes go on while it restarts and catches up.
		before := load.count()
		deadline := time.Now().Add(30 * time.Second)
		for load.count() < before+50 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		acked = append(acked, load.finish()...)

		digest := converged(t, addrs, 60*time.Second)
		st, err := getStatus(addrs[victim.id-1], false)
		if err != nil {
			t.Fatal(err)
		}
		m := st.Metrics
		if m.Reapplied > m.RestartLastIndex-m.RestartWatermark {
			t.Errorf("round %d: node %d re-applied %d entries, more than the %d appended after its watermark %d",
				round, victim.id, m.Reapplied, m.RestartLastIndex-m.RestartWatermark, m.RestartWatermark)
		}
		maxReplayed = max(maxReplayed, m.Reapplied+m.Redelivered)
		maxLog = max(maxLog, m.RestartLastIndex)
		for _, a := range addrs {
			got := keysOf(t, a)
			for _, k := range acked {
				if got[k] != k {
					t.Fatalf("round %d: node at %s lost acknowledged key %s (has %q)", round, a, k, got[k])
				}
			}
		}
		t.Logf("round %d: killed node %d; %d writes acknowledged so far (%d failed this round); digest %s; the restart resumed at %d (watermark %d, log to %d): %d redelivered, %d re-applied",
			round, victim.id, len(acked), load.errors.Load(), digest, m.RestartApplied, m.RestartWatermark, m.RestartLastIndex, m.Redelivered, m.Reapplied)
		if t.Failed() {
			return
		}
	}
	t.Logf("%d kills; the most entries a restart replayed: %d (of logs up to %d entries)", rounds, maxReplayed, maxLog)

	// A node wiped and re-added (under a new ID: IDs are never reused, at
	// the same address) catches up by snapshot while writes go on.
	load := startLoad(addrs, "rejoin", 8)
	victim := procs[2]
	if r := call(t, "DELETE", "http://"+addrs[0]+"/members/3", nil); r.code != 204 {
		t.Fatalf("remove node 3: %+v", r)
	}
	select {
	case <-victim.done: // a removed node stops by itself
	case <-time.After(30 * time.Second):
		t.Fatal("the removed node did not stop")
	}
	if code := victim.cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(victim.tail(), "removed") {
		t.Fatalf("removed node: exit %d\n%s", code, victim.tail())
	}
	if err := os.RemoveAll(filepath.Join(dir, "3")); err != nil {
		t.Fatal(err)
	}
	before := load.count()
	for load.count() < before+300 {
		time.Sleep(20 * time.Millisecond) // enough for the log to be compacted past the start
	}
	if r := call(t, "POST", "http://"+addrs[1]+"/members/4?addr="+addrs[2], nil); r.code != 204 {
		t.Fatalf("add node 4 (a learner): %+v", r)
	}
	victim.id = 4
	victim.args = []string{"--id", "4", "--peers", peerFlag(addrs[:2]), "--http", addrs[2], "--join",
		"--data", filepath.Join(dir, "4"), "--tick", "20ms", "--log-retain", "200", "--log-level", "warn"}
	victim.start(t)
	before = load.count()
	for load.count() < before+100 {
		time.Sleep(20 * time.Millisecond)
	}
	// Promoted once caught up (409 until then).
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := call(t, "POST", "http://"+addrs[0]+"/members/4/promote", nil)
		if r.code == 204 {
			break
		}
		if r.code != 409 || time.Now().After(deadline) {
			t.Fatalf("promote node 4: %+v", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	acked = append(acked, load.finish()...)
	converged(t, addrs, 60*time.Second)
	for _, a := range addrs {
		got := keysOf(t, a)
		for _, k := range acked {
			if got[k] != k {
				t.Fatalf("after the re-add: node at %s lost acknowledged key %s", a, k)
			}
		}
	}
	st, err := getStatus(addrs[2], false)
	if err != nil {
		t.Fatal(err)
	}
	if st.ID != 4 || st.Metrics.SnapshotsInstalled == 0 || len(st.Members) != 3 {
		t.Fatalf("the re-added node: %+v", st)
	}
}

// Leader pauses: three kvraft processes with --log-retain 1 (each node
// compacts its log as far as its engine's durable watermark allows) under
// a 4-writer load; the leader is SIGSTOPped for longer than an election
// timeout and SIGCONTed, again and again. Every pause must change the
// leader: while the old leader is stopped, one of the two others leads in
// a higher term (read from their /status) and acknowledges a write; once
// resumed, the old leader follows a leader of that term or a later one.
// Any exit of a process fails the test (the leader panicked in
// such a loop: "entry N found where M was expected"); at the end every
// node holds every acknowledged write and the digests agree.
//
// The resumed leader catches up from the log as a rule: within an 800 ms
// pause its peers' watermarks seldom pass the entries it lacks (no
// snapshot was installed in the short runs so far; with 10 s pauses, one
// now and then). The test logs how many were installed but requires none:
// catching up by snapshot is TestProcessKills' (its re-added node) and
// raftkv's. Nor does this test catch the compaction gap of the issue
// (mutation 60, testdata/mutations/60-raftkv-compact-gap.patch) reliably:
// raftkv's TestLogStoreNoGap does, deterministically.
//
// KVRAFT_PAUSES=N runs N pauses (default 3) and KVRAFT_PAUSE the length of
// each (default 800ms); the loop is KVRAFT_PAUSES=30
// KVRAFT_PAUSE=10s (with go test -timeout 30m).
func TestProcessLeaderPauses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	pauses, pause := 3, 800*time.Millisecond
	if s := os.Getenv("KVRAFT_PAUSES"); s != "" {
		var err error
		if pauses, err = strconv.Atoi(s); err != nil || pauses < 1 {
			t.Fatalf("KVRAFT_PAUSES=%q", s)
		}
	}
	if s := os.Getenv("KVRAFT_PAUSE"); s != "" {
		var err error
		if pause, err = time.ParseDuration(s); err != nil || pause <= 0 {
			t.Fatalf("KVRAFT_PAUSE=%q", s)
		}
	}
	addrs := freePorts(t, 3)
	dir := t.TempDir()
	var procs []*proc
	for i := range 3 {
		p := &proc{id: i + 1, log: filepath.Join(dir, fmt.Sprintf("node%d.log", i+1)), args: []string{
			"--id", fmt.Sprint(i + 1), "--peers", peerFlag(addrs), "--data", filepath.Join(dir, fmt.Sprint(i+1)),
			"--tick", "20ms", "--log-retain", "1", "--log-level", "warn",
		}}
		p.start(t)
		procs = append(procs, p)
	}
	exited := func() *proc {
		for _, p := range procs {
			select {
			case <-p.done:
				return p
			default:
			}
		}
		return nil
	}
	defer func() {
		for _, p := range procs {
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			select {
			case <-p.done:
			default:
				if code := p.term(t); code != 0 {
					t.Errorf("node %d: exit %d on SIGTERM\n%s", p.id, code, p.tail())
				}
			}
		}
		if t.Failed() {
			for _, p := range procs {
				t.Logf("node %d log:\n%s", p.id, p.tail())
			}
		}
	}()
	waitLeader(t, addrs)
	for {
		if r := call(t, "PUT", "http://"+addrs[0]+"/keyspaces/ks", nil); r.code == 204 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	load := startLoad(addrs, "p", 4)
	var paused []string // the writes acknowledged by the new leaders
	for i := range pauses {
		lead := waitLeader(t, addrs)
		var victim *proc
		for _, p := range procs {
			if addrs[p.id-1] == lead {
				victim = p
			}
		}
		st, err := getStatus(lead, false)
		if err != nil {
			t.Fatal(err)
		}
		oldTerm := st.Term
		start := time.Now()
		if err := victim.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		// A new leader, in a higher term, among the nodes still running
		// (the stopped one does not answer).
		var newLead status
		deadline := time.Now().Add(30 * time.Second)
		for newLead.State != "leader" {
			if p := exited(); p != nil {
				t.Fatalf("pause %d: node %d exited (%v)", i, p.id, p.cmd.ProcessState)
			}
			if time.Now().After(deadline) {
				t.Fatalf("pause %d: no leader change in 30s after stopping leader node %d (term %d)", i, victim.id, oldTerm)
			}
			time.Sleep(20 * time.Millisecond)
			for _, p := range procs {
				if p == victim {
					continue
				}
				if st, err := getStatus(addrs[p.id-1], false); err == nil && st.State == "leader" && st.Term > oldTerm {
					newLead = st
				}
			}
		}
		// It takes writes while the old leader is stopped.
		key := fmt.Sprintf("pause-%d", i)
		if r := call(t, "PUT", "http://"+addrs[newLead.ID-1]+"/kv/ks/"+key, []byte(key)); r.code != 204 {
			t.Fatalf("pause %d: write through the new leader, node %d: %+v", i, newLead.ID, r)
		}
		paused = append(paused, key)
		if rest := pause - time.Since(start); rest > 0 {
			time.Sleep(rest) // the pause's length is what the test varies
		}
		stopped := time.Since(start)
		if err := victim.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		// The old leader steps down and follows.
		deadline = time.Now().Add(30 * time.Second)
		for {
			st, err := getStatus(lead, false)
			if err == nil && st.State == "follower" && st.Term >= newLead.Term && st.Leader != 0 && st.Leader != uint64(victim.id) {
				break
			}
			if p := exited(); p != nil {
				t.Fatalf("pause %d: node %d exited (%v)", i, p.id, p.cmd.ProcessState)
			}
			if time.Now().After(deadline) {
				t.Fatalf("pause %d: resumed node %d does not follow the leader of term %d: %+v %v", i, victim.id, newLead.Term, st, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		// Writes go on after the resume.
		before := load.count()
		deadline = time.Now().Add(30 * time.Second)
		for load.count() < before+50 && time.Now().Before(deadline) && exited() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		if p := exited(); p != nil {
			t.Fatalf("pause %d: node %d exited (%v)", i, p.id, p.cmd.ProcessState)
		}
		if load.count() < before+50 {
			t.Fatalf("pause %d of node %d: only %d writes in 30s after the resume", i, victim.id, load.count()-before)
		}
		t.Logf("pause %d: paused leader node %d (term %d) for %v: node %d led in term %d; %d writes acknowledged so far (%d failed)",
			i, victim.id, oldTerm, stopped.Round(time.Millisecond), newLead.ID, newLead.Term, load.count(), load.errors.Load())
	}
	acked := append(load.finish(), paused...)
	digest := converged(t, addrs, 60*time.Second)
	if p := exited(); p != nil {
		t.Fatalf("node %d exited (%v)", p.id, p.cmd.ProcessState)
	}
	for _, a := range addrs {
		got := keysOf(t, a)
		for _, k := range acked {
			if got[k] != k {
				t.Fatalf("node at %s lost acknowledged key %s (has %q)", a, k, got[k])
			}
		}
	}
	var installed uint64
	for _, a := range addrs {
		st, err := getStatus(a, false)
		if err != nil {
			t.Fatal(err)
		}
		installed += st.Metrics.SnapshotsInstalled
	}
	t.Logf("%d pauses, %d writes acknowledged, digest %s, %d snapshots installed", pauses, len(acked), digest, installed)
}
