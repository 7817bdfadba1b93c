package kvbuf_test

import (
	"context"
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
}

func apply(ctx context.Context, db *kvbuf.DB, op hostOp) error {
	kv, err := db.KV("docs")
	if err != nil {
		return err
	}
	if err := kv.Put(ctx, []byte(op.key), []byte(op.value), op.n); err != nil {
		return err
	}
	live, err := db.Bits("live")
	if err != nil {
		return err
	}
	return live.Set(ctx, op.bit, true, op.n)
}

// Example shows the embed-in-a-database flow: the host applies its log
// entries with their op numbers, flushes, crashes, reopens, reads the
// watermark and replays its log from there.
func Example() {
	ctx := context.Background()
	base, err := os.MkdirTemp("", "kvbuf-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(base)
	dir := filepath.Join(base, "shard-0")

	hostLog := []hostOp{
		{1, "a", "apple", 10}, {2, "b", "banana", 20}, {3, "c", "cherry", 30},
		{4, "d", "date", 40}, {5, "e", "elderberry", 50},
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
	for _, op := range hostLog[3:] { // ops 4-5 are only pending
		if err := apply(ctx, db, op); err != nil {
			log.Fatal(err)
		}
	}

	// A crash: the files on disk are all that survives a kill -9. Copying
	// them while the engine is still running captures exactly that state.
	crashed := filepath.Join(base, "after-crash")
	if err := copyDir(dir, crashed); err != nil {
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
	kv, _ := db.KV("docs")
	v, _ := kv.Get([]byte("e"))
	live, _ := db.Bits("live")
	bit, _ := live.Get(50)
	fmt.Printf("e=%s bit50=%v\n", v, bit)
	// Output:
	// watermark after crash: 3
	// replaying op 4
	// replaying op 5
	// e=elderberry bit50=true
}

// copyDir copies a directory tree, skipping the lock file (a new process
// has none of the dead one's locks).
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if d.Name() == kvbuf.LockName {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}

// ExampleDB_KV shows reads seeing pending writes and deletes at once, and a
// merged range scan.
func ExampleDB_KV() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "kvbuf-example")
	defer os.RemoveAll(dir)
	db, err := kvbuf.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	users, _ := db.KV("users")
	_ = users.Put(ctx, []byte("alice"), []byte("admin"), 1)
	_ = users.Put(ctx, []byte("bob"), []byte("dev"), 2)
	_ = db.Flush(ctx)
	_ = users.Delete(ctx, []byte("bob"), 3) // pending tombstone hides the stored value
	_ = users.Put(ctx, []byte("carol"), []byte("ops"), 4)

	it, _ := users.NewIter(nil, nil)
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		fmt.Printf("%s=%s\n", it.Key(), it.Value())
	}
	_, err = users.Get([]byte("bob"))
	fmt.Println("bob:", err)
	// Output:
	// alice=admin
	// carol=ops
	// bob: storage: not found
}
