package raftkv

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kvbuf/kvbuf/internal/testutil"
	"github.com/kvbuf/kvbuf/storage"
)

// W9 (doc/workloads.md): replicated writes on a 3-node cluster on loopback
// at 1, 16 and 64 concurrent clients, and the restart after many applied
// entries, for the same host (this package: raft, log store, transport)
// with three state machines:
//
//   - kvbuf: the engine; each entry one batch with op = index, made durable
//     by the flusher every 100ms (the durable watermark).
//   - pebble-sync: each entry applied to pebble with a synced batch that
//     also records the applied index: what a replica without a durable
//     applied index of its own must do to restart from where it was.
//   - pebble-nosync: each entry applied with an unsynced batch; nothing
//     records what is durable, so a restart replays the whole log.
//
// go test -run '^$' -bench BenchmarkW9 ./raftkv runs one round;
// scripts/w9.sh runs several, rotating the order of the implementations
// (-w9.rotate), and prints medians and ratios. -w9.entries sets the
// restart rows' log length (default 1M).

var (
	w9Entries = flag.Int("w9.entries", 1_000_000, "W9 restart rows: entries applied before the crash")
	w9Rotate  = flag.Int("w9.rotate", 0, "W9: start every group of rows at implementation k mod n (scripts/w9.sh rotates it between runs)")
	w9Cache   = flag.String("w9.cache", "", "W9 restart rows: keep the crashed data directories here across runs (default: a temporary directory per run)")
)

const (
	w9ValueSize = 100
	w9Loader    = "raftkv-w9-loader"
)

func init() { childRoles[w9Loader] = w9LoaderChild }

// pebbleSM is the baseline state machine: pebble, with the same options as
// kvbuf's store, keys prefixed by their keyspace name. sync chooses a
// synced batch per entry (which then also makes the applied index
// durable) or an unsynced one (and nothing durable to restart from).
type pebbleSM struct {
	db   *pebble.DB
	sync bool
	wm   atomic.Uint64 // the durable applied index (sync only)
}

var keyApplied = []byte("\x00applied")

func newPebbleSM(sync bool) func(dir string) (stateMachine, error) {
	return func(dir string) (stateMachine, error) {
		db, err := pebble.Open(dir, storage.PebbleOptions(nil))
		if err != nil {
			return nil, err
		}
		sm := &pebbleSM{db: db, sync: sync}
		if sync {
			v, c, err := db.Get(keyApplied)
			if err == nil {
				sm.wm.Store(binary.BigEndian.Uint64(v))
				c.Close()
			} else if !errors.Is(err, pebble.ErrNotFound) {
				db.Close()
				return nil, err
			}
		}
		return sm, nil
	}
}

func (p *pebbleSM) durable() uint64 { return p.wm.Load() }

func (p *pebbleSM) close() error { return p.db.Close() }

func (p *pebbleSM) commit(b *pebble.Batch, index uint64) error {
	if err := b.Set(keyApplied, binary.BigEndian.AppendUint64(nil, index), nil); err != nil {
		return err
	}
	wo := pebble.NoSync
	if p.sync {
		wo = pebble.Sync
	}
	if err := b.Commit(wo); err != nil {
		return err
	}
	if p.sync {
		p.wm.Store(index)
	}
	return nil
}

func (p *pebbleSM) skip(_ context.Context, index uint64) error {
	b := p.db.NewBatch()
	defer b.Close()
	return p.commit(b, index)
}

func (p *pebbleSM) apply(_ context.Context, index uint64, c *command) (error, error) {
	b := p.db.NewBatch()
	defer b.Close()
	key := func(k []byte) []byte { return append([]byte(c.name+"\x00"), k...) }
	var err error
	switch c.kind {
	case cmdPut:
		err = b.Set(key(c.key), c.value, nil)
	case cmdDelete:
		err = b.Delete(key(c.key), nil)
	case cmdDeleteRange:
		hi := []byte(c.name + "\x01")
		if c.hasHi {
			hi = key(c.value)
		}
		err = b.DeleteRange(key(c.key), hi, nil)
	case cmdSetBit:
		err = b.Set(binary.BigEndian.AppendUint64([]byte(c.name+"\x02"), c.bit), []byte{boolByte(c.set)}, nil)
	}
	if err != nil {
		return nil, err
	}
	return nil, p.commit(b, index)
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// w9Impls are the state machines of W9, in their order in round 0.
// kvbuf-ack-after-sync is the rejected ordering of a Ready (every committed
// entry applied after the Ready's own entries are synced).
var w9Impls = []struct {
	name         string
	newSM        func(dir string) (stateMachine, error) // nil: kvbuf
	ackAfterSync bool
}{
	{"kvbuf", nil, false},
	{"kvbuf-ack-after-sync", nil, true},
	{"pebble-sync", newPebbleSM(true), false},
	{"pebble-nosync", newPebbleSM(false), false},
}

func BenchmarkW9(b *testing.B) {
	round := *w9Rotate
	impls := slices.Clone(w9Impls)
	k := round % len(impls)
	impls = append(impls[k:], impls[:k]...)
	for _, clients := range []int{1, 16, 64} {
		for _, impl := range impls {
			b.Run(fmt.Sprintf("writes/clients=%d/impl=%s", clients, impl.name), func(b *testing.B) {
				w9Writes(b, clients, impl.newSM, impl.ackAfterSync)
			})
		}
	}
	restart := []struct {
		name  string
		newSM func(dir string) (stateMachine, error)
	}{{"kvbuf", nil}, {"pebble-replay", newPebbleSM(false)}}
	if round%2 == 1 {
		restart[0], restart[1] = restart[1], restart[0]
	}
	for _, impl := range restart {
		b.Run(fmt.Sprintf("restart/entries=%d/impl=%s", *w9Entries, impl.name), func(b *testing.B) {
			w9Restart(b, impl.name, impl.newSM)
		})
	}
}

// w9Writes measures replicated writes on a fresh 3-node cluster: each
// iteration is one write of a 100-byte value to a new key, issued by one of
// clients goroutines to the leader and acknowledged once applied there.
func w9Writes(b *testing.B, clients int, newSM func(string) (stateMachine, error), ackAfterSync bool) {
	c := newCluster(b, 3, func(o *Options) {
		o.newSM = newSM
		o.ackAfterSync = ackAfterSync
		o.TickInterval = 20 * time.Millisecond
	})
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateKeyspace(ctx, "ks") })
	l := c.leader(10 * time.Second)
	value := make([]byte, w9ValueSize)
	var seq atomic.Uint64
	put := func() (time.Duration, error) {
		key := fmt.Appendf(nil, "key%013d", seq.Add(1))
		start := time.Now()
		err := l.Put(bg, "ks", key, value)
		return time.Since(start), err
	}
	for range 100 { // warm-up: connections, pebble, the engine's tables
		if _, err := put(); err != nil {
			b.Fatal(err)
		}
	}
	work := make(chan struct{}, clients)
	lat := make([][]time.Duration, clients)
	var failed atomic.Value
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				d, err := put()
				if err != nil {
					failed.CompareAndSwap(nil, err)
					continue
				}
				lat[i] = append(lat[i], d)
			}
		}()
	}
	b.ReportAllocs()
	start := time.Now()
	n := 0
	for b.Loop() {
		work <- struct{}{}
		n++
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("a write failed: %v", err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	b.ReportMetric(float64(n)/elapsed.Seconds(), "writes/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-us")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-us")
}

// w9LoaderChild applies W9_ENTRIES writes on a single-node cluster in
// W9_DIR with the state machine W9_IMPL from 256 goroutines, prints
// "done <last index>" once that many are acknowledged and writes on until
// its parent kills it.
func w9LoaderChild() int {
	total, _ := strconv.Atoi(os.Getenv("W9_ENTRIES"))
	o := w9RestartOptions(os.Getenv("W9_DIR"), os.Getenv("W9_IMPL"))
	n, err := Open(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for !n.IsLeader() {
		time.Sleep(5 * time.Millisecond)
	}
	if err := n.CreateKeyspace(bg, "ks"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	value := make([]byte, w9ValueSize)
	var seq, acked atomic.Int64
	var once sync.Once
	var wg sync.WaitGroup
	for range 256 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				key := fmt.Appendf(nil, "key%013d", seq.Add(1))
				if err := n.Put(bg, "ks", key, value); err != nil {
					fmt.Fprintln(os.Stderr, err)
					return
				}
				if acked.Add(1) >= int64(total) {
					once.Do(func() { fmt.Printf("done %d\n", n.appliedNow.Load()) })
				}
			}
		}()
	}
	wg.Wait()
	return 1
}

// w9RestartOptions are the restart rows' node options: one node, short
// ticks (an election takes 100-200ms, in both rows alike).
func w9RestartOptions(dir, impl string) *Options {
	o := &Options{
		ID:            1,
		Peers:         map[uint64]string{1: "127.0.0.1:1"},
		Dir:           dir,
		TickInterval:  10 * time.Millisecond,
		ElectionTicks: 10,
		LogRetain:     uint64(*w9Entries) * 2, // the log is never compacted: both rows replay from one log
	}
	if impl != "kvbuf" {
		o.newSM = newPebbleSM(false)
	}
	return o
}

// w9Crashed returns a data directory in which a node applied -w9.entries
// entries and was SIGKILLed with writes in flight (made once per
// implementation, in -w9.cache or a temporary directory).
func w9Crashed(b *testing.B, impl string) string {
	cache := *w9Cache
	if cache == "" {
		cache = filepath.Join(os.TempDir(), fmt.Sprintf("kvbuf-w9-%d", os.Getpid()))
		b.Cleanup(func() { _ = os.RemoveAll(cache) })
	}
	dir := filepath.Join(cache, fmt.Sprintf("%s-%d", impl, *w9Entries))
	if _, err := os.Stat(filepath.Join(dir, "done")); err == nil {
		return dir
	}
	_ = os.RemoveAll(dir)
	b.Logf("W9 restart: loading %d entries with %s (once per run)", *w9Entries, impl)
	cmd := testutil.Reexec(b, w9Loader, "W9_DIR="+filepath.Join(dir, "node"), "W9_IMPL="+impl,
		"W9_ENTRIES="+strconv.Itoa(*w9Entries), "GORACE=atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "done ") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		b.Fatalf("W9 loader: %q", sc.Text())
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	if err := os.WriteFile(filepath.Join(dir, "done"), nil, 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

// copyTree copies the directory src to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if d.Name() == "LOCK" {
			return nil
		}
		return exec.Command("cp", p, target).Run()
	})
}

// w9Restart measures the time from Open to a served linearizable read (one
// op, ns/op; copying the crashed directory is not timed) on a node that
// crashed after -w9.entries applied entries: kvbuf replays the entries
// after its durable watermark; pebble-replay (unsynced applies, no durable
// applied index) replays the whole log.
func w9Restart(b *testing.B, impl string, newSM func(string) (stateMachine, error)) {
	crashed := w9Crashed(b, impl)
	var replayed uint64
	for b.Loop() {
		b.StopTimer()
		dir := filepath.Join(b.TempDir(), "node")
		if err := copyTree(filepath.Join(crashed, "node"), dir); err != nil {
			b.Fatal(err)
		}
		o := w9RestartOptions(dir, impl)
		o.newSM = newSM
		b.StartTimer()
		n, err := Open(o)
		if err != nil {
			b.Fatal(err)
		}
		m := n.Metrics()
		ctx, cancel := context.WithTimeout(bg, 10*time.Minute)
		if err := n.WaitApplied(ctx, m.RestartLastIndex); err != nil {
			b.Fatal(err)
		}
		if err := n.linearize(ctx, nil); err != nil {
			b.Fatal(err)
		}
		cancel()
		b.StopTimer()
		m = n.Metrics()
		replayed = m.Reapplied + m.Redelivered
		if err := n.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(replayed), "replayed-entries")
}
