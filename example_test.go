package kvbuf_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"

	"github.com/kvbuf/kvbuf"
)

// hostOp is one entry of the host database's own log: kvbuf does not keep
// one, it only tells the host how far its log is durable.
type hostOp struct {
	n          uint64
	key, value string
	bit        uint64
	batch      bool // written as one Batch rather than single calls
}

// apply writes one op of the host's log: as a Batch (one call, complete by
// itself), or as single calls followed by EndOp.
func apply(ctx context.Context, db *kvbuf.DB, op hostOp) error {
	docs, err := db.KV("docs")
	if err != nil {
		return err
	}
	live, err := db.Bits("live")
	if err != nil {
		return err
	}
	if op.batch {
		return db.Update(ctx, op.n, func(b *kvbuf.Batch) error {
			b.Put(docs, []byte(op.key), []byte(op.value))
			b.Set(live, op.bit, true)
			return nil
		})
	}
	if err := docs.Put(ctx, []byte(op.key), []byte(op.value), op.n); err != nil {
		return err
	}
	if err := live.Set(ctx, op.bit, true, op.n); err != nil {
		return err
	}
	// The op is over: the watermark may cover it without waiting for the
	// next op to start.
	return db.EndOp(ctx, op.n)
}

// Example shows the embed-in-a-database flow: the host applies its log
// entries with their op numbers (some as batches, some as single calls
// closed by EndOp), flushes, crashes, reopens, reads the watermark and
// replays its log from the op after it.
func Example() {
	ctx := context.Background()
	base, err := os.MkdirTemp("", "kvbuf-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(base)
	dir := filepath.Join(base, "shard-0")

	hostLog := []hostOp{
		{1, "a", "apple", 10, false}, {2, "b", "banana", 20, true}, {3, "c", "cherry", 30, false},
		{4, "d", "date", 40, true}, {5, "e", "elderberry", 50, false},
	}

	db, err := kvbuf.Open(dir, &kvbuf.Options{FlushInterval: -1}) // flush only when asked
	if err != nil {
		log.Fatal(err)
	}
	for _, op := range hostLog[:3] {
		if err := apply(ctx, db, op); err != nil {
			log.Fatal(err)
		}
	}
	if err := db.Flush(ctx); err != nil { // ops 1-3 are durable
		log.Fatal(err)
	}
	fmt.Println("watermark after flush:", db.Watermark())
	for _, op := range hostLog[3:] { // ops 4-5 are only pending
		if err := apply(ctx, db, op); err != nil {
			log.Fatal(err)
		}
	}

	// A crash: the files on disk are all that survives a kill -9. Copying
	// them while the engine is still running captures exactly that state.
	crashed := filepath.Join(base, "after-crash")
	if err := copyEngineDir(dir, crashed); err != nil {
		log.Fatal(err)
	}
	if err := db.Close(); err != nil {
		log.Fatal(err)
	}

	db, err = kvbuf.Open(crashed, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	wm := db.Watermark()
	fmt.Println("watermark after crash:", wm)
	for _, op := range hostLog {
		if op.n <= wm {
			continue
		}
		fmt.Println("replaying op", op.n)
		if err := apply(ctx, db, op); err != nil {
			log.Fatal(err)
		}
	}
	// An op the watermark covers is skipped (a cheap no-op, counted), so a
	// host whose log redelivers old ops, as raft does after a restart,
	// need not filter them.
	err = apply(ctx, db, hostLog[0])
	fmt.Println("replaying op 1 again:", err, "calls skipped:", db.Metrics().Redelivered) // Put, Set, EndOp
	if err := db.Flush(ctx); err != nil {
		log.Fatal(err)
	}
	docs, _ := db.KV("docs")
	v, _ := docs.Get([]byte("e"))
	live, _ := db.Bits("live")
	bit, _ := live.Get(50)
	n, _ := live.Count()
	fmt.Printf("e=%s bit50=%v ones=%d watermark=%d\n", v, bit, n, db.Watermark())
	// Output:
	// watermark after flush: 3
	// watermark after crash: 3
	// replaying op 4
	// replaying op 5
	// replaying op 1 again: <nil> calls skipped: 3
	// e=elderberry bit50=true ones=5 watermark=5
}

// copyEngineDir copies a directory tree as a kill -9 leaves it: every
// file, the lock file included (a dead process holds no lock).
func copyEngineDir(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}

// exampleDB opens an engine in a new temporary directory; the returned
// function closes it and removes the directory.
func exampleDB() (*kvbuf.DB, func()) {
	dir, err := os.MkdirTemp("", "kvbuf-example")
	if err != nil {
		log.Fatal(err)
	}
	db, err := kvbuf.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	return db, func() {
		if err := db.Close(); err != nil {
			log.Fatal(err)
		}
		os.RemoveAll(dir)
	}
}

// ExampleDB_KV shows reads seeing pending writes and deletes at once, and a
// scan merging pending changes with stored keys.
func ExampleDB_KV() {
	ctx := context.Background()
	db, done := exampleDB()
	defer done()

	users, err := db.KV("users")
	if err != nil {
		log.Fatal(err)
	}
	_ = users.Put(ctx, []byte("alice"), []byte("admin"), 1)
	_ = users.Put(ctx, []byte("bob"), []byte("dev"), 2)
	_ = db.Flush(ctx)                                     // alice and bob are stored
	_ = users.Delete(ctx, []byte("bob"), 3)               // a pending tombstone hides the stored value
	_ = users.Put(ctx, []byte("carol"), []byte("ops"), 4) // pending

	it, err := users.NewIter(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		fmt.Printf("%s=%s\n", it.Key(), it.Value())
	}
	_, err = users.Get([]byte("bob"))
	fmt.Println("bob:", errors.Is(err, kvbuf.ErrNotFound))
	// Output:
	// alice=admin
	// carol=ops
	// bob: true
}

// ExampleDB_Apply writes one op to two keyspaces and a bitslice at once:
// the watermark covers all of it or none of it, and no EndOp is needed.
func ExampleDB_Apply() {
	ctx := context.Background()
	db, done := exampleDB()
	defer done()

	docs, _ := db.KV("docs")
	index, _ := db.KV("index")
	live, _ := db.Bits("live")

	b := db.NewBatch()
	b.Put(docs, []byte("doc-7"), []byte(`{"title":"kvbuf"}`))
	b.Put(index, []byte("title/kvbuf"), []byte("doc-7"))
	b.Set(live, 7, true)
	if err := db.Apply(ctx, b, 1); err != nil {
		log.Fatal(err)
	}
	if err := db.Flush(ctx); err != nil {
		log.Fatal(err)
	}
	v, _ := index.Get([]byte("title/kvbuf"))
	bit, _ := live.Get(7)
	fmt.Printf("index -> %s, live %v, watermark %d\n", v, bit, db.Watermark())

	// A bad change makes the whole batch fail before anything is applied.
	b.Reset()
	b.Put(docs, []byte("doc-8"), []byte("{}"))
	b.Put(index, nil, []byte("doc-8")) // an empty key
	err := db.Apply(ctx, b, 2)
	_, gerr := docs.Get([]byte("doc-8"))
	fmt.Println(errors.Is(err, kvbuf.ErrEmptyKey), errors.Is(gerr, kvbuf.ErrNotFound))
	// Output:
	// index -> doc-7, live true, watermark 1
	// true true
}

// ExampleDB_NewSnapshot reads the engine as of one instant while writes
// and flushes go on.
func ExampleDB_NewSnapshot() {
	ctx := context.Background()
	db, done := exampleDB()
	defer done()

	stock, _ := db.KV("stock")
	_ = stock.Put(ctx, []byte("apples"), []byte("10"), 1)
	_ = stock.Put(ctx, []byte("pears"), []byte("4"), 2)

	snap, err := db.NewSnapshot()
	if err != nil {
		log.Fatal(err)
	}
	defer snap.Close()

	_ = stock.Put(ctx, []byte("apples"), []byte("9"), 3)
	_ = stock.Delete(ctx, []byte("pears"), 4)
	_ = db.Flush(ctx)

	then, _ := snap.KV("stock")
	v, _ := then.Get([]byte("apples"))
	now, _ := stock.Get([]byte("apples"))
	fmt.Printf("apples: then %s, now %s\n", v, now)
	it, _ := then.NewIter(nil)
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		fmt.Printf("snapshot: %s=%s\n", it.Key(), it.Value())
	}
	// Output:
	// apples: then 10, now 9
	// snapshot: apples=10
	// snapshot: pears=4
}

// ExampleKV_DeleteRange removes a range of keys, pending and stored, in
// one call that costs O(1) memory.
func ExampleKV_DeleteRange() {
	ctx := context.Background()
	db, done := exampleDB()
	defer done()

	events, _ := db.KV("events")
	for i, day := range []string{"2024-01-01", "2024-01-02", "2024-01-03", "2024-02-01"} {
		_ = events.Put(ctx, []byte(day+"/login"), []byte("x"), uint64(i+1))
		if i == 1 {
			_ = db.Flush(ctx) // some stored, some pending
		}
	}
	// Drop January: [2024-01, 2024-02).
	if err := events.DeleteRange(ctx, []byte("2024-01"), []byte("2024-02"), 5); err != nil {
		log.Fatal(err)
	}
	it, _ := events.NewIter(&kvbuf.IterOptions{Prefix: []byte("2024-")})
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		fmt.Printf("%s\n", it.Key())
	}
	err := events.DeleteRange(ctx, []byte("z"), []byte("a"), 6)
	fmt.Println(errors.Is(err, kvbuf.ErrBadRange))
	// Output:
	// 2024-02-01/login
	// true
}

// ExampleBits_Ones lists the set bits of a bitslice, pending changes
// included, and counts them without a scan.
func ExampleBits_Ones() {
	ctx := context.Background()
	db, done := exampleDB()
	defer done()

	deleted, _ := db.Bits("deleted")
	_ = deleted.SetRange(ctx, 100, 105, true, 1) // bits 100-104
	_ = db.Flush(ctx)
	_ = deleted.Set(ctx, 102, false, 2) // pending
	_ = deleted.Set(ctx, 7, true, 3)    // pending

	var all []uint64
	for i := range deleted.Ones(0) {
		all = append(all, i)
	}
	fmt.Println("set:", all)
	var from101 []uint64
	for i := range deleted.Ones(101) {
		from101 = append(from101, i)
	}
	fmt.Println("from 101:", from101)
	n, _ := deleted.Count()
	fmt.Println("count:", n)
	// Output:
	// set: [7 100 101 103 104]
	// from 101: [101 103 104]
	// count: 5
}

// ExampleKVReader writes a read path once and runs it on the live
// keyspace and on a snapshot of it.
func ExampleKVReader() {
	ctx := context.Background()
	db, done := exampleDB()
	defer done()

	stock, _ := db.KV("stock")
	_ = stock.Put(ctx, []byte("apples"), []byte("10"), 1)
	snap, err := db.NewSnapshot()
	if err != nil {
		log.Fatal(err)
	}
	defer snap.Close()
	_ = stock.Put(ctx, []byte("pears"), []byte("4"), 2)

	count := func(r kvbuf.KVReader) int {
		n := 0
		for range r.All(nil) {
			n++
		}
		return n
	}
	then, _ := snap.KV("stock")
	fmt.Println("live:", count(stock), "snapshot:", count(then))
	// Output:
	// live: 2 snapshot: 1
}
