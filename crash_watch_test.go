package kvbuf

// A subscriber across the crash suite's kills (issue 31: "after a SIGKILL
// and reopen, a watch from the last resolved op replays exactly the missing
// changes"). Every crash child (crash_test.go) runs, beside its writers, a
// durable-mode watch that keeps its position as a downstream index would:
// it appends each resolved mark it receives ("M op watermark") to a file
// outside the engine directory, and resumes, in the next child, from the
// last mark + 1. It checks its own stream on the way: exactly the changes
// of the host's ops (crashEvents) from its start, in op order, each op
// whole before its mark. Nothing is synced: a SIGKILL keeps the page cache,
// so every line whose write returned survives the kill (a power cut is
// another suite's business), and a write(2) of one short line to a regular
// file is not cut in half by a signal.
//
// After each kill and the usual checks (verifyCrash), the parent
// (followResumedWatch) reopens the engine and acts as that subscriber and
// as the host: its last mark M must not be above the reopened watermark wm
// (a durable mark is durable); a watch from M+1 (durable and visible mode
// in turn) must deliver exactly the changes of ops M+1..wm and a mark at
// wm; the host then replays its log from wm+1 to the last op the child may
// have started (or to a random op below it: TestCrashRecovery) and ends
// that op (EndOp: nothing after it completes it),
// and the same watch must deliver exactly the changes of those ops, each
// once, in op order, then a mark at the last one (durable mode: after a
// Flush, with a watermark covering it).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// crashMarksEnv names the file of the child's subscriber (its resolved
// marks, one a line).
const crashMarksEnv = "KVBUF_CRASH_MARKS"

// crashMark is a resolved mark the subscriber kept: its op and, in durable
// mode, the watermark covering it.
type crashMark struct{ op, wm uint64 }

// readCrashMarks returns the last mark in the subscriber's file (zero if
// there is none) and the first error line the child's subscriber wrote
// (empty if none).
func readCrashMarks(path string) (last crashMark, failure string, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return crashMark{}, "", nil
	}
	if err != nil {
		return crashMark{}, "", fmt.Errorf("marks: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "E "); ok {
			if failure == "" {
				failure = rest
			}
			continue
		}
		fs := strings.Fields(line)
		if len(fs) != 3 || fs[0] != "M" {
			return crashMark{}, "", fmt.Errorf("marks: line %d %q: malformed", n, line)
		}
		op, err1 := strconv.ParseUint(fs[1], 10, 64)
		wm, err2 := strconv.ParseUint(fs[2], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return crashMark{}, "", fmt.Errorf("marks: line %d: %w", n, err)
		}
		if op < last.op || wm < op {
			return crashMark{}, "", fmt.Errorf("marks: line %d %q after mark %d: out of order, or a watermark below its op", n, line, last.op)
		}
		last = crashMark{op, wm}
	}
	if err := sc.Err(); err != nil {
		return crashMark{}, "", fmt.Errorf("marks: %w", err)
	}
	return last, failure, nil
}

// crashStream checks a watch's changes against the host's ops: next is the
// op whose changes come next and idx how many of them were delivered.
type crashStream struct {
	next uint64
	idx  int
	evs  []string // crashEvents(next)
}

func newCrashStream(from uint64) *crashStream {
	return &crashStream{next: from, evs: crashEvents(from)}
}

// change checks that e is the next change of the host's ops.
func (s *crashStream) change(e WatchEvent) error {
	if s.idx == len(s.evs) {
		s.next++
		s.idx, s.evs = 0, crashEvents(s.next)
	}
	if got := evText(e); got != s.evs[s.idx] {
		return fmt.Errorf("change %d of op %d: got %s, want %s", s.idx, s.next, got, s.evs[s.idx])
	}
	s.idx++
	return nil
}

// mark checks that a mark at op n comes where every change of every op up
// to n, and none after, was delivered.
func (s *crashStream) mark(n uint64) error {
	complete := s.next - 1 // every change of the ops up to it was delivered
	if s.idx == len(s.evs) {
		complete = s.next
	}
	if n != complete || (s.idx > 0 && s.idx < len(s.evs)) {
		return fmt.Errorf("mark %d after %d of the %d changes of op %d", n, s.idx, len(s.evs), s.next)
	}
	return nil
}

// crashSubscribe starts the child's durable subscriber on db (see the top
// of the file) after delay: with a delay its watch resumes while the
// writers write, so that its move from the retained changes to the
// in-memory log (doc/design.md, R3) meets flushes and writes in flight. It
// runs until the child dies. A failure is written to the file as an "E"
// line, which the parent reports.
func crashSubscribe(db *DB, path string, delay time.Duration) error {
	last, _, err := readCrashMarks(path)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("marks: %w", err)
	}
	ctx := context.Background()
	go func() {
		time.Sleep(delay)
		w, err := db.Watch(ctx, &WatchOptions{From: last.op + 1, Durable: true})
		if err != nil {
			fmt.Fprintf(f, "E watch from the last mark %d + 1: %v\n", last.op, err)
			return
		}
		fail := func(err error) {
			fmt.Fprintf(f, "E subscriber from %d: %v\n", last.op+1, err)
			w.Close()
		}
		s := newCrashStream(last.op + 1)
		for {
			e, err := w.Next(ctx)
			if err != nil {
				fail(err)
				return
			}
			if e.Kind != EventResolved {
				if err := s.change(e); err != nil {
					fail(err)
					return
				}
				continue
			}
			if err := s.mark(e.Op); err != nil {
				fail(err)
				return
			}
			if e.Watermark < e.Op {
				fail(fmt.Errorf("durable mark %d with watermark %d", e.Op, e.Watermark))
				return
			}
			if _, err := fmt.Fprintf(f, "M %d %d\n", e.Op, e.Watermark); err != nil {
				fail(err)
				return
			}
		}
	}()
	return nil
}

// followResumedWatch is the parent's side after a kill whose reopened
// watermark is wm (see the top of the file): it resumes the subscriber
// kept in marksPath (appending its own durable marks there), replays the
// host's ops wm+1..last and returns the watermark the engine has after
// Close (last, or wm if there was nothing to replay) and the op the watch
// resumed from.
func followResumedWatch(t testing.TB, dir, marksPath string, wm, last uint64, durable bool) (end, from uint64) {
	t.Helper()
	mark, failure, err := readCrashMarks(marksPath)
	if err != nil {
		t.Fatal(err)
	}
	if failure != "" {
		t.Fatalf("the child's subscriber failed: %s", failure)
	}
	if mark.op > wm || mark.wm > wm {
		t.Fatalf("the child's subscriber got a durable mark %d (watermark %d), above the watermark %d after the crash", mark.op, mark.wm, wm)
	}
	db, err := Open(dir, &Options{WatchRetain: &WatchRetention{}})
	if err != nil {
		t.Fatalf("reopen for the subscriber: %v", err)
	}
	closed := false
	defer func() {
		if !closed {
			db.Close()
		}
	}()
	if got := db.Watermark(); got != wm {
		t.Fatalf("watermark %d on the second reopen, %d on the first", got, wm)
	}
	ctx := context.Background()
	from = mark.op + 1
	if floor := db.Metrics().WatchRetainedFrom; from < floor {
		// Only in long runs past the retention's byte bound: the
		// subscriber must resync (ErrCompacted); it resumes at the floor.
		if _, err := db.Watch(ctx, &WatchOptions{From: from, Durable: durable}); !errors.Is(err, ErrCompacted) {
			t.Fatalf("watch from the last mark %d + 1, below the retained op %d: %v, want ErrCompacted", mark.op, floor, err)
		}
		from = floor
	}
	w, err := db.Watch(ctx, &WatchOptions{From: from, Durable: durable})
	if err != nil {
		t.Fatalf("watch from the last mark %d + 1 (durable %v): %v", mark.op, durable, err)
	}
	defer w.Close()
	var marks *os.File
	if durable {
		if marks, err = os.OpenFile(marksPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); err != nil {
			t.Fatal(err)
		}
		defer marks.Close()
	}
	s := newCrashStream(from)
	what := fmt.Sprintf("watermark %d: watch resumed from %d (durable %v)", wm, from, durable)
	// until reads changes until a mark at n or above, which must be n.
	until := func(n uint64, phase string) {
		for {
			nctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			e, err := w.Next(nctx)
			cancel()
			if err != nil {
				t.Fatalf("%s, %s: waiting for a mark at %d after %d of the %d changes of op %d: %v",
					what, phase, n, s.idx, len(s.evs), s.next, err)
			}
			if e.Kind != EventResolved {
				if err := s.change(e); err != nil {
					t.Fatalf("%s, %s: %v", what, phase, err)
				}
				continue
			}
			if err := s.mark(e.Op); err != nil {
				t.Fatalf("%s, %s: %v", what, phase, err)
			}
			if durable && e.Watermark < e.Op {
				t.Fatalf("%s, %s: durable mark %d with watermark %d", what, phase, e.Op, e.Watermark)
			}
			if marks != nil {
				if _, err := fmt.Fprintf(marks, "M %d %d\n", e.Op, e.Watermark); err != nil {
					t.Fatal(err)
				}
			}
			if e.Op >= n {
				if e.Op != n {
					t.Fatalf("%s, %s: mark %d, want %d", what, phase, e.Op, n)
				}
				return
			}
		}
	}
	if from <= wm {
		until(wm, "the retained ops")
	}
	if last > wm {
		cw, err := newCrashWorker(db)
		if err != nil {
			t.Fatal(err)
		}
		for n := wm + 1; n <= last; n++ {
			if err := cw.apply(ctx, crashOpFor(n)); err != nil {
				t.Fatalf("replay of op %d: %v", n, err)
			}
		}
		// The log ends here: the host ends its last op, which no later
		// op's write completes (the watermark and the marks stop below an
		// op of single calls that has not ended).
		if err := db.EndOp(ctx, last); err != nil {
			t.Fatalf("end of the replay at op %d: %v", last, err)
		}
		if durable {
			if err := db.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		until(last, fmt.Sprintf("the host's replay of ops %d..%d", wm+1, last))
	}
	w.Close()
	closed = true
	if err := db.Close(); err != nil {
		t.Fatalf("close after the replay: %v", err)
	}
	return max(wm, last), from
}
