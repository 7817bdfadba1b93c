package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"

	"github.com/kvbuf/kvbuf/internal/enginedir"
)

func loadHelp(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `Usage: kvtool load [flags] DIR

Fills the kvbuf engine in DIR (created if DIR is missing or empty) with N
seeded random changes, for trying the other commands on real data: half bit
sets (random index in [0, 8N), random value) in one bitslice, the other half
KV changes (9 puts to 1 delete, 8-byte big-endian keys in [0, N)) in one
keyspace. With --ranges, about 1 change in 25 is a range instead: a range
delete of up to 16 keys or a bit range of up to 256 bits set to one value.

Each change is one op, applied as a batch of its own; op numbers continue
from the engine's watermark, so the watermark after a load is the number of
the last op. It ends with a flush of pending changes and pebble memtables,
and prints a summary. The same seed and flags make the same changes.

A progress bar is drawn on stderr when stderr is a terminal or with
--progress. An interrupt stops loading; what was loaded is flushed.

`)
	printFlags(w, fs)
}

// runLoad implements "kvtool load [flags] DIR".
func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	n := fs.Int("n", 100000, "number of changes")
	seed := fs.Uint64("seed", 1, "random seed")
	keyspace := fs.String("keyspace", "load", "keyspace `name` for KV changes")
	bitsName := fs.String("bits", "load", "bitslice `name` for bit changes")
	valueSize := fs.Int("value-size", 16, "KV value size in `bytes`")
	ranges := fs.Bool("ranges", false, "make about 1 change in 25 a range delete or a bit range")
	force := fs.Bool("progress", false, "draw the progress bar even when stderr is not a terminal")
	dirs, code, done := parseFlags(fs, args, func(w io.Writer) { loadHelp(w, fs) }, stdout, stderr)
	if done {
		return code
	}
	switch {
	case len(dirs) != 1:
		return usageError(stderr, "load", fmt.Sprintf("want exactly one DIR, got %d", len(dirs)))
	case *n <= 0:
		return usageError(stderr, "load", fmt.Sprintf("-n %d: want at least 1", *n))
	case *valueSize < 0 || *valueSize > 1<<20:
		return usageError(stderr, "load", fmt.Sprintf("-value-size %d: want 0 to 1048576", *valueSize))
	}
	// Names are checked before anything touches the disk: a bad one must
	// not leave a new engine directory behind.
	if err := enginedir.CheckName("keyspace", *keyspace); err != nil {
		return usageError(stderr, "load", fmt.Sprintf("-keyspace %q: names are 1-%d bytes of [A-Za-z0-9._-], not . or ..", *keyspace, enginedir.MaxNameLen))
	}
	if err := enginedir.CheckName("bitslice", *bitsName); err != nil {
		return usageError(stderr, "load", fmt.Sprintf("-bits %q: names are 1-%d bytes of [A-Za-z0-9._-], not . or ..", *bitsName, enginedir.MaxNameLen))
	}
	p := newProgress(stderr, *force, float64(*n))
	cfg := loadConfig{n: *n, seed: *seed, keyspace: *keyspace, bits: *bitsName, valueSize: *valueSize, ranges: *ranges}
	sum, err := load(ctx, dirs[0], cfg, p)
	p.finish()
	if err != nil {
		return fail(stderr, "load", err)
	}
	fmt.Fprintf(stdout, "loaded %d changes into %s: %d puts and %d deletes in keyspace %q, %d bit sets in bitslice %q\n",
		sum.changes(), dirs[0], sum.puts, sum.deletes, *keyspace, sum.sets, *bitsName)
	if *ranges {
		fmt.Fprintf(stdout, "ranges: %d range deletes, %d bit ranges\n", sum.deleteRanges, sum.setRanges)
	}
	fmt.Fprintf(stdout, "ops %d..%d, flushed; watermark %d\n", sum.firstOp, sum.lastOp, sum.watermark)
	return exitOK
}

type loadConfig struct {
	n         int
	seed      uint64
	keyspace  string
	bits      string
	valueSize int
	ranges    bool
}

type loadSummary struct {
	puts, deletes, sets     int
	deleteRanges, setRanges int
	firstOp, lastOp         uint64
	watermark               uint64
}

func (s *loadSummary) changes() int {
	return s.puts + s.deletes + s.sets + s.deleteRanges + s.setRanges
}

// load makes c.n random changes to the engine in dir, each one op written
// as a batch of its own (so a flush running meanwhile never splits an op
// and no write can be refused as stale), then flushes.
func load(ctx context.Context, dir string, c loadConfig, p *progress) (sum loadSummary, err error) {
	db, err := openEngine(dir, nil, "load into it from that process, or stop it first")
	if err != nil {
		return sum, err
	}
	defer func() {
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		sum.watermark = db.Watermark()
	}()
	kv, err := db.KV(c.keyspace)
	if err != nil {
		return sum, err
	}
	bits, err := db.Bits(c.bits)
	if err != nil {
		return sum, err
	}
	rng := rand.New(rand.NewPCG(c.seed, c.seed^0x9e3779b97f4a7c15))
	op := db.Watermark()
	sum.firstOp = op + 1
	var key, hi [8]byte
	val := make([]byte, c.valueSize)
	b := db.NewBatch()
	step := max(c.n/200, 1)
	for i := range c.n {
		if i%step == 0 {
			if ctx.Err() != nil {
				break
			}
			p.add(float64(min(step, c.n-i)), fmt.Sprintf("%d/%d changes", i, c.n))
		}
		b.Reset()
		// One change per batch. The draws of the default mix must not
		// depend on --ranges being off, so that a seed keeps its changes.
		count := &sum.puts
		switch r := rng.IntN(20); {
		case c.ranges && rng.IntN(25) == 0:
			if r < 10 {
				lo := rng.Uint64N(8 * uint64(c.n))
				b.SetRange(bits, lo, lo+1+rng.Uint64N(256), rng.IntN(2) == 1)
				count = &sum.setRanges
			} else {
				lo := rng.Uint64N(uint64(c.n))
				binary.BigEndian.PutUint64(key[:], lo)
				binary.BigEndian.PutUint64(hi[:], lo+1+rng.Uint64N(16))
				b.DeleteRange(kv, key[:], hi[:])
				count = &sum.deleteRanges
			}
		case r < 10:
			b.Set(bits, rng.Uint64N(8*uint64(c.n)), rng.IntN(2) == 1)
			count = &sum.sets
		case r < 19:
			binary.BigEndian.PutUint64(key[:], rng.Uint64N(uint64(c.n)))
			for j := range val {
				val[j] = byte(rng.Uint32())
			}
			b.Put(kv, key[:], val)
		default:
			binary.BigEndian.PutUint64(key[:], rng.Uint64N(uint64(c.n)))
			b.Delete(kv, key[:])
			count = &sum.deletes
		}
		if err := db.Apply(ctx, b, op+1); err != nil {
			if ctx.Err() != nil {
				break // interrupted while waiting for room: nothing applied
			}
			return sum, err
		}
		op++
		*count++
		sum.lastOp = op
	}
	// Flush what was loaded even when interrupted, with a context of its
	// own: the interrupt was for the loading loop.
	if err := db.FlushMemtables(context.WithoutCancel(ctx)); err != nil {
		return sum, err
	}
	if err := ctx.Err(); err != nil {
		return sum, fmt.Errorf("interrupted after %d of %d changes (those were flushed): %w", sum.changes(), c.n, err)
	}
	return sum, nil
}
