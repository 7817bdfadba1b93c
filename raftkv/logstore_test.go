package raftkv

import (
	"errors"
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
			if _, err := decodeCommand(b[:n]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%v cut at %d: %v", c.kind, n, err)
			}
		}
		if _, err := decodeCommand(append(b, 0)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%v with a trailing byte: %v", c.kind, err)
		}
	}
	for name, b := range map[string][]byte{
		"version": {2, byte(cmdPut), 0, 0, 0, 0, 0, 0, 0, 0, 0},
		"kind":    {1, 99, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		"bit":     append((&command{kind: cmdSetBit, name: "b"}).encode()[:13], 0, 7),
		"flags":   append((&command{kind: cmdDeleteRange, name: "b"}).encode()[:13], 9, 0, 0),
	} {
		if _, err := decodeCommand(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("bad %s: %v", name, err)
		}
	}
}

func TestLogStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	ls, err := openLogStore(dir)
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
	ls, err = openLogStore(dir)
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
	if _, err := decodeMembership(m.encode()[:5]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a cut membership record: %v", err)
	}
}
