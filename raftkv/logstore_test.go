package raftkv

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func ent(index, term uint64, data string) *raftpb.Entry {
	return &raftpb.Entry{Index: proto.Uint64(index), Term: proto.Uint64(term), Type: raftpb.EntryNormal.Enum(), Data: []byte(data)}
}

func indexes(t *testing.T, ents []*raftpb.Entry) []uint64 {
	t.Helper()
	out := []uint64{}
	for _, e := range ents {
		out = append(out, e.GetIndex())
	}
	return out
}

func TestCommandRoundTrip(t *testing.T) {
	for _, c := range []*command{
		{kind: cmdPut, id: 7, name: "users", key: []byte("k"), value: []byte("v")},
		{kind: cmdPut, id: 8, name: "users", key: []byte("k"), value: nil},
		{kind: cmdDelete, id: 1, name: "a", key: []byte("\x00\xff")},
		{kind: cmdDeleteRange, name: "a", key: []byte("a"), hasLo: true},
		{kind: cmdDeleteRange, name: "a", value: []byte("z"), hasHi: true},
		{kind: cmdDeleteRange, name: "a"},
		{kind: cmdSetBit, name: "b", bit: 1 << 39, set: true},
		{kind: cmdSetBit, name: "b", bit: 3},
		{kind: cmdCreateKeyspace, name: "ks"},
		{kind: cmdCreateBitslice, name: "bs"},
		{kind: cmdMeta, cluster: 0xfeedface12345678},
		{kind: cmdMeta, node: 3, incarnation: 1 << 63},
	} {
		b := c.encode()
		got, err := decodeCommand(b)
		if err != nil {
			t.Fatalf("%v: %v", c.kind, err)
		}
		if len(got.key) == 0 {
			got.key = nil
		}
		if len(got.value) == 0 {
			got.value = nil
		}
		want := *c
		if len(want.value) == 0 {
			want.value = nil
		}
		if !reflect.DeepEqual(*got, want) {
			t.Fatalf("round trip of %+v gave %+v", want, *got)
		}
		// Every prefix is refused, never a panic.
		for n := range len(b) {
			if _, err := decodeCommand(b[:n]); !errors.Is(err, ErrCorruptLog) {
				t.Fatalf("%v cut at %d: %v", c.kind, n, err)
			}
		}
		if _, err := decodeCommand(append(b, 0)); !errors.Is(err, ErrCorruptLog) {
			t.Fatalf("%v with a trailing byte: %v", c.kind, err)
		}
	}
	for name, b := range map[string][]byte{
		"version": {2, byte(cmdPut), 0, 0, 0, 0, 0, 0, 0, 0, 0},
		"kind":    {1, 99, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		"bit":     append((&command{kind: cmdSetBit, name: "b"}).encode()[:13], 0, 7),
		"flags":   append((&command{kind: cmdDeleteRange, name: "b"}).encode()[:13], 9, 0, 0),
	} {
		if _, err := decodeCommand(b); !errors.Is(err, ErrCorruptLog) {
			t.Errorf("bad %s: %v", name, err)
		}
	}
}

func TestLogStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	ls, err := openLogStore(nodeFS(nil, DefaultDirMode), dir)
	if err != nil {
		t.Fatal(err)
	}
	if !ls.empty() {
		t.Fatal("a new log store is not empty")
	}
	var ents []*raftpb.Entry
	for i := uint64(1); i <= 10; i++ {
		ents = append(ents, ent(i, 1, "x"))
	}
	hs := &raftpb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(5)}
	if err := ls.save(hs, ents, true); err != nil {
		t.Fatal(err)
	}
	// A conflicting suffix replaces entries 8..10 with 8..9 of term 2.
	if err := ls.save(nil, []*raftpb.Entry{ent(8, 2, "y"), ent(9, 2, "y")}, true); err != nil {
		t.Fatal(err)
	}
	check := func(ls *logStore, trunc, last uint64) {
		t.Helper()
		if f, _ := ls.FirstIndex(); f != trunc+1 {
			t.Fatalf("FirstIndex %d, want %d", f, trunc+1)
		}
		if l, _ := ls.LastIndex(); l != last {
			t.Fatalf("LastIndex %d, want %d", l, last)
		}
		if _, err := ls.Entries(trunc, last+1, 1<<20); trunc > 0 && !errors.Is(err, raft.ErrCompacted) {
			t.Fatalf("Entries below the base: %v", err)
		}
		if _, err := ls.Entries(trunc+1, last+2, 1<<20); !errors.Is(err, raft.ErrUnavailable) {
			t.Fatalf("Entries past the end: %v", err)
		}
		got, err := ls.Entries(trunc+1, last+1, 1<<20)
		if err != nil || len(got) != int(last-trunc) || got[0].GetIndex() != trunc+1 {
			t.Fatalf("Entries(%d, %d) = %v, %v", trunc+1, last+1, indexes(t, got), err)
		}
		if one, err := ls.Entries(trunc+1, last+1, 0); err != nil || len(one) != 1 {
			t.Fatalf("Entries with maxSize 0 = %v, %v (want one entry)", indexes(t, one), err)
		}
		if term, err := ls.Term(9); err != nil || term != 2 {
			t.Fatalf("Term(9) = %d, %v", term, err)
		}
		if _, err := ls.Term(last + 1); !errors.Is(err, raft.ErrUnavailable) {
			t.Fatalf("Term past the end: %v", err)
		}
	}
	check(ls, 0, 9)
	if err := ls.compact(6); err != nil {
		t.Fatal(err)
	}
	check(ls, 6, 9)
	if term, err := ls.Term(6); err != nil || term != 1 {
		t.Fatalf("Term of the base = %d, %v", term, err)
	}
	if _, err := ls.Term(5); !errors.Is(err, raft.ErrCompacted) {
		t.Fatalf("Term below the base: %v", err)
	}
	if err := ls.compact(20); err == nil {
		t.Fatal("compaction past the last entry")
	}
	if err := ls.close(); err != nil {
		t.Fatal(err)
	}
	// Everything survives a reopen, read from pebble (no cache).
	ls, err = openLogStore(nodeFS(nil, DefaultDirMode), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ls.close()
	check(ls, 6, 9)
	if got := ls.hardState(); got.GetCommit() != 5 || got.GetTerm() != 1 {
		t.Fatalf("hard state after reopen: %v", got)
	}
	snap, _ := ls.Snapshot()
	if snap.GetMetadata().GetIndex() != 6 || snap.GetMetadata().GetTerm() != 1 {
		t.Fatalf("Snapshot metadata %v", snap.GetMetadata())
	}
	// A snapshot install resets the log at its index.
	meta := &raftpb.SnapshotMetadata{Index: proto.Uint64(100), Term: proto.Uint64(3), ConfState: &raftpb.ConfState{Voters: []uint64{1}}}
	m := membership{conf: meta.GetConfState(), peers: map[uint64]string{1: "127.0.0.1:1"}, removed: []uint64{4}}
	if err := ls.installSnapshot(meta, m, engineDirName(100), nil, []*raftpb.Entry{ent(101, 3, "z")}); err != nil {
		t.Fatal(err)
	}
	if f, _ := ls.FirstIndex(); f != 101 {
		t.Fatalf("FirstIndex after a snapshot: %d", f)
	}
	if name, _ := ls.engineName(); name != engineDirName(100) {
		t.Fatalf("engine after a snapshot: %q", name)
	}
	got, ok, err := ls.membershipAt(100)
	if err != nil || !ok || !reflect.DeepEqual(got.peers, m.peers) || !reflect.DeepEqual(got.removed, m.removed) {
		t.Fatalf("membership at 100: %+v %v %v", got, ok, err)
	}
	if _, err := decodeMembership(m.encode()[:5]); !errors.Is(err, ErrCorruptLog) {
		t.Fatalf("a cut membership record: %v", err)
	}
}

// readLog reads the whole log through raft.Storage as raft does (FirstIndex,
// LastIndex, then Entries and Term over that range, and below it) and
// returns an error for any answer that does not fit the others: a gap, an
// entry at the wrong index, a term missing in range, an entry below the
// base that is not ErrCompacted.
func readLog(ls *logStore) error {
	first, _ := ls.FirstIndex()
	last, _ := ls.LastIndex()
	for lo := uint64(1); lo < first; lo++ {
		if _, err := ls.Entries(lo, last+1, 1<<30); !errors.Is(err, raft.ErrCompacted) {
			return fmt.Errorf("Entries(%d, %d) below the first index %d: %v, want ErrCompacted", lo, last+1, first, err)
		}
	}
	for lo := first; lo <= last; lo++ {
		got, err := ls.Entries(lo, last+1, 1<<30)
		if err != nil {
			return fmt.Errorf("Entries(%d, %d) with first index %d: %w", lo, last+1, first, err)
		}
		for k, e := range got {
			if e.GetIndex() != lo+uint64(k) {
				return fmt.Errorf("Entries(%d, %d)[%d] is entry %d", lo, last+1, k, e.GetIndex())
			}
		}
		if uint64(len(got)) != last+1-lo {
			return fmt.Errorf("Entries(%d, %d) returned %d entries", lo, last+1, len(got))
		}
	}
	for i := first - 1; i <= last; i++ {
		if _, err := ls.Term(i); err != nil {
			return fmt.Errorf("Term(%d) with first index %d, last %d: %w", i, first, last, err)
		}
	}
	return nil
}

// A compaction or a snapshot install stopped between its steps (after its
// batch is committed, before the log's base moves in memory): the
// raft.Storage methods called meanwhile either wait for it to finish or
// answer consistently, never with a gap. (A compaction that committed its
// deletion before taking the lock let a leader's Entries find "entry N
// where M was expected", which raft turns into a panic.)
func TestLogStoreNoGap(t *testing.T) {
	for _, step := range []string{"compact", "install"} {
		t.Run(step, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "log")
			ls, err := openLogStore(nodeFS(nil, DefaultDirMode), dir)
			if err != nil {
				t.Fatal(err)
			}
			var ents []*raftpb.Entry
			for i := uint64(1); i <= 20; i++ {
				ents = append(ents, ent(i, 1, "x"))
			}
			if err := ls.save(&raftpb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(20)}, ents, true); err != nil {
				t.Fatal(err)
			}
			// Reopened, so that reads go to pebble rather than the cache of
			// recent entries.
			if err := ls.close(); err != nil {
				t.Fatal(err)
			}
			if ls, err = openLogStore(nodeFS(nil, DefaultDirMode), dir); err != nil {
				t.Fatal(err)
			}
			defer ls.close()
			paused, resume := make(chan struct{}), make(chan struct{})
			ls.testHook = func(string) {
				close(paused)
				<-resume
			}
			done := make(chan error, 1)
			go func() {
				if step == "compact" {
					done <- ls.compact(10)
					return
				}
				meta := &raftpb.SnapshotMetadata{Index: proto.Uint64(30), Term: proto.Uint64(2), ConfState: &raftpb.ConfState{Voters: []uint64{1}}}
				m := membership{conf: meta.GetConfState(), peers: map[uint64]string{1: "127.0.0.1:1"}}
				done <- ls.installSnapshot(meta, m, engineDirName(30), nil, []*raftpb.Entry{ent(31, 2, "y"), ent(32, 2, "y")})
			}()
			<-paused
			if ls.mu.TryLock() {
				// Readers are let in between the steps: what they see
				// must hold together.
				ls.mu.Unlock()
				if err := readLog(ls); err != nil {
					t.Errorf("%s stopped between its steps: %v", step, err)
				}
				close(resume)
			} else {
				// Readers wait for the step to finish (started while it
				// holds the lock, they cannot see it half done).
				read := make(chan error, 1)
				go func() { read <- readLog(ls) }()
				close(resume)
				if err := <-read; err != nil {
					t.Errorf("read across %s: %v", step, err)
				}
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if err := readLog(ls); err != nil {
				t.Fatalf("after %s: %v", step, err)
			}
			want := uint64(11)
			if step == "install" {
				want = 31
			}
			if f, _ := ls.FirstIndex(); f != want {
				t.Fatalf("first index %d after %s, want %d", f, step, want)
			}
		})
	}
}
