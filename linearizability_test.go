package kvbuf

// TestLinearizability records concurrent histories of the engine's
// operations, with the invocation and response time of each (monotonic
// clock), and checks them with porcupine (the checker etcd's robustness
// tests use) against a sequential model, partitioned by key, by bit and
// for the set-bit count:
//
//   - KV: Put, Delete, DeleteRange, Get, GetAppend, GetMany, scans forward
//     and backward (full, bounded, prefix, from a seek), batches;
//   - bits: Set, SetMany, SetRange (small ranges and whole chunks), Get,
//     GetMany, Ones, Count, batches;
//   - snapshots: every read through a snapshot returns the state at one
//     instant between NewSnapshot's call and return, and every later read
//     through it the same (checked directly); a snapshot never sees part of
//     a batch (checked directly: batch keys and bits agree);
//   - Flush runs in a tight loop (shown on the visualization), with
//     pinners holding old tables and snapshots sealing and pinning tables.
//
// What the model allows is at least what the engine documents; where the
// documentation promises more, another test checks it:
//
//   - A read of one key (or bit) takes effect at one instant within its
//     call; so does each key of a GetMany, of a scan, of Ones. Each is
//     split into one sub-operation per key with the call's interval. (The
//     engine promises more for KV reads: a GetMany and a scan read one
//     instant, and a batch's KV changes become visible at once. Those are
//     checked directly, with invariants across keys, by
//     TestBatchesNeverPartlyVisible and TestBatchesSerialOrder in
//     batch_atomic_test.go.)
//   - Scans and point reads of a key are in one partition: together they
//     must be linearizable (they were not, until commit 939f5d6: see
//     TestLinearizabilityScanThenGet).
//   - Each change of a batch is a write with the batch's interval (bit
//     changes of a batch may indeed be seen one by one; KV changes may not,
//     see above). A DeleteRange is a write of "absent" to each key in its
//     range.
//   - Count is exact for writes that returned; a write in progress may or
//     may not be counted, and a range write in part. Count is modelled in a
//     partition of its own whose writes are the count changes of each write
//     per aligned run of 32 bits (finer than the engine's accounting, which
//     changes the count once per 32-bit word or once per whole chunk, so it
//     allows every interleaving the engine can produce). This needs each
//     write's exact change, so every bit has one writer (its owner knows
//     the previous value); concurrent writes to one bit are left to the
//     buffer package's tests.
//
// On failure the test prints the failing partition's operations around the
// point where no linearization could be extended, with the flushes that
// overlapped them, and writes porcupine's HTML visualization to a temporary
// file whose path it logs.
//
// The workload runs in rounds (about 1.5s each by default; -kvbuf.stress or
// KVBUF_STRESS sets the total) on one engine; each round's history starts
// from the state the previous one's final reads observed. After the last
// round the engine is closed and reopened, and must hold what the final
// reads saw. KVBUF_LIN_DEBUG=1 logs each partition's size and check time;
// KVBUF_LIN_WINDOW=MS prints every operation within MS milliseconds of the
// one no linearization fits (instead of the 60 nearest).

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// The kinds of sub-operation.
type linKind uint8

const (
	linKVWrite   linKind = iota // a key's value set (or deleted)
	linKVRead                   // a key's value read
	linBitWrite                 // a bit set or cleared
	linBitRead                  // a bit read
	linCountAdd                 // the set-bit count changed by delta
	linCountRead                // the set-bit count read
)

// linIn is a sub-operation's input; part names its partition.
type linIn struct {
	part  string
	kind  linKind
	val   string // linKVWrite: the value
	del   bool   // linKVWrite: a deletion
	bit   bool   // linBitWrite: the value
	delta int64  // linCountAdd
	// groups (linCountAdd) is the number of aligned runs of 32 bits whose
	// count the write changed: above 1, a concurrent Count may see part
	// of the change.
	groups int
}

// linOut is a read's output.
type linOut struct {
	found bool   // linKVRead: present; linBitRead: the bit
	val   string // linKVRead: the value
	n     int64  // linCountRead
}

// linState is one partition's state: a key (set = present), a bit (set =
// the bit) or the count (n).
type linState struct {
	set bool
	val string
	n   int64
}

func linStep(state, input, output any) (bool, any) {
	s, in := state.(linState), input.(linIn)
	switch in.kind {
	case linKVWrite:
		return true, linState{set: !in.del, val: in.val}
	case linKVRead:
		o := output.(linOut)
		return o.found == s.set && (!o.found || o.val == s.val), s
	case linBitWrite:
		return true, linState{set: in.bit}
	case linBitRead:
		return output.(linOut).found == s.set, s
	case linCountAdd:
		return true, linState{n: s.n + in.delta}
	case linCountRead:
		return output.(linOut).n == s.n, s
	}
	panic(fmt.Sprintf("linStep: kind %d", in.kind))
}

// linPartition groups a history by partition, in order of first
// appearance.
func linPartition(h []porcupine.Operation) [][]porcupine.Operation {
	idx := map[string]int{}
	var out [][]porcupine.Operation
	for _, op := range h {
		p := op.Input.(linIn).part
		i, ok := idx[p]
		if !ok {
			i = len(out)
			idx[p] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], op)
	}
	return out
}

func linDescribe(input, output any) string {
	in := input.(linIn)
	name := in.part[strings.IndexByte(in.part, ' ')+1:]
	switch in.kind {
	case linKVWrite:
		if in.del {
			return "delete " + name
		}
		return fmt.Sprintf("put %s=%s", name, in.val)
	case linKVRead:
		if o := output.(linOut); o.found {
			return fmt.Sprintf("get %s -> %s", name, o.val)
		}
		return fmt.Sprintf("get %s -> absent", name)
	case linBitWrite:
		return fmt.Sprintf("set bit %s=%v", name, in.bit)
	case linBitRead:
		return fmt.Sprintf("get bit %s -> %v", name, output.(linOut).found)
	case linCountAdd:
		return fmt.Sprintf("count %+d", in.delta)
	case linCountRead:
		return fmt.Sprintf("count -> %d", output.(linOut).n)
	}
	return "?"
}

func linDescribeState(state any) string {
	s := state.(linState)
	switch {
	case s.n != 0:
		return fmt.Sprint(s.n)
	case s.val != "":
		return s.val
	}
	return fmt.Sprint(s.set)
}

var linModel = porcupine.Model{
	Partition: linPartition,
	Init:      func() any { return linState{} },
	Step:      linStep,
	Equal:     func(a, b any) bool { return a.(linState) == b.(linState) },
	Hash: func(state any) uint64 {
		s := state.(linState)
		h := fnv.New64a()
		fmt.Fprintf(h, "%v|%s|%d", s.set, s.val, s.n)
		return h.Sum64()
	},
	DescribeOperation:         linDescribe,
	DescribeState:             linDescribeState,
	DescribeOperationMetadata: func(info any) string { s, _ := info.(string); return s },
}

// The key universe: shared keys (any KV client writes them) and each batch
// client's pair (only its batches write them).
const (
	linSharedKeys = 16
	linKVClients  = 6
	linBatchers   = 2
	linBitClients = 2
)

func linKey(i int) string { return fmt.Sprintf("k%02d", i) }

func linPairKey(c int, side string) string { return fmt.Sprintf("p%d.%s", c, side) }

var linUniverse = func() []string {
	var u []string
	for i := range linSharedKeys {
		u = append(u, linKey(i))
	}
	for c := range linBatchers {
		u = append(u, linPairKey(c, "a"), linPairKey(c, "b"))
	}
	sort.Strings(u)
	return u
}()

// Bits: region r = [r*linRegion, (r+1)*linRegion) is owned by bit client r
// (r < linBitClients) or batch client r-linBitClients. Reads look at the
// hot bits of every region.
const linRegion = 65536

var linHotOffsets = []uint64{0, 1, 5, 31, 32, 33, 63, 64, 100, 1023, 1024, 4095, 32767, 32768, 32769, 40000, 65535}

// linPairBitOffset is the hot bit of a batch client's region that mirrors
// its pair.
const linPairBitOffset = 5

var linHot = func() []uint64 {
	var h []uint64
	for r := range linBitClients + linBatchers {
		for _, off := range linHotOffsets {
			h = append(h, uint64(r)*linRegion+off)
		}
	}
	return h
}()

var linIsHot = func() map[uint64]bool {
	m := map[uint64]bool{}
	for _, i := range linHot {
		m[i] = true
	}
	return m
}()

func linKVPart(k string) string  { return "kv " + k }
func linBitPart(i uint64) string { return fmt.Sprintf("bit %d", i) }
func linKVObs(k string, v []byte, found bool) linSub {
	return linSub{in: linIn{part: linKVPart(k), kind: linKVRead}, out: linOut{found: found, val: string(v)}}
}
func linBitObs(i uint64, v bool) linSub {
	return linSub{in: linIn{part: linBitPart(i), kind: linBitRead}, out: linOut{found: v}}
}

// linSub is one sub-operation of a recorded operation.
type linSub struct {
	in  linIn
	out linOut
}

// linOp is one recorded operation.
type linOp struct {
	client    int
	call, ret int64
	desc      string
	subs      []linSub
}

// linClient records one goroutine's operations.
type linClient struct {
	id  int
	ops []linOp
}

func (c *linClient) add(call, ret int64, desc string, subs ...linSub) {
	c.ops = append(c.ops, linOp{client: c.id, call: call, ret: ret, desc: desc, subs: subs})
}

// linShadow is a region's bits as its single writer knows them, to compute
// each write's exact change of the count.
type linShadow struct {
	base  uint64
	words [linRegion / 64]uint64
}

// write records bits [lo, hi) = v and returns the sub-operations: a write
// of each hot bit in the range, and the change of the count (with the
// number of aligned runs of 32 bits that changed).
func (s *linShadow) write(lo, hi uint64, v bool) []linSub {
	var subs []linSub
	for _, i := range linHot {
		if i >= lo && i < hi {
			subs = append(subs, linSub{in: linIn{part: linBitPart(i), kind: linBitWrite, bit: v}})
		}
	}
	var total int64
	groups := 0
	for g := lo / 32; g*32 < hi; g++ {
		a, b := max(lo, g*32), min(hi, (g+1)*32)
		var delta int64
		for i := a; i < b; i++ {
			o := i - s.base
			was := s.words[o/64]>>(o%64)&1 != 0
			if was != v {
				if v {
					delta++
					s.words[o/64] |= 1 << (o % 64)
				} else {
					delta--
					s.words[o/64] &^= 1 << (o % 64)
				}
			}
		}
		if delta != 0 {
			total += delta
			groups++
		}
	}
	if total != 0 {
		subs = append(subs, linSub{in: linIn{part: "count", kind: linCountAdd, delta: total, groups: groups}})
	}
	return subs
}

// linInit is the state a round starts from.
type linInit struct {
	kv    map[string]string // present keys
	bits  map[uint64]bool   // hot bits set
	count int64
}

func TestLinearizability(t *testing.T) {
	stressSetup(t)
	total := stressDuration(1500 * time.Millisecond)
	round := min(total, 2*time.Second)
	dir := stressDir(t)
	db := stressOpen(t, dir, stressOptions())
	k, err := db.KV("lin")
	if err != nil {
		t.Fatal(err)
	}
	b, err := db.Bits("lin")
	if err != nil {
		t.Fatal(err)
	}
	state := linInit{kv: map[string]string{}, bits: map[uint64]bool{}}
	var shadows [linBitClients + linBatchers]linShadow
	for r := range shadows {
		shadows[r].base = uint64(r) * linRegion
	}
	for n, start := 0, time.Now(); n == 0 || time.Since(start) < total; n++ {
		state = linRound(t, n, db, k, b, &shadows, state, round)
		if t.Failed() {
			return
		}
	}
	// Close flushes everything: the reopened engine holds what the final
	// reads saw.
	if err := db.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	db = stressOpen(t, dir, nil)
	k, _ = db.KV("lin")
	b, _ = db.Bits("lin")
	for _, key := range linUniverse {
		v, err := k.Get([]byte(key))
		want, present := state.kv[key]
		if err := stressWant(v, err, want, present); err != nil {
			t.Errorf("after reopen: %s: %v", key, err)
		}
	}
	for _, i := range linHot {
		if v, err := b.Get(i); err != nil || v != state.bits[i] {
			t.Errorf("after reopen: bit %d = %v, %v; want %v", i, v, err, state.bits[i])
		}
	}
	if n, err := b.Count(); err != nil || int64(n) != state.count {
		t.Errorf("after reopen: Count = %d, %v; want %d", n, err, state.count)
	}
}

// linRound runs one round of the workload from the state from (what the
// previous round's final reads observed), checks its history and returns
// the state its own final reads observed.
func linRound(t *testing.T, round int, db *DB, k *KV, b *Bits, shadows *[linBitClients + linBatchers]linShadow, from linInit, d time.Duration) linInit {
	start := stressNow() // before any operation of the round
	r := newStressRun(t)
	ctx := context.Background()
	var clients []*linClient
	newClient := func() *linClient {
		c := &linClient{id: len(clients)}
		clients = append(clients, c)
		return c
	}
	// Flushes, for the visualization and the failure report.
	var flushMu sync.Mutex
	var flushes []porcupine.Annotation
	var nflush atomic.Int64
	r.goWork("flusher", func(w *stressWorker) {
		for n := 1; !w.stopped(); n++ {
			call := stressNow()
			var err error
			what := "flush"
			if n%40 == 0 {
				err, what = db.FlushMemtables(ctx), "flush+memtables"
			} else {
				err = db.Flush(ctx)
			}
			ret := stressNow()
			if err != nil {
				r.failf("%s: %v", what, err)
				return
			}
			nflush.Add(1)
			flushMu.Lock()
			flushes = append(flushes, porcupine.Annotation{Tag: "flusher", Start: call, End: ret, Description: what})
			flushMu.Unlock()
		}
	})
	for i := range 3 {
		stressPinner(r, k, i)
	}
	stressSnapshotHolder(r, db, 3*time.Millisecond)
	for id := range linKVClients {
		linKVClient(r, newClient(), id, k)
	}
	for c := range linBatchers {
		linBatchClient(r, newClient(), c, db, k, b, &shadows[linBitClients+c])
	}
	for c := range linBitClients {
		linBitClient(r, newClient(), b, &shadows[c])
	}
	linSnapshotClient(r, newClient(), db)
	r.run(d)
	if t.Failed() {
		return from
	}
	// Final reads, one at a time, after every worker stopped.
	final := newClient()
	next := linInit{kv: map[string]string{}, bits: map[uint64]bool{}}
	for _, key := range linUniverse {
		call := stressNow()
		v, err := k.Get([]byte(key))
		ret := stressNow()
		if err != nil && !errors.Is(err, ErrNotFound) {
			t.Fatalf("final Get(%s): %v", key, err)
		}
		final.add(call, ret, "final get "+key, linKVObs(key, v, err == nil))
		if err == nil {
			next.kv[key] = string(v)
		}
	}
	for _, i := range linHot {
		call := stressNow()
		v, err := b.Get(i)
		ret := stressNow()
		if err != nil {
			t.Fatalf("final bit Get(%d): %v", i, err)
		}
		final.add(call, ret, fmt.Sprintf("final get bit %d", i), linBitObs(i, v))
		next.bits[i] = v
	}
	call := stressNow()
	n, err := b.Count()
	ret := stressNow()
	if err != nil {
		t.Fatalf("final Count: %v", err)
	}
	final.add(call, ret, "final count", linSub{in: linIn{part: "count", kind: linCountRead}, out: linOut{n: int64(n)}})
	next.count = int64(n)

	// The history: the state the round starts from, then every operation.
	initClient := newClient()
	var subs []linSub
	for _, key := range linUniverse {
		v, ok := from.kv[key]
		subs = append(subs, linSub{in: linIn{part: linKVPart(key), kind: linKVWrite, val: v, del: !ok}})
	}
	for _, i := range linHot {
		subs = append(subs, linSub{in: linIn{part: linBitPart(i), kind: linBitWrite, bit: from.bits[i]}})
	}
	subs = append(subs, linSub{in: linIn{part: "count", kind: linCountAdd, delta: from.count}})
	initClient.add(start-2, start-1, fmt.Sprintf("state at the start of round %d", round), subs...)
	var history []porcupine.Operation
	nops := 0
	for _, c := range clients {
		nops += len(c.ops)
		for _, op := range c.ops {
			for _, s := range op.subs {
				history = append(history, porcupine.Operation{
					ClientId: op.client, Input: s.in, Output: s.out,
					Call: op.call, Return: op.ret, Metadata: op.desc,
				})
			}
		}
	}
	history = linSplitCounts(t, history)
	t.Logf("round %d: %d operations (%d sub-operations in %d partitions), %d flushes; metrics %+v",
		round, nops, len(history), len(linPartition(history)), nflush.Load(), db.Metrics())
	checkStart := time.Now()
	r.main.done.Store(true) // the check is bounded by its own timeout
	if os.Getenv("KVBUF_LIN_DEBUG") != "" {
		for _, part := range linPartition(history) {
			st := time.Now()
			res := porcupine.CheckOperationsTimeout(linModel, part, time.Minute)
			t.Logf("partition %q: %d ops: %v in %v", part[0].Input.(linIn).part, len(part), res, time.Since(st))
		}
	}
	timeout := 2*time.Minute + 20*d
	switch res := porcupine.CheckOperationsTimeout(linModel, history, timeout); res {
	case porcupine.Ok:
		t.Logf("round %d: linearizable (checked in %v)", round, time.Since(checkStart).Round(time.Millisecond))
	default:
		flushMu.Lock()
		linReport(t, round, res, history, flushes, timeout)
		flushMu.Unlock()
	}
	return next
}

// linSplitCounts takes out of the history the Count reads that overlap a
// write whose count change spans several runs of 32 bits (such a read may
// see part of the change, which one write operation cannot model) and
// checks them directly: the count read must lie between the count of the
// writes that returned before the read was called, plus every negative
// change of a write overlapping it, and the same plus every positive one.
// Every other Count read stays in the history: a write either returned
// before it was called or was called after it returned.
func linSplitCounts(t *testing.T, history []porcupine.Operation) []porcupine.Operation {
	t.Helper()
	var writes []porcupine.Operation
	var multi [][2]int64
	for _, op := range history {
		if in := op.Input.(linIn); in.kind == linCountAdd {
			writes = append(writes, op)
			if in.groups > 1 {
				multi = append(multi, [2]int64{op.Call, op.Return})
			}
		}
	}
	kept := history[:0:0]
	checked := 0
	for _, op := range history {
		in := op.Input.(linIn)
		if in.kind != linCountRead || !slices.ContainsFunc(multi, func(m [2]int64) bool { return m[0] <= op.Return && m[1] >= op.Call }) {
			kept = append(kept, op)
			continue
		}
		checked++
		var base, lo, hi int64
		for _, w := range writes {
			d := w.Input.(linIn).delta
			switch {
			case w.Return < op.Call:
				base += d
			case w.Call <= op.Return:
				lo += min(d, 0)
				hi += max(d, 0)
			}
		}
		if n := op.Output.(linOut).n; n < base+lo || n > base+hi {
			t.Errorf("%s (client %d, [%.3f, %.3f] ms) read count %d: the writes that returned before it sum to %d, those overlapping it change that by %+d to %+d",
				op.Metadata, op.ClientId, float64(op.Call)/1e6, float64(op.Return)/1e6, n, base, lo, hi)
		}
	}
	return kept
}

// linKVClient: puts, deletes and reads of every kind on the shared keys.
func linKVClient(r *stressRun, c *linClient, id int, k *KV) {
	r.goWork(fmt.Sprintf("kv client %d", id), func(w *stressWorker) {
		ctx := context.Background()
		vals := make([][]byte, 8)
		for n := 0; !w.stopped(); n++ {
			anyKey := func() string { return linUniverse[w.rng.IntN(len(linUniverse))] }
			shared := linKey(w.rng.IntN(linSharedKeys))
			switch p := w.rng.IntN(100); {
			case p < 30:
				v := fmt.Sprintf("c%d.%d", c.id, n)
				call := stressNow()
				err := k.Put(ctx, []byte(shared), []byte(v), 0)
				ret := stressNow()
				if err != nil {
					r.failf("Put: %v", err)
					return
				}
				c.add(call, ret, "put "+shared+"="+v, linSub{in: linIn{part: linKVPart(shared), kind: linKVWrite, val: v}})
			case p < 36:
				call := stressNow()
				err := k.Delete(ctx, []byte(shared), 0)
				ret := stressNow()
				if err != nil {
					r.failf("Delete: %v", err)
					return
				}
				c.add(call, ret, "delete "+shared, linSub{in: linIn{part: linKVPart(shared), kind: linKVWrite, del: true}})
			case p < 40:
				// Within the shared keys; nil bounds sometimes.
				i, j := w.rng.IntN(linSharedKeys), w.rng.IntN(linSharedKeys+1)
				if i > j {
					i, j = j, i
				}
				lo, hi := []byte(linKey(i)), []byte(linKey(j))
				if i == 0 && w.rng.IntN(2) == 0 {
					lo = nil
				}
				call := stressNow()
				err := k.DeleteRange(ctx, lo, hi, 0)
				ret := stressNow()
				if err != nil {
					r.failf("DeleteRange: %v", err)
					return
				}
				var subs []linSub
				for x := i; x < j; x++ {
					subs = append(subs, linSub{in: linIn{part: linKVPart(linKey(x)), kind: linKVWrite, del: true}})
				}
				c.add(call, ret, fmt.Sprintf("deleterange [%q, %s)", lo, hi), subs...)
			case p < 62:
				key := anyKey()
				call := stressNow()
				var v []byte
				var err error
				what := "get "
				if w.rng.IntN(4) == 0 {
					what = "getappend "
					v, err = k.GetAppend([]byte("x"), []byte(key))
					if err == nil {
						if len(v) == 0 || v[0] != 'x' {
							r.failf("GetAppend(%s) = %q lost its prefix", key, v)
							return
						}
						v = v[1:]
					}
				} else {
					v, err = k.Get([]byte(key))
				}
				ret := stressNow()
				if err != nil && !errors.Is(err, ErrNotFound) {
					r.failf("Get(%s): %v", key, err)
					return
				}
				c.add(call, ret, what+key, linKVObs(key, v, err == nil))
			case p < 72:
				keys := make([][]byte, 2+w.rng.IntN(len(vals)-2))
				names := make([]string, len(keys))
				for x := range keys {
					names[x] = anyKey()
					keys[x] = []byte(names[x])
				}
				call := stressNow()
				_, err := k.GetMany(keys, vals, nil)
				ret := stressNow()
				if err != nil {
					r.failf("GetMany: %v", err)
					return
				}
				var subs []linSub
				for x, name := range names {
					subs = append(subs, linKVObs(name, vals[x], vals[x] != nil))
				}
				c.add(call, ret, fmt.Sprintf("getmany %v", names), subs...)
			default:
				if !linScan(r, w, c, k, nil, "") {
					return
				}
			}
		}
	})
}

// linBounds are the scan bounds the clients pick from.
var linBounds = []IterOptions{
	{},
	{LowerBound: []byte("k03"), UpperBound: []byte("k11")},
	{LowerBound: []byte("k08")},
	{UpperBound: []byte("k05")},
	{Prefix: []byte("p")},
	{Prefix: []byte("k0")},
	{LowerBound: []byte("k14"), UpperBound: []byte("p1.a")},
}

// linInBounds reports whether key is within o's bounds.
func linInBounds(o *IterOptions, key string) bool {
	lo, hi := o.bounds()
	return (lo == nil || key >= string(lo)) && (hi == nil || key < string(hi))
}

// linScan scans k (a live keyspace, or a snapshot's if sk is set) with
// random bounds, direction and start, checks the order, and records (or,
// for a snapshot, returns through obs) one observation per universe key it
// covered. It reports false after a failure.
func linScan(r *stressRun, w *stressWorker, c *linClient, k *KV, sk *SnapshotKV, snapDesc string, obs ...map[string]linOut) bool {
	o := linBounds[w.rng.IntN(len(linBounds))]
	if sk != nil {
		o = IterOptions{} // a snapshot scan covers every key
	}
	mode := w.rng.IntN(6) // 0-2 forward, 3-4 backward, 5 a seek and a few steps
	var seekKey string
	if mode == 5 {
		seekKey = linUniverse[w.rng.IntN(len(linUniverse))]
	}
	call := stressNow()
	var it *Iter
	var err error
	if sk != nil {
		it, err = sk.NewIter(&o)
	} else {
		it, err = k.NewIter(&o)
	}
	if err != nil {
		r.failf("NewIter(%+v): %v", o, err)
		return false
	}
	type kv struct{ k, v string }
	var got []kv
	back := mode == 3 || mode == 4
	var ok bool
	switch {
	case mode == 5 && w.rng.IntN(2) == 0:
		ok = it.SeekGE([]byte(seekKey))
	case mode == 5:
		back = true
		ok = it.SeekLT([]byte(seekKey))
	case back:
		ok = it.Last()
	default:
		ok = it.First()
	}
	limit := len(linUniverse) + 1
	if mode == 5 {
		limit = 3
	}
	for ; ok && len(got) < limit; ok = stressStep(it, back) {
		got = append(got, kv{string(it.Key()), string(it.Value())})
	}
	ended := !ok
	err = errors.Join(it.Error(), it.Close())
	ret := stressNow()
	desc := fmt.Sprintf("scan%s [%q, %q) prefix %q backward %v", snapDesc, o.LowerBound, o.UpperBound, o.Prefix, back)
	if mode == 5 {
		desc = fmt.Sprintf("scan%s [%q, %q) prefix %q: seek %s backward %v", snapDesc, o.LowerBound, o.UpperBound, o.Prefix, seekKey, back)
	}
	if err != nil {
		r.failf("%s: %v", desc, err)
		return false
	}
	// Order, bounds, universe.
	for x, e := range got {
		if !linInBounds(&o, e.k) || !slices.Contains(linUniverse, e.k) {
			r.failf("%s returned %q, out of bounds or never written", desc, e.k)
			return false
		}
		if x > 0 && (got[x-1].k < e.k) == back {
			r.failf("%s returned %q after %q", desc, e.k, got[x-1].k)
			return false
		}
		if x > 0 && got[x-1].k == e.k {
			r.failf("%s returned %q twice", desc, e.k)
			return false
		}
	}
	// The keys covered: the bounds, from the seek key on, up to the last
	// key returned unless the scan ended.
	covered := func(key string) bool {
		if !linInBounds(&o, key) {
			return false
		}
		if mode == 5 {
			if !back && key < seekKey || back && key >= seekKey {
				return false
			}
		}
		if !ended && len(got) > 0 {
			last := got[len(got)-1].k
			if !back && key > last || back && key < last {
				return false
			}
		}
		return true
	}
	found := map[string]string{}
	for _, e := range got {
		found[e.k] = e.v
	}
	var subs []linSub
	for _, key := range linUniverse {
		if !covered(key) {
			continue
		}
		v, present := found[key]
		if len(obs) > 0 {
			obs[0][key] = linOut{found: present, val: v}
			continue
		}
		subs = append(subs, linKVObs(key, []byte(v), present))
	}
	if c != nil {
		c.add(call, ret, desc, subs...)
	}
	return true
}

// linBatchClient applies batches (one op each) that put a value into the
// client's pair of keys (or delete both), set its pair bit to the batch
// number's parity (false with a deletion), change a shared key and set
// another bit of its region; it also reads.
func linBatchClient(r *stressRun, c *linClient, id int, db *DB, k *KV, b *Bits, sh *linShadow) {
	r.goWork(fmt.Sprintf("batch client %d", id), func(w *stressWorker) {
		ctx := context.Background()
		pa, pb := linPairKey(id, "a"), linPairKey(id, "b")
		pairBit := sh.base + linPairBitOffset
		batch := db.NewBatch()
		for n := 1; !w.stopped(); n++ {
			if w.rng.IntN(10) < 3 {
				// Reads of the pair, one at a time.
				for _, key := range []string{pa, pb} {
					call := stressNow()
					v, err := k.Get([]byte(key))
					ret := stressNow()
					if err != nil && !errors.Is(err, ErrNotFound) {
						r.failf("Get: %v", err)
						return
					}
					c.add(call, ret, "get "+key, linKVObs(key, v, err == nil))
				}
				call := stressNow()
				v, err := b.Get(pairBit)
				ret := stressNow()
				if err != nil {
					r.failf("Bits.Get: %v", err)
					return
				}
				c.add(call, ret, fmt.Sprintf("get bit %d", pairBit), linBitObs(pairBit, v))
				continue
			}
			batch.Reset()
			var subs []linSub
			val := fmt.Sprintf("c%d.b%d", c.id, n)
			del := w.rng.IntN(8) == 0
			pbit := n%2 == 1 && !del
			for _, key := range []string{pa, pb} {
				if del {
					batch.Delete(k, []byte(key))
				} else {
					batch.Put(k, []byte(key), []byte(val))
				}
				subs = append(subs, linSub{in: linIn{part: linKVPart(key), kind: linKVWrite, val: val, del: del}})
			}
			batch.Set(b, pairBit, pbit)
			subs = append(subs, sh.write(pairBit, pairBit+1, pbit)...)
			shared := linKey(w.rng.IntN(linSharedKeys))
			if w.rng.IntN(2) == 0 {
				batch.Put(k, []byte(shared), []byte(val+".k"))
				subs = append(subs, linSub{in: linIn{part: linKVPart(shared), kind: linKVWrite, val: val + ".k"}})
			} else {
				batch.Delete(k, []byte(shared))
				subs = append(subs, linSub{in: linIn{part: linKVPart(shared), kind: linKVWrite, del: true}})
			}
			var other uint64
			for other = pairBit; other == pairBit; {
				other = sh.base + linHotOffsets[w.rng.IntN(len(linHotOffsets))]
			}
			ov := w.rng.IntN(2) == 0
			batch.Set(b, other, ov)
			subs = append(subs, sh.write(other, other+1, ov)...)
			call := stressNow()
			err := db.Apply(ctx, batch, 0)
			ret := stressNow()
			if err != nil {
				r.failf("Apply: %v", err)
				return
			}
			c.add(call, ret, fmt.Sprintf("batch %s (delete %v), bit %d=%v, %s, bit %d=%v", val, del, pairBit, pbit, shared, other, ov), subs...)
		}
	})
}

// linBitClient writes bits of its region (single bits, small ranges, now
// and then a whole chunk) and reads the hot bits of every region.
func linBitClient(r *stressRun, c *linClient, b *Bits, sh *linShadow) {
	r.goWork(fmt.Sprintf("bit client %d", c.id), func(w *stressWorker) {
		ctx := context.Background()
		idx := make([]uint64, 6)
		out := make([]bool, 6)
		anyHot := func() uint64 { return linHot[w.rng.IntN(len(linHot))] }
		ownHot := func() uint64 { return sh.base + linHotOffsets[w.rng.IntN(len(linHotOffsets))] }
		for !w.stopped() {
			switch p := w.rng.IntN(1000); {
			case p < 60:
				// SetMany of a few own bits to one value (the deletes of
				// one log entry): each bit's change, and the count's in
				// one step per changed bit.
				v := w.rng.IntN(2) == 0
				many := make([]uint64, 2+w.rng.IntN(3))
				vals := make([]bool, len(many))
				var subs []linSub
				var count linSub
				for x := range many {
					many[x] = ownHot()
					if w.rng.IntN(3) == 0 {
						many[x] = sh.base + w.rng.Uint64N(linRegion)
					}
					vals[x] = v
					for _, sub := range sh.write(many[x], many[x]+1, v) {
						if sub.in.kind == linCountAdd {
							count.in.part, count.in.kind = sub.in.part, sub.in.kind
							count.in.delta += sub.in.delta
							count.in.groups += sub.in.groups
							continue
						}
						subs = append(subs, sub)
					}
				}
				if count.in.delta != 0 {
					subs = append(subs, count)
				}
				call := stressNow()
				err := b.SetMany(ctx, many, vals, 0)
				ret := stressNow()
				if err != nil {
					r.failf("SetMany: %v", err)
					return
				}
				c.add(call, ret, fmt.Sprintf("setmany bits %v=%v", many, v), subs...)
			case p < 300:
				i := ownHot()
				if w.rng.IntN(5) == 0 {
					i = sh.base + w.rng.Uint64N(linRegion)
				}
				v := w.rng.IntN(2) == 0
				subs := sh.write(i, i+1, v)
				call := stressNow()
				err := b.Set(ctx, i, v, 0)
				ret := stressNow()
				if err != nil {
					r.failf("Set: %v", err)
					return
				}
				c.add(call, ret, fmt.Sprintf("set bit %d=%v", i, v), subs...)
			case p < 420:
				lo, hi := ownHot(), uint64(0)
				if p < 405 {
					hi = min(lo+1+w.rng.Uint64N(100), sh.base+linRegion)
				} else if p < 418 {
					hi = min(lo+1+w.rng.Uint64N(3000), sh.base+linRegion)
				} else {
					// A whole chunk: one shared full chunk if nothing in it
					// is pending, else word by word.
					lo = sh.base + uint64(w.rng.IntN(2))*32768
					hi = lo + 32768
				}
				v := w.rng.IntN(2) == 0
				subs := sh.write(lo, hi, v)
				call := stressNow()
				err := b.SetRange(ctx, lo, hi, v, 0)
				ret := stressNow()
				if err != nil {
					r.failf("SetRange: %v", err)
					return
				}
				c.add(call, ret, fmt.Sprintf("setrange bits [%d, %d)=%v", lo, hi, v), subs...)
			case p < 650:
				i := anyHot()
				call := stressNow()
				v, err := b.Get(i)
				ret := stressNow()
				if err != nil {
					r.failf("Bits.Get: %v", err)
					return
				}
				c.add(call, ret, fmt.Sprintf("get bit %d", i), linBitObs(i, v))
			case p < 780:
				for x := range idx {
					idx[x] = anyHot()
				}
				call := stressNow()
				err := b.GetMany(idx, out)
				ret := stressNow()
				if err != nil {
					r.failf("Bits.GetMany: %v", err)
					return
				}
				var subs []linSub
				for x, i := range idx {
					subs = append(subs, linBitObs(i, out[x]))
				}
				c.add(call, ret, fmt.Sprintf("getmany bits %v", idx), subs...)
			case p < 930:
				call := stressNow()
				n, err := b.Count()
				ret := stressNow()
				if err != nil {
					r.failf("Count: %v", err)
					return
				}
				c.add(call, ret, "count", linSub{in: linIn{part: "count", kind: linCountRead}, out: linOut{n: int64(n)}})
			default:
				from := anyHot()
				limit := from + 3000
				seen := map[uint64]bool{}
				call := stressNow()
				prev := int64(-1)
				for i := range b.Ones(from) {
					if int64(i) <= prev || i < from {
						r.failf("Ones(%d) yielded %d after %d", from, i, prev)
						return
					}
					prev = int64(i)
					if i >= limit {
						break
					}
					seen[i] = true
				}
				ret := stressNow()
				var subs []linSub
				for _, i := range linHot {
					if i >= from && i < limit {
						subs = append(subs, linBitObs(i, seen[i]))
					}
				}
				c.add(call, ret, fmt.Sprintf("ones from %d to %d", from, limit), subs...)
			}
		}
	})
}

// linSnapshotClient takes snapshots and reads every key and hot bit through
// each, in every way; all reads through one snapshot must agree, a batch
// must be whole, and Count must match the bits. The observations are
// recorded as reads with NewSnapshot's interval. The previous snapshot,
// still open across flushes, is read again before it is closed.
func linSnapshotClient(r *stressRun, c *linClient, db *DB) {
	r.goWork("snapshot client", func(w *stressWorker) {
		type snap struct {
			s    *Snapshot
			kv   map[string]linOut
			bits map[uint64]bool
		}
		var prev *snap
		defer func() {
			if prev != nil {
				prev.s.Close()
			}
		}()
		for !w.stopped() {
			call := stressNow()
			s, err := db.NewSnapshot()
			ret := stressNow()
			if err != nil {
				r.failf("NewSnapshot: %v", err)
				return
			}
			cur := &snap{s: s, kv: map[string]linOut{}, bits: map[uint64]bool{}}
			desc := fmt.Sprintf(" through snapshot @%.3fms", float64(call)/1e6)
			if !linReadSnapshot(r, w, s, cur.kv, cur.bits, desc, true) {
				s.Close()
				return
			}
			var subs []linSub
			for _, key := range linUniverse {
				o := cur.kv[key]
				subs = append(subs, linKVObs(key, []byte(o.val), o.found))
			}
			for _, i := range linHot {
				subs = append(subs, linBitObs(i, cur.bits[i]))
			}
			sb, _ := s.Bits("lin")
			n, err := sb.Count()
			if err != nil {
				r.failf("snapshot Count: %v", err)
				s.Close()
				return
			}
			subs = append(subs, linSub{in: linIn{part: "count", kind: linCountRead}, out: linOut{n: int64(n)}})
			c.add(call, ret, "snapshot"+desc, subs...)
			if prev != nil {
				// Flushes later, the previous snapshot reads the same.
				if !linReadSnapshot(r, w, prev.s, prev.kv, prev.bits, " through the previous snapshot", false) {
					s.Close()
					return
				}
				prev.s.Close()
			}
			prev = cur
			w.pause()
		}
	})
}

// linReadSnapshot reads every key and hot bit through s into kv and bits
// (first) or checks them against kv and bits (!first).
func linReadSnapshot(r *stressRun, w *stressWorker, s *Snapshot, kv map[string]linOut, bitObs map[uint64]bool, desc string, first bool) bool {
	sk, err := s.KV("lin")
	if err != nil {
		r.failf("snapshot KV: %v", err)
		return false
	}
	sb, err := s.Bits("lin")
	if err != nil {
		r.failf("snapshot Bits: %v", err)
		return false
	}
	got := map[string]linOut{}
	// agree checks an observation against an earlier one of the same
	// snapshot.
	agree := func(key string, o linOut, how string) bool {
		if e, ok := got[key]; ok && e != o {
			r.failf("%s%s: %s read %+v, an earlier read %+v", how, desc, key, o, e)
			return false
		}
		got[key] = o
		return true
	}
	// A full scan, then single reads, GetMany and a scan the other way.
	scan := map[string]linOut{}
	if !linScan(r, w, nil, nil, sk, desc, scan) {
		return false
	}
	for key, o := range scan {
		if !agree(key, o, "scan") {
			return false
		}
	}
	for range 4 {
		key := linUniverse[w.rng.IntN(len(linUniverse))]
		v, err := sk.Get([]byte(key))
		if err != nil && !errors.Is(err, ErrNotFound) {
			r.failf("snapshot Get: %v", err)
			return false
		}
		if !agree(key, linOut{found: err == nil, val: string(v)}, "Get") {
			return false
		}
	}
	keys := make([][]byte, len(linUniverse))
	for x, key := range linUniverse {
		keys[x] = []byte(key)
	}
	vals := make([][]byte, len(keys))
	if _, err := sk.GetMany(keys, vals, nil); err != nil {
		r.failf("snapshot GetMany: %v", err)
		return false
	}
	for x, key := range linUniverse {
		if !agree(key, linOut{found: vals[x] != nil, val: string(vals[x])}, "GetMany") {
			return false
		}
	}
	scan = map[string]linOut{}
	if !linScan(r, w, nil, nil, sk, desc, scan) {
		return false
	}
	for key, o := range scan {
		if !agree(key, o, "scan") {
			return false
		}
	}
	// Bits: Ones over everything, Get and GetMany of the hot bits, Count.
	ones := map[uint64]bool{}
	var total int64
	for i := range sb.Ones(0) {
		total++
		ones[i] = true
	}
	n, err := sb.Count()
	if err != nil {
		r.failf("snapshot Count: %v", err)
		return false
	}
	if int64(n) != total {
		r.failf("snapshot%s: Count %d, but Ones yields %d bits", desc, n, total)
		return false
	}
	out := make([]bool, len(linHot))
	if err := sb.GetMany(linHot, out); err != nil {
		r.failf("snapshot GetMany: %v", err)
		return false
	}
	for x, i := range linHot {
		v, err := sb.Get(i)
		if err != nil {
			r.failf("snapshot Bits.Get: %v", err)
			return false
		}
		if v != ones[i] || out[x] != ones[i] {
			r.failf("snapshot%s: bit %d: Get %v, GetMany %v, Ones %v", desc, i, v, out[x], ones[i])
			return false
		}
	}
	// A batch is whole: the pair keys agree, the pair bit mirrors them.
	for c := range linBatchers {
		a, b := got[linPairKey(c, "a")], got[linPairKey(c, "b")]
		bit := ones[uint64(linBitClients+c)*linRegion+linPairBitOffset]
		var n int
		odd := false
		if a.found {
			if _, err := fmt.Sscanf(a.val[strings.IndexByte(a.val, '.')+1:], "b%d", &n); err != nil {
				r.failf("snapshot: pair value %q: %v", a.val, err)
				return false
			}
			odd = n%2 == 1
		}
		if a != b || bit != odd {
			r.failf("snapshot%s saw part of a batch: %s=%+v %s=%+v, pair bit %v", desc, linPairKey(c, "a"), a, linPairKey(c, "b"), b, bit)
			return false
		}
	}
	if first {
		for key, o := range got {
			kv[key] = o
		}
		for _, i := range linHot {
			bitObs[i] = ones[i]
		}
		return true
	}
	for key, o := range got {
		if kv[key] != o {
			r.failf("snapshot%s: %s now reads %+v, earlier %+v", desc, key, o, kv[key])
			return false
		}
	}
	for _, i := range linHot {
		if bitObs[i] != ones[i] {
			r.failf("snapshot%s: bit %d now reads %v, earlier %v", desc, i, ones[i], bitObs[i])
			return false
		}
	}
	return true
}

// linReport explains a history that is not linearizable: for each failing
// partition (a few at most), the operations around the point where no
// linearization could be extended, and porcupine's visualization.
func linReport(t *testing.T, round int, res porcupine.CheckResult, history []porcupine.Operation, flushes []porcupine.Annotation, timeout time.Duration) {
	t.Helper()
	parts := linPartition(history)
	var b strings.Builder
	fmt.Fprintf(&b, "round %d: the history is not linearizable (%s)\n", round, res)
	failing := 0
	for _, part := range parts {
		if porcupine.CheckOperationsTimeout(linModel, part, timeout) == porcupine.Ok {
			continue
		}
		if failing++; failing > 3 {
			fmt.Fprintf(&b, "\n(more failing partitions not shown)\n")
			break
		}
		name := part[0].Input.(linIn).part
		pres, info := porcupine.CheckOperationsVerbose(linModel, part, timeout)
		// The longest linearizable prefix, and the first operation (by
		// return time) it leaves out: the one no order could fit.
		var longest []int
		for _, l := range info.PartialLinearizations()[0] {
			if len(l) > len(longest) {
				longest = l
			}
		}
		in := map[int]int{}
		state := linModel.Init()
		for pos, id := range longest {
			in[id] = pos + 1
			_, state = linStep(state, part[id].Input, part[id].Output)
		}
		stuck := -1
		for id, op := range part {
			if _, ok := in[id]; !ok && (stuck < 0 || op.Return < part[stuck].Return) {
				stuck = id
			}
		}
		fmt.Fprintf(&b, "\npartition %q (%d operations, %s): the longest linearization takes %d of them and ends in state %s;\n",
			name, len(part), pres, len(longest), linDescribeState(state))
		if stuck >= 0 {
			op := part[stuck]
			fmt.Fprintf(&b, "no order fits %s (client %d, %s) after it. Operations around it (ms since the test began; # = place in that linearization):\n",
				linDescribe(op.Input, op.Output), op.ClientId, op.Metadata)
			lo, hi := op.Call-2e6, op.Return+1e6
			if v := os.Getenv("KVBUF_LIN_WINDOW"); v != "" {
				var ms float64
				fmt.Sscan(v, &ms)
				lo, hi = op.Call-int64(ms*1e6), op.Return+int64(ms*1e6)
			}
			var shown []int
			for id, o := range part {
				if o.Return >= lo && o.Call <= hi {
					shown = append(shown, id)
				}
			}
			sort.Slice(shown, func(x, y int) bool { return part[shown[x]].Call < part[shown[y]].Call })
			if len(shown) > 60 && os.Getenv("KVBUF_LIN_WINDOW") == "" {
				// Keep the 60 nearest the stuck operation.
				at := slices.Index(shown, stuck)
				from := max(0, min(at-40, len(shown)-60))
				shown = shown[from : from+60]
			}
			for _, id := range shown {
				o := part[id]
				mark := "  "
				if id == stuck {
					mark = "=>"
				}
				place := "   -"
				if p, ok := in[id]; ok {
					place = fmt.Sprintf("#%3d", p)
				}
				fmt.Fprintf(&b, "%s [%10.3f, %10.3f] c%-2d %s  %-34s (%s)\n", mark, float64(o.Call)/1e6, float64(o.Return)/1e6,
					o.ClientId, place, linDescribe(o.Input, o.Output), o.Metadata)
			}
			for _, f := range flushes {
				if f.End >= lo && f.Start <= hi {
					fmt.Fprintf(&b, "   [%10.3f, %10.3f] %s\n", float64(f.Start)/1e6, float64(f.End)/1e6, f.Description)
				}
			}
		}
		info.AddAnnotations(flushes)
		if f, err := os.CreateTemp("", "kvbuf-linearizability-*.html"); err == nil {
			if err := porcupine.Visualize(linModel, info, f); err == nil {
				fmt.Fprintf(&b, "visualization of partition %q: %s\n", name, f.Name())
			}
			f.Close()
		}
	}
	if failing == 0 {
		fmt.Fprintf(&b, "(every partition alone is linearizable or timed out: the whole check timed out after %v)\n", timeout)
	}
	t.Error(b.String())
}

// TestLinearizabilityScanThenGet is the anomaly TestLinearizability found,
// on its own (fixed by commit 939f5d6, whose nodes are now published with
// no value and get it last): a Put of a key new to the active table linked
// the key's node into the table's skip list (which scans walk) before it
// published it in the table's slot array (which Get, GetAppend and GetMany
// probe). While the Put was between the two, a scan returned the new value
// and a Get called after the scan returned still returned the old one: a
// read that starts after another read returned saw an older state (reads
// were not linearizable; read-your-writes held, the Put had not returned).
// Readers here scan exactly the key a writer is putting, then Get it.
func TestLinearizabilityScanThenGet(t *testing.T) {
	stressSetup(t)
	db := stressOpen(t, stressDir(t), stressOptions())
	k, err := db.KV("scanget")
	if err != nil {
		t.Fatal(err)
	}
	const writers = 4
	key := func(id int, n int64) []byte { return fmt.Appendf(nil, "w%d/%09d", id, n) }
	var next [writers]atomic.Int64 // the key number each writer is putting
	r := newStressRun(t)
	stressFlusher(r, db, 0, nil)
	var scans, hits atomic.Int64
	for id := range writers {
		r.goWork(fmt.Sprintf("writer %d", id), func(w *stressWorker) {
			for n := int64(0); !w.stopped(); n++ {
				next[id].Store(n)
				if err := k.Put(context.Background(), key(id, n), fmt.Appendf(nil, "v%d", n), 0); err != nil {
					r.failf("Put: %v", err)
					return
				}
			}
		})
	}
	for range 6 {
		r.goWork("reader", func(w *stressWorker) {
			for !w.stopped() {
				id := w.rng.IntN(writers)
				n := next[id].Load()
				kk := key(id, n)
				scanCall := stressNow()
				it, err := k.NewIter(&IterOptions{LowerBound: kk, UpperBound: append(slices.Clip(kk), 0)})
				if err != nil {
					r.failf("NewIter: %v", err)
					return
				}
				var v []byte
				ok := it.First()
				if ok {
					v = slices.Clone(it.Value())
				}
				if err := it.Close(); err != nil {
					r.failf("scan: %v", err)
					return
				}
				scanRet := stressNow()
				scans.Add(1)
				if !ok {
					continue
				}
				hits.Add(1)
				getCall := stressNow()
				got, err := k.Get(kk)
				getRet := stressNow()
				if err != nil || string(got) != string(v) {
					done := next[id].Load() > n
					r.failf("a scan [%.3f, %.3f] ms returned %s=%s; a Get called after it returned, [%.3f, %.3f] ms, returned %q, %v "+
						"(the Put of %s had returned by the end of the Get: %v)",
						float64(scanCall)/1e6, float64(scanRet)/1e6, kk, v, float64(getCall)/1e6, float64(getRet)/1e6, got, err, kk, done)
					return
				}
			}
		})
	}
	r.run(stressDuration(1500 * time.Millisecond))
	t.Logf("%d scans, %d found the key being put", scans.Load(), hits.Load())
}
