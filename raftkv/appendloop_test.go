package raftkv

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/kvbuf/kvbuf/internal/testutil"
)

// Rule 2 of the append loop: once writeAppends returns a group's responses,
// every append of the group is durable. The log store is on a crashable
// MemFS; a crash clone that keeps no unsynced data must hold every entry
// of the group (a group of one, and groups of several, whose earlier
// appends are written without a sync of their own).
func TestAppendGroupDurable(t *testing.T) {
	for _, group := range []int{1, 2, 5} {
		t.Run(fmt.Sprintf("group=%d", group), func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			if err := testutil.MkdirDurable(mem, "/node"); err != nil {
				t.Fatal(err)
			}
			ls, err := openLogStore(mem, "/node/log")
			if err != nil {
				t.Fatal(err)
			}
			n := &Node{id: 1, ls: ls, appends: newAppendQueue(maxPendingAppends)}
			prev := ls.hardState()
			var items []appendItem
			for i := 1; i <= group; i++ {
				m := &raftpb.Message{Type: raftpb.MsgStorageAppend.Enum(), To: proto.Uint64(1),
					Entries:   []*raftpb.Entry{{Index: proto.Uint64(uint64(i)), Term: proto.Uint64(1), Data: []byte("entry")}},
					Responses: []*raftpb.Message{{Type: raftpb.MsgAppResp.Enum(), To: proto.Uint64(2), Index: proto.Uint64(uint64(i))}}}
				if i == 1 {
					m.Term, m.Vote, m.Commit = proto.Uint64(1), proto.Uint64(1), proto.Uint64(0)
				}
				n.appends.pending.Add(1)
				items = append(items, appendItem{m: m})
			}
			resps, err := n.writeAppends(items, &prev)
			if err != nil {
				t.Fatal(err)
			}
			if len(resps) != group || n.appends.pending.Load() != 0 {
				t.Fatalf("%d responses, %d pending; want %d, 0", len(resps), n.appends.pending.Load(), group)
			}
			img := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
			if err := ls.close(); err != nil {
				t.Fatal(err)
			}
			after, err := openLogStore(img, "/node/log")
			if err != nil {
				t.Fatal(err)
			}
			defer after.close()
			if _, last := after.bounds(); last != uint64(group) {
				t.Fatalf("after a power cut the log ends at %d; the group's responses were delivered with entries 1..%d", last, group)
			}
			if hs := after.hardState(); hs.GetTerm() != 1 || hs.GetVote() != 1 {
				t.Fatalf("after a power cut the HardState is %v", hs)
			}
		})
	}
}
