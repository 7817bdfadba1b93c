package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvbuf/kvbuf"
)

// watchFixture makes an engine that retained its feed: ops 1-6 in keyspace
// "users" and bitslice "live", flushed, closed.
func watchFixture(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "e")
	db, err := kvbuf.Open(dir, &kvbuf.Options{WatchRetain: &kvbuf.WatchRetention{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	users, err := db.KV("users")
	if err != nil {
		t.Fatal(err)
	}
	live, err := db.Bits("live")
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(users.Put(ctx, []byte("ann"), []byte("1"), 1))
	must(users.Put(ctx, []byte("bob"), []byte{0xff, 0}, 2))
	must(live.Set(ctx, 0, true, 3))
	must(users.Delete(ctx, []byte("ann"), 4))
	must(users.DeleteRange(ctx, []byte("b"), nil, 5))
	must(live.SetRange(ctx, 2, 9, true, 6))
	must(db.EndOp(ctx, 6))
	must(db.Close())
	return dir
}

func TestWatchCommand(t *testing.T) {
	dir := watchFixture(t)
	code, out, errOut := runCLI(t, "watch", dir)
	want := `1 put users "ann"="1"
2 put users "bob"="\xff\x00"
3 set-bits live [0, 1) 1
4 delete users "ann"
5 delete-range users ["b", -)
6 set-bits live [2, 9) 1
resolved 6 watermark 6
`
	if code != 0 || out != want {
		t.Fatalf("watch: exit %d\n%s\nwant\n%s%s", code, out, want, errOut)
	}
	// From an op, one keyspace with a prefix.
	code, out, errOut = runCLI(t, "watch", "--from", "2", "--keyspace", "users=b", dir)
	want = `2 put users "bob"="\xff\x00"
5 delete-range users ["b", "c")
resolved 6 watermark 6
`
	if code != 0 || out != want {
		t.Fatalf("watch --from 2 --keyspace users=b: exit %d\n%s\nwant\n%s%s", code, out, want, errOut)
	}
	// JSON lines.
	code, out, errOut = runCLI(t, "watch", "--json", "--from", "2", "--bitslice", "live", dir)
	if code != 0 {
		t.Fatalf("watch --json: exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("watch --json: %d lines:\n%s", len(lines), out)
	}
	var e watchJSON
	if err := json.Unmarshal([]byte(lines[0]), &e); err != nil || e.Kind != "set-bits" || e.Op != 3 || e.Lo == nil || *e.Lo != 0 || *e.Hi != 1 || e.Bit == nil || !*e.Bit {
		t.Fatalf("watch --json line %s: %+v %v", lines[0], e, err)
	}
	code, out, _ = runCLI(t, "watch", "--json", "--from", "2", "--keyspace", "users", dir)
	if code != 0 || !strings.Contains(out, `"value_base64":"/wA="`) || !strings.Contains(out, `"kind":"resolved","watermark":6`) {
		t.Fatalf("watch --json users: exit %d\n%s", code, out)
	}
	// Past the watermark: nothing to print.
	if code, out, errOut := runCLI(t, "watch", "--from", "7", dir); code != 0 || out != "" {
		t.Fatalf("watch --from 7: exit %d %q %q", code, out, errOut)
	}
}

func TestWatchCommandErrors(t *testing.T) {
	dir := watchFixture(t)
	code, out, errOut := runCLI(t, "watch", "--from", "9", dir)
	checkError(t, code, out, errOut, "--from 9: the watermark is 6")
	code, out, errOut = runCLI(t, "watch", "--keyspace", "nope", dir)
	checkError(t, code, out, errOut, `keyspace "nope": not found`)
	code, out, errOut = runCLI(t, "watch", filepath.Join(t.TempDir(), "missing"))
	if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("watch of a missing dir: exit %d %q %q", code, out, errOut)
	}
	for _, args := range [][]string{{"watch"}, {"watch", dir, dir}, {"watch", "--from", "x", dir}, {"watch", "--from", "0", dir}, {"watch", "--bad", dir}} {
		code, out, errOut := runCLI(t, args...)
		if code != 2 || out != "" || !strings.HasPrefix(errOut, "kvtool watch: ") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: exit %d %q %q", args, code, out, errOut)
		}
	}
	if code, out, _ := runCLI(t, "watch", "-h"); code != 0 || !strings.Contains(out, "Usage: kvtool watch") {
		t.Errorf("watch -h: exit %d %q", code, out)
	}
	// A running engine holds the directory.
	db, err := kvbuf.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	code, out, errOut = runCLI(t, "watch", dir)
	checkError(t, code, out, errOut, "a running engine serves its feed with DB.Watch")
}

// TestWatchCommandCompacted: an engine that retained nothing below an op
// says so in one line.
func TestWatchCommandCompacted(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "e")
	db, err := kvbuf.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	users, err := db.KV("users")
	if err != nil {
		t.Fatal(err)
	}
	for op := uint64(1); op <= 2; op++ {
		if err := users.Put(context.Background(), []byte("a"), []byte("1"), op); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.EndOp(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "watch", "--from", "1", dir)
	checkError(t, code, out, errOut, "watch start below the changes held")
}
