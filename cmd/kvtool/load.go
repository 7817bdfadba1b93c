package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"

	"github.com/kvbuf/kvbuf"
)

func loadHelp(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "Usage: kvtool load [flags] DIR")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Fills the kvbuf engine in DIR (created if DIR is missing or empty) with N")
	fmt.Fprintln(w, "seeded random changes, for trying the other commands on real data: half bit")
	fmt.Fprintln(w, "sets (random index in [0, 8N), random value) in one bitslice, the other half")
	fmt.Fprintln(w, "KV changes (9 puts to 1 delete, 8-byte big-endian keys in [0, N)) in one")
	fmt.Fprintln(w, "keyspace. Op numbers continue from the engine's watermark. It ends with a")
	fmt.Fprintln(w, "flush of pending changes and pebble memtables, and prints a summary.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "A progress bar is drawn on stderr when stderr is a terminal or with")
	fmt.Fprintln(w, "--progress. An interrupt stops loading; what was loaded is flushed.")
	fmt.Fprintln(w)
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
	p := newProgress(stderr, *force, float64(*n))
	sum, err := load(ctx, dirs[0], loadConfig{n: *n, seed: *seed, keyspace: *keyspace, bits: *bitsName, valueSize: *valueSize}, p)
	p.finish()
	if err != nil {
		return fail(stderr, "load", err)
	}
	fmt.Fprintf(stdout, "loaded %d changes into %s: %d puts and %d deletes in keyspace %q, %d bit sets in bitslice %q\n",
		sum.puts+sum.deletes+sum.sets, dirs[0], sum.puts, sum.deletes, *keyspace, sum.sets, *bitsName)
	fmt.Fprintf(stdout, "ops %d..%d, flushed; watermark %d\n", sum.firstOp, sum.lastOp, sum.watermark)
	return exitOK
}

type loadConfig struct {
	n         int
	seed      uint64
	keyspace  string
	bits      string
	valueSize int
}

type loadSummary struct {
	puts, deletes, sets int
	firstOp, lastOp     uint64
	watermark           uint64
}

func load(ctx context.Context, dir string, c loadConfig, p *progress) (sum loadSummary, err error) {
	db, err := kvbuf.Open(dir, nil)
	if errors.Is(err, kvbuf.ErrLocked) {
		return sum, lockedError(dir)
	}
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
	var key [8]byte
	val := make([]byte, c.valueSize)
	step := max(c.n/200, 1)
	for i := range c.n {
		if i%step == 0 {
			if err := ctx.Err(); err != nil {
				break
			}
			p.add(float64(min(step, c.n-i)), fmt.Sprintf("%d/%d changes", i, c.n))
		}
		op++
		switch r := rng.IntN(20); {
		case r < 10:
			err = bits.Set(ctx, rng.Uint64N(8*uint64(c.n)), rng.IntN(2) == 1, op)
			sum.sets++
		case r < 19:
			binary.BigEndian.PutUint64(key[:], rng.Uint64N(uint64(c.n)))
			for j := range val {
				val[j] = byte(rng.Uint32())
			}
			err = kv.Put(ctx, key[:], val, op)
			sum.puts++
		default:
			binary.BigEndian.PutUint64(key[:], rng.Uint64N(uint64(c.n)))
			err = kv.Delete(ctx, key[:], op)
			sum.deletes++
		}
		if err != nil {
			return sum, err
		}
		sum.lastOp = op
	}
	// Flush what was loaded even when interrupted, with a context of its
	// own: the interrupt was for the loading loop.
	if err := db.FlushMemtables(context.WithoutCancel(ctx)); err != nil {
		return sum, err
	}
	if err := ctx.Err(); err != nil {
		return sum, fmt.Errorf("interrupted after %d of %d changes (those were flushed): %w", sum.puts+sum.deletes+sum.sets, c.n, err)
	}
	return sum, nil
}
