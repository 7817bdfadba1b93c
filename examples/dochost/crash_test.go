package dochost

// The example host under SIGKILL (issue 20): a child process (this test
// binary, re-executed as "dochost") runs four concurrent writers against a
// Store, with interval flushes, log compaction and out-of-order op ends,
// until the parent kills it at a random moment. Before each op is begun
// the child journals it (after its log record is written, so the journal
// holds every op that compaction may have dropped from the log); after
// each acknowledgement it journals the ack. After every kill the parent
// reopens the Store (which replays its log) and checks:
//
//   - every document is exactly as the ops journaled or logged, applied in
//     op order, leave it (acknowledged or not: a logged op is replayed);
//   - every acknowledged op is among them;
//   - the engine's watermark never goes backwards, is not above the last
//     op logged, and Open's replay skipped exactly the log records at or
//     below it (redelivered ops).
//
// KVBUF_DOCHOST_KILLS sets the number of kills (default 6; a soak: 1000).

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvbuf/kvbuf"
	"github.com/kvbuf/kvbuf/internal/testutil"
)

const (
	crashDirEnv  = "KVBUF_DOCHOST_DIR"
	crashSeedEnv = "KVBUF_DOCHOST_SEED"
	crashIDs     = 64
)

// crashBody is the body a put of document id by op writes.
func crashBody(id, op uint64) []byte { return fmt.Appendf(nil, "doc %d op %d", id, op) }

// crashChild runs writers until it is killed.
func crashChild() int {
	dir := os.Getenv(crashDirEnv)
	seed, _ := strconv.ParseUint(os.Getenv(crashSeedEnv), 10, 64)
	time.AfterFunc(30*time.Second, func() { os.Exit(3) }) // an orphan must not run forever
	rng := rand.New(rand.NewPCG(seed, 0))
	s, err := Open(filepath.Join(dir, "store"), &Options{
		CompactAbove: 50 + rng.IntN(200),
		Engine:       &kvbuf.Options{FlushInterval: time.Duration(1+rng.IntN(5)) * time.Millisecond},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 4
	}
	journal, err := os.OpenFile(filepath.Join(dir, "journal"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "journal:", err)
		return 4
	}
	s.journal = func(r record) {
		kind := "P"
		if r.delete {
			kind = "D"
		}
		fmt.Fprintf(journal, "%s %d %d\n", kind, r.op, r.id) // one write: atomic on O_APPEND
	}
	rep := testutil.NewReporter(os.Stdout)
	rep.Ready(s.next)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)+1))
			for {
				id := rng.Uint64N(crashIDs)
				var op uint64
				var err error
				if rng.IntN(4) == 0 {
					op, err = s.Delete(ctx, id)
				} else {
					op, err = s.putOp(ctx, id, crashBody)
				}
				if err != nil {
					fmt.Fprintln(os.Stderr, "write:", err)
					os.Exit(4)
				}
				fmt.Fprintf(journal, "A %d\n", op)
			}
		})
	}
	wg.Wait()
	return 4
}

type crashEntry struct {
	del bool
	id  uint64
}

// readJournal parses the child's journal: ops (P/D lines) and acks (A).
func readJournal(t *testing.T, path string) (ops map[uint64]crashEntry, acks []uint64) {
	t.Helper()
	ops = map[uint64]crashEntry{}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return ops, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		n := func(i int) uint64 {
			v, err := strconv.ParseUint(fs[i], 10, 64)
			if err != nil {
				t.Fatalf("journal line %q", sc.Text())
			}
			return v
		}
		switch {
		case len(fs) == 2 && fs[0] == "A":
			acks = append(acks, n(1))
		case len(fs) == 3 && (fs[0] == "P" || fs[0] == "D"):
			ops[n(1)] = crashEntry{del: fs[0] == "D", id: n(2)}
		default:
			t.Fatalf("journal line %q", sc.Text()) // lines are written whole
		}
	}
	return ops, acks
}

func crashKills(t *testing.T) int {
	n := testutil.EnvInt(t, "KVBUF_DOCHOST_KILLS", 6)
	if testing.Short() {
		n = min(n, 3)
	}
	return n
}

func TestCrashDocHost(t *testing.T) {
	kills := crashKills(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %d kills (KVBUF_DOCHOST_KILLS)", seed, kills)
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := t.TempDir()
	history := map[uint64]crashEntry{} // every op ever logged
	var lastWM uint64
	var acked int
	for k := range kills {
		runDocHostChild(t, dir, seed+uint64(k), time.Duration(20+rng.IntN(300))*time.Millisecond)
		// What the child logged: its journal, and its log (an op may be
		// in the log and not yet journaled).
		jops, acks := readJournal(t, filepath.Join(dir, "journal"))
		recs, _, err := readLog(filepath.Join(dir, "store", "oplog"))
		if err != nil {
			t.Fatal(err)
		}
		for op, e := range jops {
			history[op] = e
		}
		for _, r := range recs {
			if e, ok := history[r.op]; ok && (e.del != r.delete || e.id != r.id) {
				t.Fatalf("kill %d: op %d is %+v in the journal, %+v in the log", k+1, r.op, e, r)
			}
			history[r.op] = crashEntry{del: r.delete, id: r.id}
		}
		for _, op := range acks {
			if _, ok := history[op]; !ok {
				t.Fatalf("kill %d: acknowledged op %d is neither in the log nor journaled", k+1, op)
			}
		}
		acked = len(acks)

		s, err := Open(filepath.Join(dir, "store"), nil)
		if err != nil {
			t.Fatalf("kill %d: reopen: %v", k+1, err)
		}
		wm := s.DB().Watermark()
		ops := slices.Sorted(func(yield func(uint64) bool) {
			for op := range history {
				if !yield(op) {
					return
				}
			}
		})
		var lastOp uint64
		if len(ops) > 0 {
			lastOp = ops[len(ops)-1]
		}
		var below int64
		for _, r := range recs {
			if r.op <= wm {
				below++
			}
		}
		switch {
		case wm < lastWM:
			t.Fatalf("kill %d: watermark went back from %d to %d", k+1, lastWM, wm)
		case wm > lastOp:
			t.Fatalf("kill %d: watermark %d above the last op logged (%d)", k+1, wm, lastOp)
		case s.Skipped != below || s.Replayed != int64(len(recs)):
			t.Fatalf("kill %d: replay applied %d log records, skipped %d; the log has %d, %d at or below watermark %d",
				k+1, s.Replayed, s.Skipped, len(recs), below, wm)
		}
		lastWM = wm
		want, deleted := map[uint64][]byte{}, map[uint64]bool{}
		for _, op := range ops {
			e := history[op]
			if e.del {
				delete(want, e.id)
				deleted[e.id] = true
			} else {
				want[e.id] = crashBody(e.id, op)
				deleted[e.id] = false
			}
		}
		wantState(t, s, want, deleted, crashIDs)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if testing.Verbose() {
			t.Logf("kill %d: %d ops logged, %d acknowledged, watermark %d, log %d records (%d below it)", k+1, len(history), acked, wm, len(recs), below)
		}
	}
	t.Logf("%d kills survived; %d ops, %d acknowledged, watermark %d", kills, len(history), acked, lastWM)
}

// runDocHostChild runs one child and SIGKILLs it after delay.
func runDocHostChild(t *testing.T, dir string, seed uint64, delay time.Duration) {
	t.Helper()
	t.Logf("child seed %d", seed)
	testutil.RunAndKill(t, testutil.Reexec(t, "dochost", crashDirEnv+"="+dir, crashSeedEnv+"="+strconv.FormatUint(seed, 10), "GORACE=halt_on_error=1"), delay)
}
