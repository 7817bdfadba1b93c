package ycsb

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/magiconair/properties"
	goycsb "github.com/pingcap/go-ycsb/pkg/ycsb"
)

// openTest opens engine in a temporary directory with fieldcount 4.
func openTest(t *testing.T, engine string, extra ...string) *DB {
	t.Helper()
	p := properties.MustLoadString("fieldcount=4\n")
	for i := 0; i+1 < len(extra); i += 2 {
		p.MustSet(extra[i], extra[i+1])
	}
	db, err := Open(engine, t.TempDir(), p)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func rec(key string, fields ...string) map[string][]byte {
	m := map[string][]byte{}
	for i, f := range fields {
		m[fmt.Sprintf("field%d", i)] = []byte(f + "-" + key)
	}
	return m
}

func copyRec(m map[string][]byte) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = string(v)
	}
	return out
}

func wantRec(t *testing.T, got map[string][]byte, want map[string]string) {
	t.Helper()
	g := copyRec(got)
	if len(g) != len(want) {
		t.Fatalf("record %v, want %v", g, want)
	}
	for k, v := range want {
		if g[k] != v {
			t.Fatalf("record %v, want %v", g, want)
		}
	}
}

// TestConformance runs the same contract against every binding: it is what
// each must pass before kvtool ycsb measures it.
func TestConformance(t *testing.T) {
	for _, engine := range Engines {
		t.Run(engine, func(t *testing.T) {
			for _, threadCtx := range []bool{true, false} {
				t.Run(fmt.Sprintf("thread-ctx=%v", threadCtx), func(t *testing.T) {
					conformance(t, engine, threadCtx)
				})
			}
			t.Run("batch", func(t *testing.T) { conformanceBatch(t, engine) })
			t.Run("concurrent", func(t *testing.T) { conformanceConcurrent(t, engine) })
			t.Run("reopen", func(t *testing.T) { conformanceReopen(t, engine) })
		})
	}
}

func conformance(t *testing.T, engine string, threadCtx bool) {
	db := openTest(t, engine)
	defer func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}()
	ctx := context.Background()
	if threadCtx {
		ctx = db.InitThread(ctx, 0, 1)
		defer db.CleanupThread(ctx)
	}
	const table = "usertable"

	// Insert and read, with and without field lists.
	for _, k := range []string{"user3", "user1", "user2"} {
		if err := db.Insert(ctx, table, k, rec(k, "a", "b", "c", "d")); err != nil {
			t.Fatal(err)
		}
	}
	got, err := db.Read(ctx, table, "user1", nil)
	if err != nil {
		t.Fatal(err)
	}
	wantRec(t, got, map[string]string{"field0": "a-user1", "field1": "b-user1", "field2": "c-user1", "field3": "d-user1"})
	got, err = db.Read(ctx, table, "user2", []string{"field1", "field3"})
	if err != nil {
		t.Fatal(err)
	}
	wantRec(t, got, map[string]string{"field1": "b-user2", "field3": "d-user2"})
	// A field the record lacks (or the table does not have) is not returned.
	if err := db.Insert(ctx, table, "sparse", map[string][]byte{"field2": []byte("x"), "field0": {}}); err != nil {
		t.Fatal(err)
	}
	got, err = db.Read(ctx, table, "sparse", []string{"field1", "field2", "nosuch"})
	if err != nil {
		t.Fatal(err)
	}
	wantRec(t, got, map[string]string{"field2": "x"})
	got, err = db.Read(ctx, table, "sparse", nil)
	if err != nil {
		t.Fatal(err)
	}
	wantRec(t, got, map[string]string{"field0": "", "field2": "x"})

	// Update merges fields into the record.
	if err := db.Update(ctx, table, "user1", map[string][]byte{"field2": []byte("new"), "field3": []byte("newer")}); err != nil {
		t.Fatal(err)
	}
	got, err = db.Read(ctx, table, "user1", nil)
	if err != nil {
		t.Fatal(err)
	}
	wantRec(t, got, map[string]string{"field0": "a-user1", "field1": "b-user1", "field2": "new", "field3": "newer"})
	// Insert replaces the whole record.
	if err := db.Insert(ctx, table, "user3", map[string][]byte{"field1": []byte("only")}); err != nil {
		t.Fatal(err)
	}
	got, err = db.Read(ctx, table, "user3", nil)
	if err != nil {
		t.Fatal(err)
	}
	wantRec(t, got, map[string]string{"field1": "only"})

	// Missing keys.
	if _, err := db.Read(ctx, table, "user9", nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read of a missing key: %v, want ErrNotFound", err)
	}
	if err := db.Update(ctx, table, "user9", rec("user9", "z")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("update of a missing key: %v, want ErrNotFound", err)
	}
	if _, err := db.Read(ctx, table, "user9", nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("update of a missing key created it: %v", err)
	}
	if _, err := db.Read(ctx, "othertable", "user1", nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read in a table never written: %v, want ErrNotFound", err)
	}

	// Delete, and delete of a missing key.
	if err := db.Delete(ctx, table, "user2"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Read(ctx, table, "user2", nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read after delete: %v, want ErrNotFound", err)
	}
	if err := db.Delete(ctx, table, "user2"); err != nil {
		t.Fatalf("delete of a missing key: %v", err)
	}
	if err := db.Delete(ctx, "othertable", "user2"); err != nil {
		t.Fatalf("delete in a table never written: %v", err)
	}

	{
		// Scan: key order, count, bounded by the table.
		// (in its own table; tables with names around it hold the same keys)
		const table = "scantable"
		var keys []string
		for i := range 50 {
			keys = append(keys, fmt.Sprintf("scan%03d", i))
		}
		shuffled := slices.Clone(keys)
		rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		for _, k := range shuffled {
			if err := db.Insert(ctx, table, k, map[string][]byte{"field0": []byte(k), "field1": []byte("v")}); err != nil {
				t.Fatal(err)
			}
			// The same keys in other tables, which no scan of table may see.
			for _, other := range []string{"scantable2", "scantablf", "scantabl"} {
				if err := db.Insert(ctx, other, k, map[string][]byte{"field0": []byte("other")}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := db.Delete(ctx, table, "scan010"); err != nil {
			t.Fatal(err)
		}
		live := slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return k == "scan010" })
		scan := func(start string, count int, fields []string) []string {
			t.Helper()
			res, err := db.Scan(ctx, table, start, count, fields)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, m := range res {
				out = append(out, string(m["field0"]))
				if len(fields) == 1 && len(m) != 1 {
					t.Fatalf("scan with fields %v returned %v", fields, copyRec(m))
				}
			}
			return out
		}
		if got := scan("scan005", 10, nil); !slices.Equal(got, live[5:15]) {
			t.Fatalf("scan from scan005, 10: %v, want %v", got, live[5:15])
		}
		if got := scan("scan0455", 3, []string{"field0"}); !slices.Equal(got, live[45:48]) {
			t.Fatalf("scan from scan0455 (between keys), 3: %v, want %v", got, live[45:48])
		}
		if got := scan("scan040", 100, nil); !slices.Equal(got, live[39:]) {
			t.Fatalf("scan past the end: %v, want %v", got, live[39:])
		}
		if got := scan("zzz", 5, nil); len(got) != 0 {
			t.Fatalf("scan after the last key: %v", got)
		}
		if got := scan("scan000", 0, nil); len(got) != 0 {
			t.Fatalf("scan of 0 records: %v", got)
		}
		// Starting before every key of the table.
		res, err := db.Scan(ctx, table, "a", 2, nil)
		if err != nil || len(res) != 2 || string(res[0]["field0"]) != "scan000" {
			t.Fatalf("scan from before the table: %d records, %v", len(res), err)
		}

	}

	// Bad input.
	if err := db.Insert(ctx, table, "", rec("x", "a")); !errors.Is(err, ErrBadKey) {
		t.Fatalf("empty key: %v, want ErrBadKey", err)
	}
	if _, err := db.Read(ctx, "", "user1", nil); !errors.Is(err, ErrBadKey) {
		t.Fatalf("empty table: %v, want ErrBadKey", err)
	}
	if err := db.Insert(ctx, table, "user1", map[string][]byte{"field9": []byte("x")}); !errors.Is(err, ErrUnknownField) {
		t.Fatalf("unknown field: %v, want ErrUnknownField", err)
	}
	if err := db.Update(ctx, table, "user1", map[string][]byte{"bogus": []byte("x")}); !errors.Is(err, ErrUnknownField) {
		t.Fatalf("update of an unknown field: %v, want ErrUnknownField", err)
	}
	got, err = db.Read(ctx, table, "user1", nil)
	if err != nil {
		t.Fatal(err)
	}
	wantRec(t, got, map[string]string{"field0": "a-user1", "field1": "b-user1", "field2": "new", "field3": "newer"})
}

func conformanceBatch(t *testing.T, engine string) {
	db := openTest(t, engine)
	defer db.Close()
	ctx := db.InitThread(context.Background(), 0, 1)
	const table = "usertable"
	keys := []string{"b1", "b3", "b2", "b0"}
	var vals []map[string][]byte
	for _, k := range keys {
		vals = append(vals, rec(k, "a", "b"))
	}
	if err := db.BatchInsert(ctx, table, keys, vals); err != nil {
		t.Fatal(err)
	}
	got, err := db.BatchRead(ctx, table, keys, []string{"field1"})
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		wantRec(t, got[i], map[string]string{"field1": "b-" + k})
	}
	if _, err := db.BatchRead(ctx, table, []string{"b1", "nope"}, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("batch read with a missing key: %v, want ErrNotFound", err)
	}
	if err := db.BatchUpdate(ctx, table, keys[:2], []map[string][]byte{{"field0": []byte("u1")}, {"field1": []byte("u3")}}); err != nil {
		t.Fatal(err)
	}
	got, err = db.BatchRead(ctx, table, keys[:2], nil)
	if err != nil {
		t.Fatal(err)
	}
	wantRec(t, got[0], map[string]string{"field0": "u1", "field1": "b-b1"})
	wantRec(t, got[1], map[string]string{"field0": "a-b3", "field1": "u3"})
	if err := db.BatchDelete(ctx, table, []string{"b1", "b2", "missing"}); err != nil {
		t.Fatal(err)
	}
	res, err := db.Scan(ctx, table, "", 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, m := range res {
		left = append(left, string(m["field0"]))
	}
	if !slices.Equal(left, []string{"a-b0", "a-b3"}) {
		t.Fatalf("after batch delete: %v", left)
	}
	if err := db.BatchInsert(ctx, table, keys, vals[:1]); !errors.Is(err, ErrBadKey) {
		t.Fatalf("batch insert with too few values: %v", err)
	}
	if err := db.BatchUpdate(ctx, table, []string{"b0", "nope"}, []map[string][]byte{{"field0": []byte("x")}, {"field0": []byte("y")}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("batch update of a missing key: %v", err)
	}
}

// conformanceConcurrent: threads insert, read back, update and scan their
// own records at once (for the race detector and the per-thread buffers).
func conformanceConcurrent(t *testing.T, engine string) {
	db := openTest(t, engine)
	defer db.Close()
	const threads, per = 4, 100
	var wg sync.WaitGroup
	errs := make(chan error, threads)
	for th := range threads {
		wg.Go(func() {
			ctx := db.InitThread(context.Background(), th, threads)
			defer db.CleanupThread(ctx)
			for i := range per {
				k := fmt.Sprintf("t%d-%03d", th, i)
				if err := db.Insert(ctx, "usertable", k, rec(k, "a", "b", "c", "d")); err != nil {
					errs <- err
					return
				}
				if err := db.Update(ctx, "usertable", k, map[string][]byte{"field1": []byte("u-" + k)}); err != nil {
					errs <- err
					return
				}
				got, err := db.Read(ctx, "usertable", k, nil)
				if err != nil {
					errs <- err
					return
				}
				if string(got["field1"]) != "u-"+k || string(got["field3"]) != "d-"+k {
					errs <- fmt.Errorf("read %s: %v", k, copyRec(got))
					return
				}
			}
			res, err := db.Scan(ctx, "usertable", fmt.Sprintf("t%d-", th), per, []string{"field0"})
			if err != nil {
				errs <- err
				return
			}
			for i, m := range res {
				if want := fmt.Sprintf("a-t%d-%03d", th, i); string(m["field0"]) != want {
					errs <- fmt.Errorf("scan record %d: %q, want %q", i, m["field0"], want)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func conformanceReopen(t *testing.T, engine string) {
	dir := t.TempDir()
	p := properties.MustLoadString("fieldcount=4\n")
	db, err := Open(engine, dir, p)
	if err != nil {
		t.Fatal(err)
	}
	ctx := db.InitThread(context.Background(), 0, 1)
	if err := db.Insert(ctx, "usertable", "k", rec("k", "a", "b")); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = Open(engine, dir, p); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got, err := db.Read(context.Background(), "usertable", "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	wantRec(t, got, map[string]string{"field0": "a-k", "field1": "b-k"})
}

// TestKvbufOps: with kvbuf.ops=true every write carries the next op number,
// so after a flush the watermark counts the writes, and it goes on from the
// watermark after a reopen; with the default (op 0) it stays 0.
func TestKvbufOps(t *testing.T) {
	dir := t.TempDir()
	p := properties.MustLoadString("fieldcount=2\nkvbuf.ops=true\n")
	write := func(db *DB, n int) {
		t.Helper()
		ctx := db.InitThread(context.Background(), 0, 1)
		var wg sync.WaitGroup
		for g := range 4 { // concurrent writers: ops still go in order
			wg.Go(func() {
				ctx := db.InitThread(context.Background(), g+1, 5)
				for i := range n / 4 {
					k := fmt.Sprintf("k%d-%d", g, i)
					if err := db.Insert(ctx, "t", k, map[string][]byte{"field0": []byte("v")}); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		keys := []string{"b1", "b2"}
		if err := db.BatchInsert(ctx, "t", keys, []map[string][]byte{{"field1": []byte("x")}, {"field1": []byte("y")}}); err != nil {
			t.Fatal(err)
		}
		if err := db.Update(ctx, "t", "b1", map[string][]byte{"field0": []byte("z")}); err != nil {
			t.Fatal(err)
		}
	}
	db, err := Open("kvbuf", dir, p)
	if err != nil {
		t.Fatal(err)
	}
	write(db, 40) // 40 inserts, one batch, one update: ops 1..42
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = Open("kvbuf", dir, p); err != nil {
		t.Fatal(err)
	}
	e := db.e.(*kvbufEngine)
	if wm := e.db.Watermark(); wm != 42 {
		t.Fatalf("watermark %d after 42 ops", wm)
	}
	write(db, 8) // ops 43..52
	if err := e.db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if wm := e.db.Watermark(); wm != 52 {
		t.Fatalf("watermark %d after 52 ops", wm)
	}
	db.Close()

	db = openTest(t, "kvbuf")
	defer db.Close()
	write(db, 8)
	e = db.e.(*kvbufEngine)
	if err := e.db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if wm := e.db.Watermark(); wm != 0 {
		t.Fatalf("watermark %d with op 0 writes", wm)
	}
}

// TestRegistered: the bindings are in go-ycsb's registry, taking their
// directory from <engine>.dir.
func TestRegistered(t *testing.T) {
	for _, e := range Engines {
		c := goycsb.GetDBCreator(RegisteredName(e))
		if c == nil {
			t.Fatalf("%s is not registered as %q", e, RegisteredName(e))
		}
		if _, err := c.Create(properties.NewProperties()); !errors.Is(err, ErrBadProperty) {
			t.Errorf("%s without %s.dir: %v, want ErrBadProperty", e, e, err)
		}
		p := properties.MustLoadString(e + ".dir=" + t.TempDir() + "\n")
		db, err := c.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Insert(context.Background(), "t", "k", map[string][]byte{"field0": []byte("v")}); err != nil {
			t.Error(err)
		}
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}
}
