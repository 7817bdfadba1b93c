package enginedir

import (
	"errors"
	"strings"
	"testing"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

func TestBitsCatalogRoundTrip(t *testing.T) {
	c := BitsCatalog{"b": {Gen: 7, Len: 100}, "a": {Gen: 0, Len: 0}, "old": {Len: 64, V1: true}}
	enc := c.Encode()
	if want := "a 0 0\nb 7 100\nold 0 64 v1\n"; string(enc) != want {
		t.Fatalf("Encode = %q, want %q", enc, want)
	}
	got, err := ParseBitsCatalog(enc)
	if err != nil || len(got) != 3 || got["b"] != c["b"] || got["old"] != c["old"] {
		t.Fatalf("Parse(Encode) = %v, %v", got, err)
	}
	if got, err := ParseBitsCatalog(nil); err != nil || len(got) != 0 {
		t.Fatalf("Parse(nil) = %v, %v", got, err)
	}
	for _, bad := range []string{"a 1\n", "a 1 2 3\n", "a x 2\n", "a 1 -2\n", "bad name 1 2\n", "a 1 2\na 3 4\n", ".. 1 2\n", "a 1 2 v2\n"} {
		if _, err := ParseBitsCatalog([]byte(bad)); !errors.Is(err, kverr.ErrCorruptDir) {
			t.Errorf("Parse(%q) = %v, want ErrCorrupt", bad, err)
		}
	}
	if id, err := ParseEngineID(EncodeEngineID(0xabc)); id != 0xabc || err != nil {
		t.Fatalf("engine id round trip: %x, %v", id, err)
	}
	for _, bad := range [][]byte{nil, {1, 2}, make([]byte, 8), make([]byte, 9)} {
		if _, err := ParseEngineID(bad); !errors.Is(err, kverr.ErrCorruptDir) {
			t.Errorf("ParseEngineID(%x) = %v", bad, err)
		}
	}
}

func TestCheckBitsFile(t *testing.T) {
	const id = 0x42
	e := BitsEntry{Gen: 5, Len: 1000}
	cases := []struct {
		name string
		h    BitsHeader
		e    BitsEntry
		ok   bool
		want string // "" = accepted
	}{
		{"same", BitsHeader{2, id, 5, 1000}, e, true, ""},
		{"newer (a flush the store did not record)", BitsHeader{2, id, 6, 2000}, e, true, ""},
		{"grown, generation unchanged (a Grow before a crash)", BitsHeader{2, id, 5, 2000}, e, true, ""},
		{"older copy", BitsHeader{2, id, 4, 1000}, e, true, "an older copy"},
		{"shorter", BitsHeader{2, id, 5, 999}, e, true, "bits long"},
		{"foreign", BitsHeader{2, 0x43, 9, 5000}, e, true, "belongs to another engine"},
		{"standalone", BitsHeader{2, 0, 9, 5000}, e, true, "belongs to another engine"},
		{"unrecorded own", BitsHeader{2, id, 0, 0}, BitsEntry{}, false, ""},
		{"unrecorded foreign", BitsHeader{2, 7, 0, 0}, BitsEntry{}, false, "belongs to another engine"},
		{"format 1 recorded as such", BitsHeader{1, 0, 0, 64}, BitsEntry{Len: 64, V1: true}, true, ""},
		{"format 1, recorded as format 2", BitsHeader{1, 0, 0, 64}, BitsEntry{Len: 64}, true, "format-1 file"},
		{"format 1, unrecorded", BitsHeader{1, 0, 0, 64}, BitsEntry{}, false, "format-1 file"},
		{"stamped since recorded as format 1", BitsHeader{2, id, 0, 64}, BitsEntry{Len: 64, V1: true}, true, ""},
	}
	for _, c := range cases {
		err := CheckBitsFile("x", c.h, c.e, c.ok, id)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want accepted", c.name, err)
		case c.want != "" && (!errors.Is(err, kverr.ErrCorruptDir) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want ErrCorrupt saying %q", c.name, err, c.want)
		}
	}
}
