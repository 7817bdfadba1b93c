package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvbuf/kvbuf"
)

// inspect --digest prints the digest the live engine reported before it
// closed, in text and JSON, and refuses (exit 1) while an engine has the
// directory open.
func TestInspectDigest(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "e")
	db, err := kvbuf.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	k, err := db.KV("users")
	if err != nil {
		t.Fatal(err)
	}
	b, err := db.Bits("live")
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Put(ctx, []byte("alice"), []byte("1"), 1); err != nil {
		t.Fatal(err)
	}
	if err := b.Set(ctx, 77, true, 2); err != nil {
		t.Fatal(err)
	}
	snap, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	want, err := snap.Digest(ctx)
	snap.Close()
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "inspect", "--digest", dir)
	checkError(t, code, out, errOut, "--digest needs an engine no process has open")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(t, "inspect", "--digest", dir)
	if code != 0 || !strings.Contains(out, "digest:           "+want+"\n") {
		t.Fatalf("inspect --digest: exit %d, want digest %s in\n%s%s", code, want, out, errOut)
	}
	code, out, errOut = runCLI(t, "inspect", "--json", "--digest", dir)
	if code != 0 || !strings.Contains(out, `"digest": "`+want+`"`) {
		t.Fatalf("inspect --json --digest: exit %d, want digest %s in\n%s%s", code, want, out, errOut)
	}
	// Without the flag, no digest (the output is unchanged).
	if e := inspectJSONOf(t, dir); e.Digest != "" {
		t.Fatalf("inspect --json without --digest printed digest %q", e.Digest)
	}
}
