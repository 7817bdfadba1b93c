package raftkv

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/kvbuf/kvbuf"
)

// Linearizability of client histories on in-process clusters whose
// transport drops, delays and partitions requests while leaders are killed
// and restarted. Clients write through the node they believe leads and
// read (linearizably) through any node; porcupine checks the history.
// RAFTKV_LONG=1 runs each for a minute instead of a few seconds.

const (
	linKeys = 5 // keys k0..k4 of keyspace "ks"
	linBits = 3 // bits 0..2 of bitslice "bs"
)

type linIn struct {
	op     string // put, get, del, range, scan, set, bit
	key    int
	val    string
	lo, hi int // range: keys [lo, hi); -1 is open
	bit    int
	on     bool
}

type linOut struct {
	unknown bool // a write whose outcome is unknown
	val     string
	found   bool
	scan    string
	on      bool
}

type linKV struct {
	val [linKeys]string
	has [linKeys]bool
}

func (s linKV) scan() string {
	var b strings.Builder
	for i := range linKeys {
		if s.has[i] {
			fmt.Fprintf(&b, "k%d=%s,", i, s.val[i])
		}
	}
	return b.String()
}

var raftLinModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		parts := make([][]porcupine.Operation, 1+linBits)
		for _, op := range h {
			in := op.Input.(linIn)
			if in.op == "set" || in.op == "bit" {
				parts[1+in.bit] = append(parts[1+in.bit], op)
			} else {
				parts[0] = append(parts[0], op)
			}
		}
		return parts
	},
	Init: func() any { return linKV{} },
	Step: func(state, input, output any) (bool, any) {
		in, out := input.(linIn), output.(linOut)
		if in.op == "set" || in.op == "bit" {
			// A bit partition's state is the bit, kept in val[0].
			s := state.(linKV)
			cur := s.has[0]
			if in.op == "set" {
				s.has[0] = in.on
				return true, s
			}
			return out.on == cur, s
		}
		s := state.(linKV)
		switch in.op {
		case "put":
			s.val[in.key], s.has[in.key] = in.val, true
			return true, s
		case "del":
			s.val[in.key], s.has[in.key] = "", false
			return true, s
		case "range":
			lo, hi := in.lo, in.hi
			if lo < 0 {
				lo = 0
			}
			if hi < 0 {
				hi = linKeys
			}
			for i := lo; i < hi; i++ {
				s.val[i], s.has[i] = "", false
			}
			return true, s
		case "get":
			return out.found == s.has[in.key] && out.val == s.val[in.key], s
		case "scan":
			return out.scan == s.scan(), s
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linIn), output.(linOut)
		res := fmt.Sprintf("%+v", out)
		if out.unknown {
			res = "?"
		}
		return fmt.Sprintf("%+v -> %s", in, res)
	},
}

// linRecorder collects a history.
type linRecorder struct {
	mu  sync.Mutex
	ops []porcupine.Operation
}

func (r *linRecorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

func (r *linRecorder) add(client int, in linIn, call int64, out linOut, ret int64) {
	r.mu.Lock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	r.mu.Unlock()
}

func linDuration(t *testing.T) time.Duration {
	switch {
	case os.Getenv("RAFTKV_LONG") != "":
		return time.Minute
	case testing.Short():
		return 2 * time.Second
	}
	return 5 * time.Second
}

func TestLinearizable3(t *testing.T) { runLinearizable(t, 3) }
func TestLinearizable5(t *testing.T) { runLinearizable(t, 5) }

func runLinearizable(t *testing.T, size int) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	c := newCluster(t, size, func(o *Options) {
		o.LogRetain = 5 // restarted nodes often catch up by snapshot
	})
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateKeyspace(ctx, "ks") })
	c.mustDo(func(ctx context.Context, n *Node) error { return n.CreateBitslice(ctx, "bs") })
	c.faults.set(0.02, 3*time.Millisecond)

	// Run for the duration, and on (up to 6 times as long, on a loaded
	// machine) until enough operations and leader kills were seen.
	dur := linDuration(t)
	start := time.Now()
	var stopped atomic.Bool
	var kills atomic.Int64
	var rec linRecorder
	stop := func() bool {
		if stopped.Load() {
			return true
		}
		elapsed := time.Since(start)
		if elapsed >= dur && (rec.len() >= 200 && kills.Load() >= 2 || elapsed >= 6*dur) {
			stopped.Store(true)
		}
		return stopped.Load()
	}
	var wg sync.WaitGroup
	for client := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			linClient(c, client, rand.New(rand.NewPCG(seed, uint64(client))), stop, &rec)
		}()
	}
	linNemesis(t, c, rand.New(rand.NewPCG(seed, 99)), stop, &kills)
	wg.Wait()
	dur = time.Since(start).Round(time.Millisecond)
	c.faults.heal()
	c.faults.set(0, 0)
	for _, id := range c.ids() {
		if c.tn(id).node() == nil {
			c.start(id, false)
		}
	}
	c.converge(30 * time.Second)

	var writes, reads, unknown int
	for _, op := range rec.ops {
		switch op.Input.(linIn).op {
		case "get", "scan", "bit":
			reads++
		default:
			writes++
			if op.Output.(linOut).unknown {
				unknown++
			}
		}
	}
	snaps := c.snapshotsInstalled()
	t.Logf("%d nodes, %v: %d writes (%d of unknown outcome), %d reads, %d leader kills, %d requests dropped, %d snapshots installed",
		size, dur, writes, unknown, reads, kills.Load(), c.faults.dropped.Load(), snaps)
	if kills.Load() < 2 {
		t.Errorf("only %d leader kills", kills.Load())
	}
	if writes < 20 || reads < 20 {
		t.Fatalf("only %d writes and %d reads completed", writes, reads)
	}
	requireLinearizable(t, raftLinModel, rec.ops, "raftkv-lin", seed)
}

// requireLinearizable fails t unless porcupine finds ops linearizable
// under model within two minutes; an illegal history is drawn to
// <tmp>/<name>-<seed>.html.
func requireLinearizable(t *testing.T, model porcupine.Model, ops []porcupine.Operation, name string, seed uint64) {
	t.Helper()
	res, info := porcupine.CheckOperationsVerbose(model, ops, 2*time.Minute)
	switch res {
	case porcupine.Ok:
	case porcupine.Illegal:
		path := fmt.Sprintf("%s/%s-%d.html", os.TempDir(), name, seed)
		if f, err := os.Create(path); err == nil {
			_ = porcupine.Visualize(model, info, f)
			f.Close()
		}
		t.Fatalf("history of %d operations is not linearizable (visualization: %s)", len(ops), path)
	default:
		t.Fatalf("porcupine could not decide within its timeout (%d operations)", len(ops))
	}
}

// linClient runs random operations until stop says so.
func linClient(c *cluster, client int, rng *rand.Rand, stop func() bool, rec *linRecorder) {
	var leader uint64 = 1
	seq := 0
	ids := c.ids()
	for !stop() {
		var in linIn
		switch r := rng.IntN(100); {
		case r < 30:
			seq++
			in = linIn{op: "put", key: rng.IntN(linKeys), val: fmt.Sprintf("c%d.%d", client, seq)}
		case r < 40:
			in = linIn{op: "del", key: rng.IntN(linKeys)}
		case r < 45:
			lo, hi := rng.IntN(linKeys+1)-1, rng.IntN(linKeys+1)-1
			if lo >= 0 && hi >= 0 && lo > hi {
				lo, hi = hi, lo
			}
			in = linIn{op: "range", lo: lo, hi: hi}
		case r < 65:
			in = linIn{op: "get", key: rng.IntN(linKeys)}
		case r < 75:
			in = linIn{op: "scan"}
		case r < 88:
			in = linIn{op: "set", bit: rng.IntN(linBits), on: rng.IntN(2) == 0}
		default:
			in = linIn{op: "bit", bit: rng.IntN(linBits)}
		}
		write := in.op == "put" || in.op == "del" || in.op == "range" || in.op == "set"
		target := leader
		if !write {
			target = ids[rng.IntN(len(ids))]
		}
		n := c.tn(target).node()
		if n == nil {
			leader = ids[rng.IntN(len(ids))]
			time.Sleep(5 * time.Millisecond)
			continue
		}
		ctx, cancel := context.WithTimeout(bg, time.Second)
		call := time.Now().UnixNano()
		out, err := linDo(ctx, n, in)
		ret := time.Now().UnixNano()
		cancel()
		var nl *NotLeaderError
		switch {
		case err == nil:
			rec.add(client, in, call, out, ret)
		case write && errors.Is(err, ErrOutcomeUnknown):
			// It may take effect at any later time: its return is never.
			rec.add(client, in, call, linOut{unknown: true}, math.MaxInt64)
		case errors.As(err, &nl):
			if nl.Leader != 0 {
				leader = nl.Leader
			} else {
				leader = ids[rng.IntN(len(ids))]
				time.Sleep(5 * time.Millisecond)
			}
		default:
			// Refused before anything was proposed, or a read that failed:
			// no effect to record.
			if !write || errors.Is(err, ErrProposalDropped) || errors.Is(err, ErrStopped) {
				leader = ids[rng.IntN(len(ids))]
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
}

func linDo(ctx context.Context, n *Node, in linIn) (linOut, error) {
	key := func(i int) []byte { return fmt.Appendf(nil, "k%d", i) }
	var out linOut
	var err error
	switch in.op {
	case "put":
		err = n.Put(ctx, "ks", key(in.key), []byte(in.val))
	case "del":
		err = n.Delete(ctx, "ks", key(in.key))
	case "range":
		var lo, hi []byte
		if in.lo >= 0 {
			lo = key(in.lo)
		}
		if in.hi >= 0 {
			hi = key(in.hi)
		}
		err = n.DeleteRange(ctx, "ks", lo, hi)
	case "get":
		var v []byte
		v, err = n.Get(ctx, "ks", key(in.key), nil)
		if errors.Is(err, kvbuf.ErrNotFound) {
			err = nil
		} else if err == nil {
			out.found, out.val = true, string(v)
		}
	case "scan":
		var kvs []KeyValue
		kvs, _, err = n.Scan(ctx, "ks", []byte("k"), 0, nil)
		var b strings.Builder
		for _, kv := range kvs {
			fmt.Fprintf(&b, "%s=%s,", kv.Key, kv.Value)
		}
		out.scan = b.String()
	case "set":
		err = n.SetBit(ctx, "bs", uint64(in.bit), in.on)
	case "bit":
		out.on, err = n.GetBit(ctx, "bs", uint64(in.bit), nil)
	}
	return out, err
}

// linNemesis kills and restarts leaders and cuts the network until stop
// says so, counting the leader kills.
func linNemesis(t *testing.T, c *cluster, rng *rand.Rand, stop func() bool, kills *atomic.Int64) {
	step := 0
	ids := c.ids()
	pause := func(lo, hi time.Duration) {
		time.Sleep(lo + time.Duration(rng.Int64N(int64(hi-lo))))
	}
	for !stop() {
		pause(200*time.Millisecond, 600*time.Millisecond)
		var lead uint64
		for wait := time.Now().Add(time.Second); lead == 0 && time.Now().Before(wait); time.Sleep(10 * time.Millisecond) {
			for _, id := range ids {
				if n := c.tn(id).node(); n != nil && n.IsLeader() {
					lead = id
				}
			}
		}
		step++
		switch step % 4 {
		case 0, 2: // kill the leader, restart it
			if lead == 0 {
				continue
			}
			c.stop(lead)
			kills.Add(1)
			pause(100*time.Millisecond, 500*time.Millisecond)
			c.start(lead, false)
		case 1: // cut the leader off from the others
			if lead == 0 {
				continue
			}
			var rest []uint64
			for _, id := range ids {
				if id != lead {
					rest = append(rest, id)
				}
			}
			c.faults.partition([]uint64{lead}, rest)
			pause(200*time.Millisecond, 600*time.Millisecond)
			c.faults.heal()
		default: // a random split
			perm := rng.Perm(len(ids))
			k := 1 + rng.IntN(len(ids)-1)
			var a, b []uint64
			for i, p := range perm {
				if i < k {
					a = append(a, ids[p])
				} else {
					b = append(b, ids[p])
				}
			}
			c.faults.partition(a, b)
			pause(100*time.Millisecond, 400*time.Millisecond)
			c.faults.heal()
		}
	}
}
