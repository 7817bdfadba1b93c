package buffer

import (
	"strconv"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestProtocol runs the scripts in testdata/protocol: the flush protocol
// (freeze, write, release) as data, one script format for every flush
// target. Each script starts with init, which says which targets the rig
// has: a KV overlay over a pebble store, a Bits overlay over a bitslice
// file, or both (written as the engine writes them: the bitslice first,
// then the store batch, one generation number for both). Rewrite the
// expected output with
//
//	go test ./internal/buffer -run TestProtocol -rewrite
//
// After every command the rig checks that the read paths agree with each
// other (Get, GetMany and scans both ways for KV; Get, GetMany, Ones and
// Count for Bits), for the live overlays and every open snapshot, over every
// key and bit index the script named; a disagreement fails the test
// whatever the expected output says.
//
// Commands (KV keys and values are words; "" is the empty key, "*" an open
// range bound; in a rig with a bitslice, a decimal argument of get and
// get-many is a bit index, anything else a key):
//
//	init kv|bits|kv bits [pool=on|off] [shards=N] [max-bits=N] [max-key=N] [max-value=N]
//	put k=v ...                 KV.Put of each pair (k= puts an empty value)
//	delete k ...                KV.Delete of each key
//	delete-range lo hi          KV.DeleteRange [lo, hi)
//	drop                        KV.Drop
//	set i=0|1 ...               Bits.Set of each bit
//	set-range lo hi 0|1         Bits.SetRange [lo, hi)
//	freeze                      Freeze of every target with the next generation
//	                            number; prints what each table of it holds
//	write [fail[=bits|sync|kv]] writes the oldest generation not yet written;
//	                            fail injects a failure: bits = a torn apply of
//	                            the bitslice words, sync = the bitslice's sync,
//	                            kv = the store batch is dropped; a bare fail is
//	                            bits if the rig has a bitslice, else kv
//	release                     releases the oldest generation if it is written
//	settle                      Bits.Settle; prints whether reads went back to
//	                            the file fast path
//	snapshot name               a snapshot of every target
//	close-snapshot name
//	get [snap=name] k|i ...     Get of each key or bit
//	snapshot-get name k|i ...   get snap=name
//	get-many [snap=name] k|i ...
//	scan [snap=name] [lo hi] [reverse]
//	count [snap=name]           Bits.Count and Len
//	ones [from] [snap=name]     Bits.Ones(from) as runs
//	pending                     each overlay's view and pending counters
//	durable                     what the store and the bitslice file hold
//	reopen                      a crash and restart: pending state is lost,
//	                            storage is opened again under new overlays
func TestProtocol(t *testing.T) {
	// Every script runs twice, with the same expected output: with the
	// default options (tables recycled through the pool, 8 shards) and
	// with no pool and one shard. init's arguments override both.
	variants := []struct {
		name string
		opts Options
	}{
		{"default", Options{}},
		{"nopool-1shard", Options{PoolBytes: -1, Shards: 1}},
	}
	datadriven.Walk(t, "testdata/protocol", func(t *testing.T, path string) {
		for _, v := range variants {
			t.Run(v.name, func(t *testing.T) {
				var r *protoRig
				datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
					if td.Cmd == "init" {
						r = initProtoRig(t, td, v.opts)
						return ""
					}
					if r == nil {
						td.Fatalf(t, "the script must start with init")
					}
					out := runProtoCmd(t, r, td)
					r.check(td.Pos)
					return out
				})
			})
		}
	})
}

func initProtoRig(t *testing.T, td *datadriven.TestData, base Options) *protoRig {
	var withKV, withBits bool
	opts := &base
	for _, a := range td.CmdArgs {
		switch a.Key {
		case "kv":
			withKV = true
		case "bits":
			withBits = true
		case "pool":
			switch a.SingleVal(t) {
			case "off":
				opts.PoolBytes = -1
			case "on":
				opts.PoolBytes = 0
			default:
				td.Fatalf(t, "init: pool=on or pool=off")
			}
		case "shards":
			a.Scan(t, 0, &opts.Shards)
		case "max-bits":
			a.Scan(t, 0, &opts.MaxBits)
		case "max-key":
			a.Scan(t, 0, &opts.MaxKeySize)
		case "max-value":
			a.Scan(t, 0, &opts.MaxValueSize)
		default:
			td.Fatalf(t, "init: unknown argument %s", a)
		}
	}
	if !withKV && !withBits {
		td.Fatalf(t, "init: want kv, bits or both")
	}
	return newProtoRig(t, withKV, withBits, opts)
}

// protoArgs splits a command's arguments into the positional ones and
// the named ones (snap=, fail=, lo=, hi=).
type protoArgs struct {
	pos   []string
	named map[string]string
}

func splitArgs(td *datadriven.TestData, named ...string) protoArgs {
	a := protoArgs{named: map[string]string{}}
	for _, c := range td.CmdArgs {
		isNamed := false
		for _, n := range named {
			if c.Key == n && len(c.Vals) == 1 {
				a.named[n] = c.Vals[0]
				isNamed = true
			}
		}
		if !isNamed {
			a.pos = append(a.pos, c.Key)
		}
	}
	return a
}

// bound parses a range bound: "*" is open.
func bound(s string) *string {
	if s == "*" {
		return nil
	}
	s = keyArg(s)
	return &s
}

// keyArg parses a key: `""` is the empty key.
func keyArg(s string) string {
	if s == `""` {
		return ""
	}
	return s
}

func parseUint(t *testing.T, td *datadriven.TestData, s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		td.Fatalf(t, "%s: not a number: %q", td.Cmd, s)
	}
	return n
}

func parseBit(t *testing.T, td *datadriven.TestData, s string) bool {
	switch s {
	case "0":
		return false
	case "1":
		return true
	}
	td.Fatalf(t, "%s: a bit is 0 or 1, not %q", td.Cmd, s)
	return false
}

func joinOut(outs []string) string {
	var s string
	for _, o := range outs {
		if o == "" {
			continue
		}
		if s != "" {
			s += "\n"
		}
		s += o
	}
	return s
}

func runProtoCmd(t *testing.T, r *protoRig, td *datadriven.TestData) string {
	needKV := func() {
		if r.kv == nil {
			td.Fatalf(t, "%s: the rig has no KV overlay", td.Cmd)
		}
	}
	needBits := func() {
		if r.bits == nil {
			td.Fatalf(t, "%s: the rig has no Bits overlay", td.Cmd)
		}
	}
	wantPos := func(a protoArgs, n int) {
		if len(a.pos) != n {
			td.Fatalf(t, "%s: want %d arguments, got %v", td.Cmd, n, a.pos)
		}
	}
	switch td.Cmd {
	case "put":
		needKV()
		var outs []string
		for _, a := range td.CmdArgs {
			if len(a.Vals) != 1 {
				td.Fatalf(t, "put: want k=v, got %s", a)
			}
			outs = append(outs, r.put(keyArg(a.Key), a.Vals[0]))
		}
		return joinOut(outs)
	case "delete":
		needKV()
		var outs []string
		for _, a := range td.CmdArgs {
			outs = append(outs, r.del(keyArg(a.Key)))
		}
		return joinOut(outs)
	case "delete-range":
		needKV()
		a := splitArgs(td)
		wantPos(a, 2)
		return r.delRange(bound(a.pos[0]), bound(a.pos[1]))
	case "drop":
		needKV()
		return r.drop()
	case "set":
		needBits()
		var outs []string
		for _, a := range td.CmdArgs {
			if len(a.Vals) != 1 {
				td.Fatalf(t, "set: want i=0 or i=1, got %s", a)
			}
			outs = append(outs, r.set(parseUint(t, td, a.Key), parseBit(t, td, a.Vals[0])))
		}
		return joinOut(outs)
	case "set-range":
		needBits()
		a := splitArgs(td)
		wantPos(a, 3)
		return r.setRange(parseUint(t, td, a.pos[0]), parseUint(t, td, a.pos[1]), parseBit(t, td, a.pos[2]))
	case "freeze":
		return r.freeze()
	case "write":
		fail := ""
		if arg, ok := td.Arg("fail"); ok {
			switch {
			case len(arg.Vals) == 1:
				fail = arg.Vals[0]
			case r.bits != nil:
				fail = "bits"
			default:
				fail = "kv"
			}
		}
		switch fail {
		case "":
		case "bits", "sync":
			needBits()
		case "kv":
			needKV()
		default:
			td.Fatalf(t, "write: fail=%s: want bits, sync or kv", fail)
		}
		return r.write(fail)
	case "release":
		return r.release()
	case "settle":
		needBits()
		return r.settle()
	case "reopen":
		return r.reopen()
	case "snapshot":
		a := splitArgs(td)
		wantPos(a, 1)
		return r.snapshot(a.pos[0])
	case "close-snapshot":
		a := splitArgs(td)
		wantPos(a, 1)
		return r.closeSnapshot(a.pos[0])
	case "get", "get-many", "snapshot-get":
		a := splitArgs(td, "snap")
		snap := a.named["snap"]
		if td.Cmd == "snapshot-get" {
			if len(a.pos) < 1 {
				td.Fatalf(t, "snapshot-get: want a snapshot name")
			}
			snap, a.pos = a.pos[0], a.pos[1:]
		}
		if td.Cmd == "get-many" {
			return r.getMany(snap, a.pos)
		}
		return r.get(snap, a.pos)
	case "scan":
		needKV()
		a := splitArgs(td, "snap")
		reverse := false
		if n := len(a.pos); n > 0 && a.pos[n-1] == "reverse" {
			reverse, a.pos = true, a.pos[:n-1]
		}
		var lo, hi *string
		switch len(a.pos) {
		case 0:
		case 2:
			lo, hi = bound(a.pos[0]), bound(a.pos[1])
		default:
			td.Fatalf(t, "scan: want no bounds or lo and hi, got %v", a.pos)
		}
		return r.scan(a.named["snap"], lo, hi, reverse)
	case "count":
		needBits()
		return r.count(splitArgs(td, "snap").named["snap"])
	case "ones":
		needBits()
		a := splitArgs(td, "snap")
		var from uint64
		if len(a.pos) > 0 {
			wantPos(a, 1)
			from = parseUint(t, td, a.pos[0])
		}
		return r.ones(a.named["snap"], from)
	case "pending":
		return r.pending()
	case "durable":
		return r.durable()
	}
	td.Fatalf(t, "unknown command %s", td.Cmd)
	return ""
}
