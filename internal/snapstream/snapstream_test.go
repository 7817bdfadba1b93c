package snapstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"go.uber.org/goleak"

	"github.com/kvbuf/kvbuf/internal/digest"
	"github.com/kvbuf/kvbuf/internal/kverr"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a Sink that logs what it receives.
type recorder struct{ log []string }

func (r *recorder) Keyspace(_ context.Context, name string) error {
	r.log = append(r.log, "ks "+name)
	return nil
}

func (r *recorder) Pair(_ context.Context, k, v []byte) error {
	r.log = append(r.log, fmt.Sprintf("pair %s=%s", k, v))
	return nil
}

func (r *recorder) Bitslice(_ context.Context, name string, n uint64) error {
	r.log = append(r.log, fmt.Sprintf("bits %s %d", name, n))
	return nil
}

func (r *recorder) SetBits(_ context.Context, i, run uint64) error {
	r.log = append(r.log, fmt.Sprintf("set %d+%d", i, run))
	return nil
}

func (r *recorder) EndBitslice(_ context.Context, n, hi uint64) error {
	r.log = append(r.log, fmt.Sprintf("end %d %d", n, hi))
	return nil
}

func (r *recorder) End(context.Context) error {
	r.log = append(r.log, "end")
	return nil
}

// encode writes a small stream of op 7.
func encode(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, 7)
	if err != nil {
		t.Fatal(err)
	}
	d := digest.New()
	step := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	d.Keyspace("a")
	step(w.Keyspace("a"))
	d.Pair([]byte("k1"), []byte("v1"))
	step(w.Pair([]byte("k1"), []byte("v1")))
	d.Bitslice("b")
	step(w.Bitslice("b", 200))
	d.Word(0, 0b1101)
	step(w.Word(0, 0b1101))
	d.Word(2, 1<<63)
	step(w.Word(2, 1<<63))
	step(w.Close(d))
	return buf.Bytes()
}

// TestRoundTrip: what a Writer encodes, Decode passes on whole and in
// order, with the op, runs of set bits and each bitslice's end.
func TestRoundTrip(t *testing.T) {
	var r recorder
	op, err := Decode(context.Background(), bytes.NewReader(encode(t)), 1<<20, &r)
	if err != nil || op != 7 {
		t.Fatalf("Decode = %d, %v", op, err)
	}
	want := []string{"ks a", "pair k1=v1", "bits b 200", "set 0+1", "set 2+2", "set 191+1", "end 200 192", "end"}
	if fmt.Sprint(r.log) != fmt.Sprint(want) {
		t.Fatalf("sink got %v, want %v", r.log, want)
	}
}

// TestDecodeRefusesDamage: every byte flipped, and every cut, is refused
// with ErrBadStream (and ErrCorrupt).
func TestDecodeRefusesDamage(t *testing.T) {
	good := encode(t)
	try := func(what string, p []byte) {
		t.Helper()
		_, err := Decode(context.Background(), bytes.NewReader(p), 1<<20, &recorder{})
		if !errors.Is(err, kverr.ErrBadStream) || !errors.Is(err, kverr.ErrCorrupt) {
			t.Fatalf("%s: Decode = %v, want ErrBadStream", what, err)
		}
	}
	for i := range good {
		p := bytes.Clone(good)
		p[i] ^= 0x40
		try(fmt.Sprintf("byte %d flipped", i), p)
		try(fmt.Sprintf("cut at %d", i), good[:i])
	}
	try("trailing byte", append(bytes.Clone(good), 0))
}
