package kvbuf

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/kvbuf/kvbuf/internal/digest"
	"github.com/kvbuf/kvbuf/internal/snapstream"
)

// fillExportEngine writes a mix of content into db: several keyspaces (one
// empty), binary keys, a value larger than a frame, deleted and
// range-deleted keys, and bitslices that are sparse, dense (whole runs of
// ones), empty, or longer than their highest set bit. Part is flushed, part
// pending. It returns the last op written.
func fillExportEngine(t testing.TB, db *DB) uint64 {
	t.Helper()
	users, orders := mustKV(t, db, "users"), mustKV(t, db, "orders")
	mustKV(t, db, "empty")
	op := uint64(0)
	next := func() uint64 { op++; return op }
	for i := range 300 {
		mustPut(t, users, fmt.Sprintf("u%04d", i), strings.Repeat("v", i%50), next())
	}
	mustPut(t, orders, "\x00\xff binary", "\x00\x01", next())
	mustPut(t, orders, "big", strings.Repeat("x", 3*snapstream.FrameSize+17), next())
	mustFlush(t, db)
	if err := users.Delete(ctx, []byte("u0007"), next()); err != nil {
		t.Fatal(err)
	}
	if err := users.DeleteRange(ctx, []byte("u0100"), []byte("u0150"), next()); err != nil {
		t.Fatal(err)
	}
	sparse, dense := mustBits(t, db, "sparse"), mustBits(t, db, "dense")
	mustBits(t, db, "nothing")
	for _, i := range []uint64{0, 63, 64, 1000, 1 << 20} {
		mustSet(t, sparse, i, true, next())
	}
	if err := dense.SetRange(ctx, 5, 70000, true, next()); err != nil {
		t.Fatal(err)
	}
	mustSet(t, dense, 100, false, next())
	mustSet(t, dense, 90000, false, next()) // length beyond the last set bit
	if err := db.EndOp(ctx, op); err != nil {
		t.Fatal(err)
	}
	return op
}

func liveDigest(t testing.TB, db *DB) string {
	t.Helper()
	s, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d, err := s.Digest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func exportT(t testing.TB, db *DB, op uint64) []byte {
	t.Helper()
	s, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var buf bytes.Buffer
	n, err := s.Export(ctx, &buf, op)
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("Export reported %d bytes, wrote %d", n, buf.Len())
	}
	return buf.Bytes()
}

// stringDiff shows where two long strings first differ.
func stringDiff(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	cut := func(s string) string {
		lo, hi := max(0, i-80), min(len(s), i+80)
		return s[lo:hi]
	}
	return fmt.Sprintf("at byte %d (lengths %d, %d):\n got  ...%q...\n want ...%q...", i, len(got), len(want), cut(got), cut(want))
}

// withoutWatermark drops the "wm=N" field of engineState.
func withoutWatermark(s string) string {
	_, rest, _ := strings.Cut(s, " ")
	return rest
}

func TestExportInstallRoundTrip(t *testing.T) {
	src := openT(t, t.TempDir(), nil)
	defer closeT(t, src)
	last := fillExportEngine(t, src)
	// A bitslice's length rounds up to whole words when flushed: compare
	// flushed engines.
	mustFlush(t, src)
	want := engineState(t, src)
	wantDigest := liveDigest(t, src)

	snap, err := src.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	// Writes after the snapshot are not part of it.
	mustPut(t, mustKV(t, src, "users"), "later", "x", last+1)
	mustSet(t, mustBits(t, src, "sparse"), 5, true, last+2)
	mustKV(t, src, "later")
	if liveDigest(t, src) == wantDigest {
		t.Fatal("digest unchanged by later writes")
	}
	var stream bytes.Buffer
	if _, err := snap.Export(ctx, &stream, last); err != nil {
		t.Fatal(err)
	}

	dir := filepath.Join(t.TempDir(), "installed")
	op, err := Install(ctx, dir, bytes.NewReader(stream.Bytes()), nil)
	if err != nil {
		t.Fatalf("Install: %v", err)
	}
	if op != last {
		t.Fatalf("Install returned op %d, want %d", op, last)
	}
	got, err := digest.Dir(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != wantDigest {
		t.Fatalf("digest of the installed files %s, want %s", got, wantDigest)
	}
	dst := openT(t, dir, nil)
	defer closeT(t, dst)
	if wm := dst.Watermark(); wm != last {
		t.Fatalf("installed engine's watermark %d, want %d", wm, last)
	}
	if g := engineState(t, dst); withoutWatermark(g) != withoutWatermark(want) {
		t.Fatalf("installed engine differs: %s", stringDiff(withoutWatermark(g), withoutWatermark(want)))
	}
	if d := liveDigest(t, dst); d != wantDigest {
		t.Fatalf("installed engine's digest %s, want %s", d, wantDigest)
	}
	// The watermark is a receipt: the installed engine goes on from it.
	mustPut(t, mustKV(t, dst, "users"), "next", "y", last+1)
	if err := dst.EndOp(ctx, last+1); err != nil {
		t.Fatal(err)
	}
	mustFlush(t, dst)
	if wm := dst.Watermark(); wm != last+1 {
		t.Fatalf("watermark %d after op %d, want %d", wm, last+1, last+1)
	}
}

func TestExportEmptyEngine(t *testing.T) {
	src := openT(t, t.TempDir(), nil)
	defer closeT(t, src)
	stream := exportT(t, src, 0)
	dir := filepath.Join(t.TempDir(), "e")
	op, err := Install(ctx, dir, bytes.NewReader(stream), nil)
	if err != nil || op != 0 {
		t.Fatalf("Install = %d, %v", op, err)
	}
	dst := openT(t, dir, nil)
	defer closeT(t, dst)
	if g, w := liveDigest(t, dst), liveDigest(t, src); g != w {
		t.Fatalf("digest %s, want %s", g, w)
	}
	if n := len(dst.Keyspaces()) + len(dst.Bitslices()); n != 0 {
		t.Fatalf("installed empty engine has %d keyspaces and bitslices", n)
	}
}

// frameRecorder records the size of every write Export makes.
type frameRecorder struct {
	bytes.Buffer
	maxWrite int
}

func (f *frameRecorder) Write(p []byte) (int, error) {
	f.maxWrite = max(f.maxWrite, len(p))
	return f.Buffer.Write(p)
}

// Export streams: no write is larger than a frame (or the one record that
// does not fit in one), however large the engine.
func TestExportStreams(t *testing.T) {
	db := openT(t, t.TempDir(), nil)
	defer closeT(t, db)
	k := mustKV(t, db, "k")
	b := db.NewBatch()
	for i := range 20000 {
		b.Put(k, fmt.Appendf(nil, "key%08d", i), bytes.Repeat([]byte{byte(i)}, 100))
	}
	if err := db.Apply(ctx, b, 1); err != nil {
		t.Fatal(err)
	}
	bits := mustBits(t, db, "b")
	if err := bits.SetRange(ctx, 0, 1<<22, true, 2); err != nil {
		t.Fatal(err)
	}
	s, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var w frameRecorder
	if _, err := s.Export(ctx, &w, 2); err != nil {
		t.Fatal(err)
	}
	if w.Len() < 2<<20 {
		t.Fatalf("stream of %d bytes, want more than 2 MiB", w.Len())
	}
	if w.maxWrite > snapstream.FrameSize+snapstream.MaxWordsRecord*8+64 {
		t.Fatalf("a write of %d bytes: Export buffers more than a frame", w.maxWrite)
	}
}

func TestExportClosed(t *testing.T) {
	db := openT(t, t.TempDir(), nil)
	mustPut(t, mustKV(t, db, "k"), "a", "1", 1)
	mustSet(t, mustBits(t, db, "b"), 1, true, 2)
	s, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := s.Export(ctx, io.Discard, 2); !errors.Is(err, ErrClosed) {
		t.Fatalf("Export of a closed snapshot: %v, want ErrClosed", err)
	}
	if _, err := s.Digest(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Digest of a closed snapshot: %v, want ErrClosed", err)
	}
	s2, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s2.Export(cctx, io.Discard, 2); !errors.Is(err, context.Canceled) {
		t.Fatalf("Export with a cancelled context: %v", err)
	}
	closeT(t, db) // closes s2
	if _, err := s2.Export(ctx, io.Discard, 2); !errors.Is(err, ErrClosed) {
		t.Fatalf("Export after the engine closed: %v, want ErrClosed", err)
	}
}

// errWriter fails after n bytes.
type errWriter struct{ n int }

var errDisk = errors.New("disk full")

func (w *errWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		return 0, errDisk
	}
	w.n -= len(p)
	return len(p), nil
}

func TestExportWriteError(t *testing.T) {
	db := openT(t, t.TempDir(), nil)
	defer closeT(t, db)
	fillExportEngine(t, db)
	s, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, n := range []int{0, 5, 100, 70000} {
		if _, err := s.Export(ctx, &errWriter{n: n}, 1); !errors.Is(err, errDisk) {
			t.Fatalf("Export to a writer failing after %d bytes: %v", n, err)
		}
	}
}

// Digest depends on content only: the same content reached by different
// histories, pending or flushed, has one digest; any difference changes it.
func TestDigestContent(t *testing.T) {
	a := openT(t, t.TempDir(), nil)
	defer closeT(t, a)
	b := openT(t, t.TempDir(), nil)
	defer closeT(t, b)
	empty := liveDigest(t, a)
	if liveDigest(t, b) != empty {
		t.Fatal("two empty engines differ")
	}
	ka, kb := mustKV(t, a, "k"), mustKV(t, b, "k")
	if liveDigest(t, a) == empty {
		t.Fatal("an empty keyspace does not change the digest")
	}
	mustPut(t, ka, "x", "1", 1)
	mustPut(t, ka, "gone", "1", 2)
	mustFlush(t, a)
	if err := ka.Delete(ctx, []byte("gone"), 3); err != nil {
		t.Fatal(err)
	}
	mustPut(t, kb, "x", "1", 1)
	mustSet(t, mustBits(t, a, "s"), 70, true, 4)
	mustSet(t, mustBits(t, a, "s"), 70000, false, 5) // length only
	mustSet(t, mustBits(t, b, "s"), 70, true, 2)
	if da, db := liveDigest(t, a), liveDigest(t, b); da != db {
		t.Fatalf("same content, different digests %s %s", da, db)
	}
	// In op order (a map's random order made a later op stale).
	for _, c := range []struct {
		name   string
		change func()
	}{
		{"value", func() { mustPut(t, kb, "x", "2", 10) }},
		{"key", func() { mustPut(t, kb, "y", "1", 11) }},
		{"bit", func() { mustSet(t, mustBits(t, b, "s"), 71, true, 12) }},
		{"bitname", func() { mustBits(t, b, "t") }},
		{"ksname", func() { mustKV(t, b, "k2") }},
	} {
		before := liveDigest(t, b)
		c.change()
		if liveDigest(t, b) == before {
			t.Fatalf("change %s kept the digest", c.name)
		}
	}
	// Offline: the digest of a closed engine's files is its live digest.
	dir := t.TempDir()
	c := openT(t, dir, nil)
	fillExportEngine(t, c)
	want := liveDigest(t, c)
	closeT(t, c)
	got, err := digest.Dir(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != want {
		t.Fatalf("digest.Dir %s, live digest %s", got, want)
	}
}

// frame builds one stream frame around payload.
func frame(payload []byte) []byte {
	out := binary.LittleEndian.AppendUint32(nil, uint32(len(payload)))
	out = binary.LittleEndian.AppendUint64(out, xxh3.Hash(payload))
	return append(out, payload...)
}

func header(op uint64) []byte {
	p := append([]byte(snapstream.Magic), 1, 0, 0, 0)
	return binary.LittleEndian.AppendUint64(p, op)
}

func rec(tag byte, fields ...any) []byte {
	p := []byte{tag}
	for _, f := range fields {
		switch f := f.(type) {
		case string:
			p = binary.AppendUvarint(p, uint64(len(f)))
			p = append(p, f...)
		case int:
			p = binary.AppendUvarint(p, uint64(f))
		case uint64: // a raw word
			p = binary.LittleEndian.AppendUint64(p, f)
		}
	}
	return p
}

// trailerFor returns the trailer that matches content fed to d.
func trailerFor(t testing.TB, feed func(d *digest.Hasher)) []byte {
	t.Helper()
	d := digest.New()
	feed(d)
	ks, pairs, bs, ones := d.Counts()
	sum, err := d.Sum()
	if err != nil {
		t.Fatal(err)
	}
	p := []byte{snapstream.RecTrailer}
	for _, n := range []uint64{ks, pairs, bs, ones} {
		p = binary.AppendUvarint(p, n)
	}
	return append(p, sum[:]...)
}

func installErr(t *testing.T, stream []byte, opts *Options) (string, error) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "i")
	_, err := Install(ctx, dir, bytes.NewReader(stream), opts)
	if err != nil {
		if _, serr := os.Stat(dir); !errors.Is(serr, fs.ErrNotExist) {
			t.Fatalf("failed Install left %s behind (%v)", dir, serr)
		}
	}
	return dir, err
}

// Every prefix of a valid stream, and every single corrupted byte, is
// refused as a corrupt stream, and leaves nothing behind.
func TestInstallTruncatedAndCorrupt(t *testing.T) {
	db := openT(t, t.TempDir(), nil)
	k := mustKV(t, db, "k")
	mustPut(t, k, "a", "1", 1)
	mustPut(t, k, "b", "2", 2)
	mustSet(t, mustBits(t, db, "s"), 3, true, 3)
	stream := exportT(t, db, 3)
	closeT(t, db)
	if _, err := installErr(t, stream, nil); err != nil {
		t.Fatalf("the stream itself: %v", err)
	}
	step := 1
	if testing.Short() {
		step = 7
	}
	for n := 0; n < len(stream); n += step {
		_, err := installErr(t, stream[:n], nil)
		if !errors.Is(err, ErrBadStream) || !errors.Is(err, ErrCorrupt) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("stream cut at %d of %d bytes: %v", n, len(stream), err)
		}
	}
	for i := 0; i < len(stream); i += step {
		bad := bytes.Clone(stream)
		bad[i] ^= 0x40
		if _, err := installErr(t, bad, nil); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d flipped: %v, want ErrCorrupt", i, err)
		}
	}
	if _, err := installErr(t, append(bytes.Clone(stream), 0), nil); !errors.Is(err, ErrBadStream) {
		t.Fatalf("a byte after the trailer: %v", err)
	}
}

// Streams whose frames are intact but whose content is wrong.
func TestInstallBadContent(t *testing.T) {
	okKS := func(d *digest.Hasher) { d.Keyspace("k"); d.Pair([]byte("a"), []byte("1")) }
	good := trailerFor(t, okKS)
	cases := []struct {
		name   string
		frames [][]byte
		want   error
	}{
		{"empty stream", nil, io.ErrUnexpectedEOF},
		{"bad magic", [][]byte{append([]byte("KVBUFSNX"), header(1)[8:]...)}, ErrBadStream},
		{"short header", [][]byte{header(1)[:12]}, ErrBadStream},
		{"newer version", [][]byte{append(append([]byte(snapstream.Magic), 2, 0, 0, 0), header(1)[12:]...)}, ErrBadStream},
		{"no trailer", [][]byte{header(1), rec(snapstream.RecKeyspace, "k")}, io.ErrUnexpectedEOF},
		{"pair outside a keyspace", [][]byte{header(1), rec(snapstream.RecPair, "a", "1"), good}, ErrBadStream},
		{"keys out of order", [][]byte{header(1), append(rec(snapstream.RecKeyspace, "k"), append(rec(snapstream.RecPair, "b", "1"), rec(snapstream.RecPair, "a", "1")...)...), good}, ErrBadStream},
		{"duplicate key", [][]byte{header(1), append(rec(snapstream.RecKeyspace, "k"), append(rec(snapstream.RecPair, "a", "1"), rec(snapstream.RecPair, "a", "1")...)...), good}, ErrBadStream},
		{"keyspaces out of order", [][]byte{header(1), append(rec(snapstream.RecKeyspace, "z"), rec(snapstream.RecKeyspace, "a")...), good}, ErrBadStream},
		{"keyspace after a bitslice", [][]byte{header(1), append(rec(snapstream.RecBitslice, "s", 10), rec(snapstream.RecKeyspace, "k")...), good}, ErrBadStream},
		{"pair after a bitslice", [][]byte{header(1), append(rec(snapstream.RecKeyspace, "k"), append(rec(snapstream.RecBitslice, "s", 10), rec(snapstream.RecPair, "a", "1")...)...), good}, ErrBadStream},
		{"words outside a bitslice", [][]byte{header(1), rec(snapstream.RecWords, 0, 1, uint64(1)), good}, ErrBadStream},
		{"words past the length", [][]byte{header(1), append(rec(snapstream.RecBitslice, "s", 10), rec(snapstream.RecWords, 0, 1, uint64(1<<12))...), good}, ErrBadStream},
		{"words far past the length", [][]byte{header(1), append(rec(snapstream.RecBitslice, "s", 10), rec(snapstream.RecWords, 1<<40, 1, uint64(1))...), good}, ErrBadStream},
		{"words out of order", [][]byte{header(1), append(rec(snapstream.RecBitslice, "s", 1000), append(rec(snapstream.RecWords, 5, 1, uint64(1)), rec(snapstream.RecWords, 2, 1, uint64(1))...)...), good}, ErrBadStream},
		{"word count past the frame", [][]byte{header(1), append(rec(snapstream.RecBitslice, "s", 1000), rec(snapstream.RecWords, 0, 3, uint64(1))...), good}, ErrBadStream},
		{"name past the frame", [][]byte{header(1), []byte{snapstream.RecKeyspace, 40, 'k'}, good}, ErrBadStream},
		{"bad uvarint", [][]byte{header(1), []byte{snapstream.RecKeyspace, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, good}, ErrBadStream},
		{"unknown record", [][]byte{header(1), []byte{0x7e}, good}, ErrBadStream},
		{"bad keyspace name", [][]byte{header(1), rec(snapstream.RecKeyspace, "no/slash"), good}, ErrBadName},
		{"counts differ", [][]byte{header(1), rec(snapstream.RecKeyspace, "k"), good}, ErrBadStream},
		{"digest differs", [][]byte{header(1), append(rec(snapstream.RecKeyspace, "k"), rec(snapstream.RecPair, "a", "2")...), good}, ErrBadStream},
		{"short trailer", [][]byte{header(1), append(rec(snapstream.RecKeyspace, "k"), rec(snapstream.RecPair, "a", "1")...), good[:len(good)-3]}, ErrBadStream},
		{"frame after the trailer", [][]byte{header(1), append(rec(snapstream.RecKeyspace, "k"), rec(snapstream.RecPair, "a", "1")...), good, rec(snapstream.RecKeyspace, "m")}, ErrBadStream},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var s []byte
			for _, f := range c.frames {
				s = append(s, frame(f)...)
			}
			if _, err := installErr(t, s, nil); !errors.Is(err, c.want) {
				t.Fatalf("Install: %v, want %v", err, c.want)
			}
		})
	}
	// The good case the bad ones are variations of.
	s := append(frame(header(1)), frame(append(rec(snapstream.RecKeyspace, "k"), rec(snapstream.RecPair, "a", "1")...))...)
	s = append(s, frame(good)...)
	if _, err := installErr(t, s, nil); err != nil {
		t.Fatalf("the good stream: %v", err)
	}
}

// A frame length beyond what the engine can hold is refused before it is
// read (no allocation of the claimed size); a value beyond the installing
// engine's MaxValueSize is the engine's error.
func TestInstallOversize(t *testing.T) {
	huge := binary.LittleEndian.AppendUint32(nil, 0xffffffff)
	huge = append(huge, make([]byte, 8)...)
	s := append(frame(header(1)), huge...)
	if _, err := installErr(t, s, nil); !errors.Is(err, ErrBadStream) {
		t.Fatalf("a 4 GiB frame: %v", err)
	}
	db := openT(t, t.TempDir(), nil)
	mustPut(t, mustKV(t, db, "k"), "a", strings.Repeat("v", 5000), 1)
	stream := exportT(t, db, 1)
	closeT(t, db)
	if _, err := installErr(t, stream, &Options{MaxValueSize: 4096}); !errors.Is(err, ErrValueTooLarge) {
		t.Fatalf("a value above MaxValueSize: %v", err)
	}
}

func TestInstallDirNotEmpty(t *testing.T) {
	db := openT(t, t.TempDir(), nil)
	stream := exportT(t, db, 0)
	closeT(t, db)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "keep"), []byte("data"))
	before := hashTree(t, dir)
	if _, err := Install(ctx, dir, bytes.NewReader(stream), nil); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Install into a non-empty directory: %v, want fs.ErrExist", err)
	}
	if hashTree(t, dir) != before {
		t.Fatal("a refused Install changed the directory")
	}
	// An existing empty directory is fine.
	empty := t.TempDir()
	if _, err := Install(ctx, empty, bytes.NewReader(stream), nil); err != nil {
		t.Fatalf("Install into an empty directory: %v", err)
	}
}

// errReader returns its data, then err.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF {
		return n, e.err
	}
	return n, err
}

func TestInstallReadError(t *testing.T) {
	db := openT(t, t.TempDir(), nil)
	fillExportEngine(t, db)
	stream := exportT(t, db, 1)
	closeT(t, db)
	broken := errors.New("connection reset")
	_, err := installErr(t, nil, nil)
	if err == nil {
		t.Fatal("an empty stream installed")
	}
	dir := filepath.Join(t.TempDir(), "i")
	_, err = Install(ctx, dir, &errReader{r: bytes.NewReader(stream[:len(stream)/2]), err: broken}, nil)
	if !errors.Is(err, broken) {
		t.Fatalf("Install over a failing reader: %v", err)
	}
	if _, serr := os.Stat(dir); !errors.Is(serr, fs.ErrNotExist) {
		t.Fatal("failed Install left its directory")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Install(cctx, filepath.Join(t.TempDir(), "c"), bytes.NewReader(stream), nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Install with a cancelled context: %v", err)
	}
}
