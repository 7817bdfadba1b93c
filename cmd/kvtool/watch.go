package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kvbuf/kvbuf"
)

func watchHelp(w io.Writer) {
	fmt.Fprint(w, `Usage: kvtool watch [flags] DIR

Prints the changes the kvbuf engine in DIR retained for its change feed
(Options.WatchRetain), from an op to the persisted watermark, in op order,
one line each, with resolved marks ("every change of every op up to N was
printed"), then exits. A subscriber that crashed resumes from its last
resolved op + 1; these are the changes it gets.

DIR must be an existing engine directory that no running engine holds:
the command opens the engine, so nothing else writes while it prints, and
a running engine serves its feed to its own process (DB.Watch). The
engine does not record which keyspaces it retained: the command prints
what the store holds. A --from below the oldest op retained is an error
(resync from a snapshot).

Text lines: OP KIND NAME and the change (keys and values quoted), or
"resolved OP watermark W". JSON lines (--json): {"op","kind","keyspace",
"key","value","end","bitslice","lo","hi","bit","watermark"}; a key,
value or end that is not UTF-8 is given as key_base64, value_base64 or
end_base64 instead.

Flags:
  --from OP             first op to print (default: the oldest op retained)
  --keyspace NAME[=PREFIX]  only this keyspace (keys with PREFIX); repeatable
  --bitslice NAME       only this bitslice; repeatable
  --json                print JSON lines instead of text
`)
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// watchJSON is one line of watch --json.
type watchJSON struct {
	Op          uint64  `json:"op"`
	Kind        string  `json:"kind"`
	Keyspace    string  `json:"keyspace,omitempty"`
	Key         string  `json:"key,omitempty"`
	KeyBase64   string  `json:"key_base64,omitempty"`
	Value       string  `json:"value,omitempty"`
	ValueBase64 string  `json:"value_base64,omitempty"`
	End         string  `json:"end,omitempty"`
	EndBase64   string  `json:"end_base64,omitempty"`
	Bitslice    string  `json:"bitslice,omitempty"`
	Lo          *uint64 `json:"lo,omitempty"`
	Hi          *uint64 `json:"hi,omitempty"`
	Bit         *bool   `json:"bit,omitempty"`
	Watermark   uint64  `json:"watermark,omitempty"`
}

// runWatch implements "kvtool watch [flags] DIR".
func runWatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	from := fs.String("from", "", "first op to print")
	var keyspaces, bitslices stringList
	fs.Var(&keyspaces, "keyspace", "only this keyspace")
	fs.Var(&bitslices, "bitslice", "only this bitslice")
	asJSON := fs.Bool("json", false, "print JSON lines")
	dirs, code, done := parseFlagsN(fs, args, 1, "want exactly one DIR, got %d", watchHelp, stdout, stderr)
	if done {
		return code
	}
	var fromOp uint64
	if *from != "" {
		n, err := strconv.ParseUint(*from, 10, 64)
		if err != nil || n == 0 {
			return usageError(stderr, "watch", fmt.Sprintf("--from %q: want an op number from 1", *from))
		}
		fromOp = n
	}
	wo := &kvbuf.WatchOptions{Durable: true, Bitslices: bitslices}
	for _, k := range keyspaces {
		name, prefix, _ := strings.Cut(k, "=")
		wo.Keyspaces = append(wo.Keyspaces, kvbuf.WatchKeyspace{Name: name, Prefix: []byte(prefix)})
	}
	if err := watchEngine(ctx, dirs[0], fromOp, wo, *asJSON, stdout); err != nil {
		return fail(stderr, "watch", err)
	}
	return exitOK
}

func watchEngine(ctx context.Context, dir string, from uint64, wo *kvbuf.WatchOptions, asJSON bool, stdout io.Writer) error {
	if _, err := readManifest(dir); err != nil {
		return err
	}
	// Retention with no bound: opening the engine to read its feed never
	// trims it (a flush at Open, to finish a drop, keeps everything).
	db, err := openEngine(dir, &kvbuf.Options{WatchRetain: &kvbuf.WatchRetention{MaxBytes: math.MaxInt64}}, "a running engine serves its feed with DB.Watch")
	if err != nil {
		return err
	}
	err = printFeed(ctx, db, from, wo, asJSON, stdout)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return err
}

func printFeed(ctx context.Context, db *kvbuf.DB, from uint64, wo *kvbuf.WatchOptions, asJSON bool, stdout io.Writer) error {
	m := db.Metrics()
	wm := db.Watermark()
	if from == 0 {
		from = m.WatchRetainedFrom
	}
	if from > wm {
		if from > wm+1 {
			return fmt.Errorf("--from %d: the watermark is %d", from, wm)
		}
		return nil // nothing durable after it
	}
	wo.From = from
	w, err := db.Watch(ctx, wo)
	if err != nil {
		return err
	}
	defer w.Close()
	// Buffered, flushed after each batch NextMany returns: a batch is
	// what was ready without waiting, so every event is printed before
	// the watch blocks, with one write per batch rather than per event.
	out := bufio.NewWriter(stdout)
	enc := json.NewEncoder(out)
	batch := make([]kvbuf.WatchEvent, 0, 256)
	for {
		var err error
		batch, err = w.NextMany(ctx, batch[:0])
		for _, e := range batch {
			if asJSON {
				if err := enc.Encode(eventJSON(e)); err != nil {
					return err
				}
			} else if _, err := fmt.Fprintln(out, eventText(e)); err != nil {
				return err
			}
			if e.Kind == kvbuf.EventResolved && e.Op >= wm {
				return out.Flush()
			}
		}
		if ferr := out.Flush(); ferr != nil {
			return ferr
		}
		if err != nil {
			return err
		}
	}
}

func eventText(e kvbuf.WatchEvent) string {
	switch e.Kind {
	case kvbuf.EventResolved:
		return fmt.Sprintf("resolved %d watermark %d", e.Op, e.Watermark)
	case kvbuf.EventPut:
		return fmt.Sprintf("%d put %s %q=%q", e.Op, e.Keyspace, e.Key, e.Value)
	case kvbuf.EventDelete:
		return fmt.Sprintf("%d delete %s %q", e.Op, e.Keyspace, e.Key)
	case kvbuf.EventDeleteRange:
		return fmt.Sprintf("%d delete-range %s [%s, %s)", e.Op, e.Keyspace, bound(e.Key), bound(e.End))
	case kvbuf.EventDropKeyspace:
		return fmt.Sprintf("%d drop-keyspace %s", e.Op, e.Keyspace)
	case kvbuf.EventSetBits:
		return fmt.Sprintf("%d set-bits %s [%d, %d) %d", e.Op, e.Bitslice, e.Lo, e.Hi, b2i(e.Bit))
	}
	return fmt.Sprintf("%d %s", e.Op, e.Kind)
}

// bound prints a range bound: quoted, or "-" for an open one.
func bound(b []byte) string {
	if b == nil {
		return "-"
	}
	return strconv.Quote(string(b))
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}

func eventJSON(e kvbuf.WatchEvent) watchJSON {
	j := watchJSON{Op: e.Op, Kind: e.Kind.String(), Keyspace: e.Keyspace, Bitslice: e.Bitslice, Watermark: e.Watermark}
	text := func(b []byte, s, s64 *string) {
		if utf8.Valid(b) {
			*s = string(b)
		} else {
			*s64 = base64.StdEncoding.EncodeToString(b)
		}
	}
	text(e.Key, &j.Key, &j.KeyBase64)
	text(e.Value, &j.Value, &j.ValueBase64)
	text(e.End, &j.End, &j.EndBase64)
	if e.Kind == kvbuf.EventSetBits {
		bit, lo, hi := e.Bit, e.Lo, e.Hi
		j.Lo, j.Hi, j.Bit = &lo, &hi, &bit
	}
	return j
}
