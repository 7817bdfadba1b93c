package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvbuf/kvbuf/raftkv"
)

// /health, /metrics and kvraft status: a healthy cluster says so; a node
// left alone says it has no leader, and status reports the unreachable
// ones (exit 1).
func TestHealthMetricsStatus(t *testing.T) {
	nodes, addrs := startCluster(t)
	if r := call(t, "PUT", "http://"+addrs[0]+"/keyspaces/ks", nil); r.code != 204 {
		t.Fatal(r)
	}
	converged(t, addrs, 20*time.Second)
	for _, a := range addrs {
		if r := call(t, "GET", "http://"+a+"/health", nil); r.code != 200 || !strings.Contains(r.body, `"healthy": true`) {
			t.Fatalf("health of %s: %+v", a, r)
		}
	}
	r := call(t, "GET", "http://"+addrs[0]+"/metrics", nil)
	for _, want := range []string{
		`kvraft_term{node="1"} `, `kvraft_commit_index{node="1"} `, `kvraft_applied_index{node="1"} `,
		`kvraft_leader_changes_total{node="1"} 1`, `kvraft_proposals_dropped_total{node="1"} 0`,
		`kvraft_send_errors_total{node="1"} `, `kvraft_snapshots_sent_total{node="1"} 0`, `kvraft_has_leader{node="1"} 1`,
		`kvbuf_watermark{node="1"} `, `kvbuf_keyspaces{node="1"} 1`, "go_goroutines ", "# TYPE kvraft_elections_total counter",
	} {
		if r.code != 200 || !strings.Contains(r.body, want) {
			t.Fatalf("/metrics lacks %q:\n%.2000s", want, r.body)
		}
	}
	var out, errb syncBuffer
	if code := runStatus(context.Background(), []string{"--endpoints", strings.Join(addrs, ",")}, &out, &errb); code != 0 {
		t.Fatalf("kvraft status: exit %d: %s %s", code, &out, &errb)
	}
	table := out.String()
	if !regexp.MustCompile(`(?m)^ENDPOINT +ID +ROLE +TERM +COMMIT +APPLIED +LAG +LEADER`).MatchString(table) ||
		strings.Count(table, "leader ") < 1 || strings.Count(table, "follower") != 2 {
		t.Fatalf("kvraft status:\n%s", table)
	}
	t.Logf("kvraft status:\n%s", table)

	// Two nodes down: the third has no leader, and is unhealthy.
	nodes[1].stop(t)
	nodes[2].stop(t)
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := call1(t, "GET", "http://"+addrs[0]+"/health", nil)
		if r.code == 503 && strings.Contains(r.body, "no leader known") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("health of a node alone: %+v", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, errb = syncBuffer{}, syncBuffer{}
	code := runStatus(context.Background(), []string{"--endpoints", strings.Join(addrs, ",")}, &out, &errb)
	checkOneLine(t, "kvraft status with two nodes down", code, 1, errb.String(), "2 of 3 endpoints unreachable, 0 stopped")
	if strings.Count(out.String(), "unreachable") != 2 {
		t.Fatalf("kvraft status with two nodes down:\n%s", &out)
	}
	for _, args := range [][]string{{}, {"--endpoints", ""}, {"--endpoints", "x", "extra"}, {"--endpoints", "x", "--cert", "c.pem"}} {
		errb = syncBuffer{}
		if code := runStatus(context.Background(), args, &out, &errb); code != 2 || strings.Count(errb.String(), "\n") != 1 {
			t.Errorf("kvraft status %v: exit %d, %q", args, code, errb.String())
		}
	}
}

// A scan pages past its limit with ?after= (and ?after_b64= for keys that
// are not UTF-8): every key once, in order.
func TestScanPaging(t *testing.T) {
	_, addrs := startCluster(t)
	u := "http://" + addrs[1]
	if r := call(t, "PUT", u+"/keyspaces/ks", nil); r.code != 204 {
		t.Fatal(r)
	}
	var want []string
	for i := range 25 {
		k := fmt.Sprintf("k%02d", i)
		if i == 13 {
			k = "k13\xff" // not UTF-8: its cursor is after_b64
		}
		want = append(want, k)
		if r := call(t, "PUT", u+"/kv/ks/"+url.PathEscape(k), []byte("v")); r.code != 204 {
			t.Fatal(r)
		}
	}
	if r := call(t, "PUT", u+"/kv/ks/other", []byte("v")); r.code != 204 {
		t.Fatal(r)
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("scan does not end")
		}
		r := call(t, "GET", u+"/kv/ks?prefix=k&limit=4"+cursor, nil)
		var page struct {
			Pairs []struct {
				Key    string `json:"key"`
				KeyB64 []byte `json:"key_b64"`
			} `json:"pairs"`
			More    bool   `json:"more"`
			Next    string `json:"next"`
			NextB64 []byte `json:"next_b64"`
		}
		if r.code != 200 || json.Unmarshal([]byte(r.body), &page) != nil {
			t.Fatalf("page: %+v", r)
		}
		for _, p := range page.Pairs {
			if p.KeyB64 != nil {
				got = append(got, string(p.KeyB64))
			} else {
				got = append(got, p.Key)
			}
		}
		if !page.More {
			break
		}
		if page.NextB64 != nil {
			cursor = "&after_b64=" + url.QueryEscape(base64.StdEncoding.EncodeToString(page.NextB64))
		} else {
			cursor = "&after=" + url.QueryEscape(page.Next)
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("paged scan: %q, want %q", got, want)
	}
	for _, bad := range []string{"?after=a&after_b64=YQ==", "?after_b64=!!"} {
		if r := call(t, "GET", u+"/kv/ks"+bad, nil); r.code != 400 {
			t.Errorf("scan %s: %+v", bad, r)
		}
	}
}

// A node's data directory is private: every directory the node or its
// engine creates is 0700 and every file 0600 (identity, lock, raft log,
// the engine's manifest, store and bitslices).
func TestPrivateDataDir(t *testing.T) {
	nodes, addrs := startCluster(t)
	if r := call(t, "PUT", "http://"+addrs[0]+"/keyspaces/ks", nil); r.code != 204 {
		t.Fatal(r)
	}
	if r := call(t, "PUT", "http://"+addrs[0]+"/bitslices/bs", nil); r.code != 204 {
		t.Fatal(r)
	}
	converged(t, addrs, 20*time.Second)
	dir := nodes[0].dir
	var files int
	checkModes(t, dir, func(rel string, isDir bool) (os.FileMode, os.FileMode) {
		if !isDir && strings.HasPrefix(rel, "engine") {
			files++
		}
		return 0o700, 0o600
	})
	if files == 0 {
		t.Fatal("no engine files")
	}
	// An existing directory keeps its mode, with a warning.
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	p := startNode(t, "--id", "1", "--peers", "1="+freePorts(t, 1)[0], "--data", open, "--log-level", "warn")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.stderr.String(), "open to more than its mode") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(p.stderr.String(), "open to more than its mode") {
		t.Fatalf("no warning for a 0755 data directory: %s", p.stderr)
	}
}

// A backup taken under load (kvraft snapshot, GET /snapshot) restores
// (kvraft restore, once per node) to a new cluster whose content digest
// equals the source's at the backup's index; the new cluster takes writes.
func TestBackupRestore(t *testing.T) {
	_, addrs := startCluster(t)
	if r := call(t, "PUT", "http://"+addrs[0]+"/keyspaces/ks", nil); r.code != 204 {
		t.Fatal(r)
	}
	if r := call(t, "PUT", "http://"+addrs[0]+"/bitslices/bs", nil); r.code != 204 {
		t.Fatal(r)
	}
	if r := call(t, "PUT", "http://"+addrs[1]+"/bits/bs/4242", []byte("1")); r.code != 204 {
		t.Fatal(r)
	}
	load := startLoad(addrs, "b", 4)
	for load.count() < 200 {
		time.Sleep(10 * time.Millisecond)
	}
	file := filepath.Join(t.TempDir(), "backup.snap")
	var out, errb syncBuffer
	if code := runSnapshot(context.Background(), []string{"--endpoint", addrs[1], "--out", file}, &out, &errb); code != 0 {
		t.Fatalf("kvraft snapshot: exit %d: %s %s", code, &out, &errb)
	}
	acked := load.count()
	load.finish()
	m := regexp.MustCompile(`^snapshot of node 2 at index (\d+): \d+ bytes, digest ([0-9a-f]+), in `).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("kvraft snapshot printed %q", out.String())
	}
	index, digest := m[1], m[2]
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the backup file: %v, %v", st, err)
	}
	if code := runSnapshot(context.Background(), []string{"--endpoint", addrs[1], "--out", file}, &out, &errb); code != 1 {
		t.Fatalf("kvraft snapshot over an existing file: exit %d", code)
	}
	t.Logf("backup at index %s (digest %s) after %d acknowledged writes", index, digest, acked)

	newAddrs := freePorts(t, 3)
	dir := t.TempDir()
	for i := range 3 {
		out, errb = syncBuffer{}, syncBuffer{}
		args := []string{"--snapshot", file, "--id", fmt.Sprint(i + 1), "--peers", peerFlag(newAddrs), "--data", filepath.Join(dir, fmt.Sprint(i+1))}
		if code := runRestore(context.Background(), args, &out, &errb); code != 0 || !strings.Contains(out.String(), "at index "+index) {
			t.Fatalf("kvraft restore %v: exit %d: %s %s", args, code, &out, &errb)
		}
	}
	for i := range 3 {
		startNode(t, "--id", fmt.Sprint(i+1), "--peers", peerFlag(newAddrs), "--data", filepath.Join(dir, fmt.Sprint(i+1)), "--tick", "20ms")
	}
	waitLeader(t, newAddrs)
	if got := converged(t, newAddrs, 30*time.Second); got != digest {
		t.Fatalf("the restored cluster's digest %s, the source's at index %s %s", got, index, digest)
	}
	idx, _ := strconv.ParseUint(index, 10, 64)
	for _, a := range newAddrs {
		if st, err := getStatus(a, false); err != nil || st.Applied < idx {
			t.Fatalf("restored node %s: %+v, %v", a, st, err)
		}
	}
	if r := call(t, "GET", "http://"+newAddrs[2]+"/bits/bs/4242", nil); r.code != 200 || strings.TrimSpace(r.body) != "1" {
		t.Fatalf("a bit of the backup: %+v", r)
	}
	if r := call(t, "PUT", "http://"+newAddrs[0]+"/kv/ks/after-restore", []byte("v")); r.code != 204 {
		t.Fatalf("a write to the restored cluster: %+v", r)
	}
	// Mistakes: into a directory that is not empty, a node not in --peers,
	// a file that is not a snapshot.
	junk := filepath.Join(t.TempDir(), "junk")
	if err := os.WriteFile(junk, []byte("not a snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--snapshot", file, "--id", "1", "--peers", peerFlag(newAddrs), "--data", filepath.Join(dir, "1")}, 1, "not empty"},
		{[]string{"--snapshot", file, "--id", "4", "--peers", peerFlag(newAddrs), "--data", t.TempDir()}, 2, "no entry for node 4"},
		{[]string{"--snapshot", junk, "--id", "1", "--peers", peerFlag(newAddrs), "--data", filepath.Join(t.TempDir(), "x")}, 1, "stream"},
		{[]string{"--snapshot", "/nonexistent", "--id", "1", "--peers", peerFlag(newAddrs), "--data", filepath.Join(t.TempDir(), "x")}, 1, "no such file"},
		{[]string{"--id", "1"}, 2, "--snapshot"},
	} {
		errb = syncBuffer{}
		if code := runRestore(context.Background(), c.args, &out, &errb); code != c.code || !strings.Contains(errb.String(), c.want) ||
			strings.Count(errb.String(), "\n") != 1 {
			t.Errorf("kvraft restore %v: exit %d, %q; want %d with %q", c.args, code, errb.String(), c.code, c.want)
		}
	}
}

// /health's lag rule (--health-max-lag, main.go's doc): a node whose
// applied index trails its commit index by more than the bound answers
// 503, not healthy, with the problem; by the bound or less it answers 200.
// The flag sets the bound (default 1000).
func TestHealthMaxLag(t *testing.T) {
	for _, c := range []struct {
		commit, applied, maxLag uint64
		code                    int
		problem                 string
	}{
		{100, 100, 0, 200, ""},
		{100, 99, 0, 503, "applied index 99 trails the commit index 100 by 1 entries (more than 0)"},
		{1100, 100, 1000, 200, ""},
		{1101, 100, 1000, 503, "applied index 100 trails the commit index 1101 by 1001 entries (more than 1000)"},
		{100, 90, 10, 200, ""},
		{100, 89, 10, 503, "by 11 entries (more than 10)"},
		{100, 101, 0, 200, ""}, // applied past the commit index raft last reported
	} {
		st := raftkv.Status{ID: 1, State: "follower", Leader: 2, Term: 3, Commit: c.commit, Applied: c.applied}
		out, code := healthOf(st, c.maxLag)
		b, _ := json.Marshal(out)
		switch {
		case code != c.code || out.Healthy != (c.code == 200):
			t.Errorf("commit %d, applied %d, bound %d: HTTP %d %s, want %d", c.commit, c.applied, c.maxLag, code, b, c.code)
		case c.problem == "" && len(out.Problems) != 0,
			c.problem != "" && (len(out.Problems) != 1 || !strings.Contains(out.Problems[0], c.problem)):
			t.Errorf("commit %d, applied %d, bound %d: problems %q, want %q", c.commit, c.applied, c.maxLag, out.Problems, c.problem)
		}
	}
	for _, c := range []struct {
		args []string
		want uint64
	}{
		{nil, 1000},
		{[]string{"--health-max-lag", "0"}, 0},
		{[]string{"--health-max-lag", "25"}, 25},
	} {
		var stderr syncBuffer
		cfg, code, ok := parseArgs(append([]string{"--id", "1", "--peers", "1=127.0.0.1:1"}, c.args...), &stderr)
		if !ok || cfg.maxLag != c.want {
			t.Errorf("kvraft %v: bound %d (exit %d, %s), want %d", c.args, cfg.maxLag, code, &stderr, c.want)
		}
	}
}

// kvraft snapshot's errors are one line: usage errors exit 2, a node that
// cannot be reached exits 1, and no file is left behind.
func TestSnapshotErrors(t *testing.T) {
	out := filepath.Join(t.TempDir(), "backup.snap")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{}, 2, "--endpoint is required"},
		{[]string{"--endpoint", "127.0.0.1:1"}, 2, "--out is required"},
		{[]string{"--endpoint", "127.0.0.1:1", "--out", out, "extra"}, 2, "unexpected argument"},
		{[]string{"--bogus"}, 2, "bogus"},
		{[]string{"--endpoint", "127.0.0.1:1", "--out", out, "--cert", "c.pem"}, 2, "--cert and --key go together"},
		{[]string{"--endpoint", "127.0.0.1:1", "--out", out}, 1, "connection refused"},
		{[]string{"--endpoint", "127.0.0.1:99999", "--out", out}, 1, "invalid port"},
	} {
		var stdout, stderr syncBuffer
		code := dispatch(context.Background(), append([]string{"snapshot"}, c.args...), &stdout, &stderr)
		checkOneLine(t, fmt.Sprintf("kvraft snapshot %v", c.args), code, c.code, stderr.String(), c.want)
		if stdout.String() != "" {
			t.Errorf("kvraft snapshot %v: stdout %q", c.args, &stdout)
		}
		t.Logf("kvraft snapshot %v: exit %d: %s", c.args, code, strings.TrimSpace(stderr.String()))
	}
	if m, _ := filepath.Glob(out + "*"); len(m) != 0 {
		t.Errorf("files left behind: %v", m)
	}
}

// checkModes walks dir and reports every directory and file whose
// permissions are not the ones want gives for its path relative to dir.
func checkModes(t *testing.T, dir string, want func(rel string, isDir bool) (dirMode, fileMode os.FileMode)) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		st, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		wantDir, wantFile := want(rel, d.IsDir())
		switch mode := st.Mode().Perm(); {
		case d.IsDir() && mode != wantDir:
			t.Errorf("directory %s: mode %#o, want %#o", rel, mode, wantDir)
		case !d.IsDir() && mode != wantFile:
			t.Errorf("file %s: mode %#o, want %#o", rel, mode, wantFile)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
