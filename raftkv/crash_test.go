package raftkv

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kvbuf/kvbuf/internal/testutil"
)

// Crash tests: a child process runs a single-node cluster and writes until
// its parent SIGKILLs it; the parent reopens the directory and checks that
// every acknowledged write is there and that the restart replayed only
// what the engine had not made durable.

const crashRole = "raftkv-writer"

func init() { childRoles[crashRole] = crashChild }

// crashOptions are the child's and the parent's options for dir.
func crashOptions(dir string) *Options {
	return &Options{
		ID:            1,
		Peers:         map[uint64]string{1: "127.0.0.1:1"}, // a single node sends nothing
		Dir:           dir,
		TickInterval:  10 * time.Millisecond,
		ElectionTicks: 5,
		LogRetain:     50, // compacted often: never past what the engine made durable
	}
}

// crashChild opens the node in RAFTKV_DIR and writes keys with 8 writers,
// printing "A <key>" once each is acknowledged, until it is killed.
func crashChild() int {
	n, err := Open(crashOptions(os.Getenv("RAFTKV_DIR")))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	for !n.IsLeader() {
		time.Sleep(5 * time.Millisecond)
	}
	if err := n.CreateKeyspace(ctx, "ks"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	prefix := os.Getenv("RAFTKV_PREFIX")
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				key := fmt.Sprintf("%s-%d-%06d", prefix, w, i)
				if err := n.Put(ctx, "ks", []byte(key), []byte(key)); err != nil {
					fmt.Fprintln(os.Stderr, err)
					return
				}
				mu.Lock()
				_, _ = os.Stdout.WriteString("A " + key + "\n") // one write: atomic on a pipe
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return 1
}

// killAfter runs the child on dir, SIGKILLs it after it acknowledged at
// least acks writes, and returns every key it acknowledged.
func killAfter(t *testing.T, dir, prefix string, acks int) []string {
	t.Helper()
	cmd := testutil.Reexec(t, crashRole, "RAFTKV_DIR="+dir, "RAFTKV_PREFIX="+prefix, "GORACE=atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var keys []string
	sc := bufio.NewScanner(out)
	killed := false
	for sc.Scan() {
		line := sc.Text()
		key, ok := strings.CutPrefix(line, "A ")
		if !ok {
			t.Fatalf("child wrote %q", line)
		}
		keys = append(keys, key)
		if len(keys) == acks && !killed {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			killed = true
		}
	}
	_ = cmd.Wait()
	if !killed {
		t.Fatalf("the child exited after %d acknowledged writes", len(keys))
	}
	return keys
}

// TestCrashReplaysFromWatermark kills a writing node repeatedly: after each
// restart every acknowledged write is there, the restart resumed at the
// engine's watermark (not the start of the log), and the entries it
// re-applied are at most those appended after that watermark.
func TestCrashReplaysFromWatermark(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "node")
	var acked []string
	rounds := 3
	if os.Getenv("RAFTKV_LONG") != "" {
		rounds = 20
	}
	for round := range rounds {
		acked = append(acked, killAfter(t, dir, fmt.Sprintf("r%d", round), 1000+rand.IntN(2000))...)
		n, err := Open(crashOptions(dir))
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		m := n.Metrics()
		ctx, cancel := context.WithTimeout(bg, 30*time.Second)
		if err := n.WaitApplied(ctx, m.RestartLastIndex); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		cancel()
		m = n.Metrics()
		trunc, _ := n.ls.bounds()
		t.Logf("round %d: %d acknowledged; log (%d, %d], watermark %d, resumed at %d: %d entries redelivered, %d re-applied",
			round, len(acked), trunc, m.RestartLastIndex, m.RestartWatermark, m.RestartApplied, m.Redelivered, m.Reapplied)
		if round == rounds-1 && trunc == 0 {
			t.Errorf("the log was never compacted")
		}
		switch {
		case m.RestartWatermark == 0:
			t.Errorf("round %d: the engine made nothing durable", round)
		case m.Reapplied > m.RestartLastIndex-m.RestartWatermark:
			t.Errorf("round %d: re-applied %d entries, more than the %d after the watermark", round, m.Reapplied, m.RestartLastIndex-m.RestartWatermark)
		case m.Redelivered+m.Reapplied != m.RestartLastIndex-m.RestartApplied:
			t.Errorf("round %d: %d + %d entries replayed, want the %d after the resume point", round, m.Redelivered, m.Reapplied, m.RestartLastIndex-m.RestartApplied)
		case m.RestartApplied < m.RestartWatermark && m.Redelivered == 0:
			t.Errorf("round %d: resumed below the watermark but redelivered nothing", round)
		}
		for _, k := range acked {
			v, err := n.Get(bg, "ks", []byte(k), &ReadOptions{Stale: true})
			if err != nil || string(v) != k {
				t.Fatalf("round %d: acknowledged key %s: %q, %v", round, k, v, err)
			}
		}
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// setCommit rewrites the persisted HardState's commit index, as a crash
// leaves it when the write of a commit-only HardState (which raft does not
// require to be synced) was lost.
func setCommit(t *testing.T, dir string, commit uint64) {
	t.Helper()
	ls, err := openLogStore(nodeFS(nil, DefaultDirMode), filepath.Join(dir, logDir))
	if err != nil {
		t.Fatal(err)
	}
	hs := ls.hardState()
	hs.Commit = proto.Uint64(commit)
	if err := ls.save(hs, nil, true); err != nil {
		t.Fatal(err)
	}
	if err := ls.close(); err != nil {
		t.Fatal(err)
	}
}

// etcd-io/etcd#10217: a restart whose persisted commit index is below the
// engine's watermark resumes raft at the commit index (raft panics if
// Config.Applied is above it), and raft redelivers entries the engine has
// already made durable; applying them again is a no-op of the engine, not
// an error.
func TestRestartBelowWatermark(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "node")
	n, err := Open(crashOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "leadership", n.IsLeader)
	if err := n.CreateKeyspace(bg, "ks"); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if err := n.Put(bg, "ks", fmt.Appendf(nil, "k%03d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	// Overwrite some keys so that a redelivered entry applied again would
	// change the content.
	for i := range 20 {
		if err := n.Put(bg, "ks", fmt.Appendf(nil, "k%03d", i), []byte("w")); err != nil {
			t.Fatal(err)
		}
	}
	_, before, err := n.Digest(bg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	ls, err := openLogStore(nodeFS(nil, DefaultDirMode), filepath.Join(dir, logDir))
	if err != nil {
		t.Fatal(err)
	}
	commit := ls.hardState().GetCommit()
	ls.close()
	const lost = 40
	setCommit(t, dir, commit-lost)

	n, err = Open(crashOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	m := n.Metrics()
	if m.RestartApplied != commit-lost || m.RestartWatermark < commit-1 {
		t.Fatalf("restart metrics %+v, want a resume at %d below a watermark of about %d", m, commit-lost, commit)
	}
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	if err := n.WaitApplied(ctx, commit); err != nil {
		t.Fatalf("waiting for the redelivered entries: %v (node error %v)", err, n.Err())
	}
	m = n.Metrics()
	if m.Redelivered != m.RestartWatermark-m.RestartApplied {
		t.Fatalf("%d entries redelivered, want %d", m.Redelivered, m.RestartWatermark-m.RestartApplied)
	}
	// The engine skipped them: its own count of redelivered calls.
	if em := n.EngineMetrics(); em.Redelivered != int64(m.Redelivered) {
		t.Fatalf("the engine skipped %d redelivered entries, the node handed it %d", em.Redelivered, m.Redelivered)
	}
	_, after, err := n.Digest(bg)
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("content changed by redelivered entries: digest %s, was %s", after, before)
	}
	if err := n.Err(); err != nil {
		t.Fatal(err)
	}
}

// The log is compacted only below the engine's durable watermark: at every
// moment the log's base is at or below it (a crash then never needs a
// compacted entry).
func TestCompactionBelowWatermark(t *testing.T) {
	o := crashOptions(filepath.Join(t.TempDir(), "node"))
	o.LogRetain = 1
	n, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	waitFor(t, 10*time.Second, "leadership", n.IsLeader)
	if err := n.CreateKeyspace(bg, "ks"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := n.Put(bg, "ks", fmt.Appendf(nil, "%d-%d", w, i), []byte("v")); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	deadline := time.Now().Add(time.Second)
	samples := 0
	for time.Now().Before(deadline) {
		st := n.Status() // reads the log's bounds, then the watermark
		if st.LogFirst-1 > st.Watermark {
			t.Errorf("log compacted to %d, past the durable watermark %d", st.LogFirst-1, st.Watermark)
			break
		}
		samples++
	}
	close(stop)
	wg.Wait()
	if m := n.Metrics(); m.Compactions < 3 {
		t.Fatalf("only %d compactions in %d samples", m.Compactions, samples)
	}
}
