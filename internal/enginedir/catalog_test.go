package enginedir

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// catalogEqual compares catalogs by content (a nil map or slice equals an
// empty one).
func catalogEqual(a, b Catalog) bool {
	return maps.Equal(a.Keyspaces, b.Keyspaces) && a.NextID == b.NextID && slices.Equal(a.Dropped, b.Dropped)
}

func mustEncode(t testing.TB, c Catalog) string {
	t.Helper()
	b, err := c.Encode()
	if err != nil {
		t.Fatalf("Encode(%+v): %v", c, err)
	}
	return string(b)
}

func mustParse(t testing.TB, s string) Catalog {
	t.Helper()
	c, err := ParseCatalog([]byte(s))
	if err != nil {
		t.Fatalf("ParseCatalog(%q): %v", s, err)
	}
	return c
}

// TestCatalogOldFormat: catalogs as every earlier version wrote them
// ("name id" lines, sorted by name, ids from 1) read as before.
func TestCatalogOldFormat(t *testing.T) {
	cases := []struct {
		in   string
		want map[string]uint32
		next uint32
	}{
		{"", map[string]uint32{}, 1},
		{"\n", map[string]uint32{}, 1},
		{"k 1\n", map[string]uint32{"k": 1}, 2},
		{"j 7\nk 1\n", map[string]uint32{"j": 7, "k": 1}, 8},
		{"k 1\nj 7", map[string]uint32{"j": 7, "k": 1}, 8}, // unsorted, no final newline
		{"\n\nk 1\n\nj 2\n\n", map[string]uint32{"j": 2, "k": 1}, 3},
		{"k 007\n", map[string]uint32{"k": 7}, 8},
		{"users 1\nA.b_c-9 2\n", map[string]uint32{"users": 1, "A.b_c-9": 2}, 3},
		{strings.Repeat("x", MaxNameLen) + " 4294967294\n", map[string]uint32{strings.Repeat("x", MaxNameLen): MaxKeyspaceID}, math.MaxUint32},
	}
	for _, tc := range cases {
		c := mustParse(t, tc.in)
		want := Catalog{Keyspaces: tc.want, NextID: tc.next}
		if !catalogEqual(c, want) || c.Keyspaces == nil {
			t.Errorf("ParseCatalog(%q) = %+v, want %+v", tc.in, c, want)
		}
		if _, err := legacyParse([]byte(tc.in)); err != nil {
			t.Errorf("the old parser refuses %q: %v", tc.in, err)
		}
	}
	// A catalog that never had a drop encodes exactly as the old engine
	// wrote it.
	if got := mustEncode(t, mustParse(t, "k 1\nj 2\n")); got != "j 2\nk 1\n" {
		t.Errorf("Encode = %q", got)
	}
}

func TestCatalogMalformed(t *testing.T) {
	bad := []string{
		"k",            // no id
		"k ",           // empty id
		"k x",          // not a number
		"k -1",         // negative
		"k +1",         // sign
		"k 0",          // id 0
		"k 4294967295", // no successor prefix
		"k 4294967296", // past 32 bits
		"k 1 ",         // trailing space
		"k  1",         // two spaces
		" k 1",         // leading space
		"k\t1",         // tab
		"k 1\r\n",      // CRLF
		"k 0x1",        // hex
		"k 1\nk 2",     // name twice
		"k 1\nj 1",     // id twice
		"a b 1",        // space in name
		". 1",          // dot
		".. 1",         // dot dot
		"é 1",          // non-ASCII
		strings.Repeat("x", MaxNameLen+1) + " 1",
		"@next 0",                // next id 0
		"k 1\n@next 1",           // next not above ids
		"@next 5\nk 5",           // next not above ids
		"@next 5\n@next 6",       // next twice
		"@next",                  // no id
		"@dropped 0",             // id 0
		"@dropped 1\n@dropped 1", // dropped twice
		"@dropped 1\nk 1",        // dropped and live
		"k 1\n@dropped 1",        // live and dropped
		"@dropped 4294967295",
		"@future 1", // unknown directive
		"@ 1",       // empty directive
	}
	for _, in := range bad {
		c, err := ParseCatalog([]byte(in))
		if !errors.Is(err, kverr.ErrCorruptDir) {
			t.Errorf("ParseCatalog(%q) = %+v, %v; want ErrCorrupt", in, c, err)
		}
	}
}

func TestCatalogNewDirectives(t *testing.T) {
	c := mustParse(t, "k 1\n@dropped 3\n@dropped 2\n@next 9\n")
	want := Catalog{Keyspaces: map[string]uint32{"k": 1}, NextID: 9, Dropped: []uint32{2, 3}}
	if !catalogEqual(c, want) {
		t.Fatalf("ParseCatalog = %+v, want %+v", c, want)
	}
	if got := mustEncode(t, c); got != "k 1\n@dropped 2\n@dropped 3\n@next 9\n" {
		t.Fatalf("Encode = %q", got)
	}
	// The default next id counts dropped ids too.
	c = mustParse(t, "k 1\n@dropped 5\n")
	if c.NextID != 6 {
		t.Fatalf("next id %d, want 6", c.NextID)
	}
	// "@next" equal to the default is accepted and not written.
	if got := mustEncode(t, mustParse(t, "k 1\n@next 2\n")); got != "k 1\n" {
		t.Fatalf("Encode = %q", got)
	}
	// Every "@" catalog is refused by the old parser: never misread.
	for _, in := range []string{"@next 9\n", "k 1\n@dropped 2\n"} {
		if _, err := legacyParse([]byte(in)); err == nil {
			t.Errorf("the old parser accepts %q", in)
		}
	}
}

// TestCatalogIDsNeverReused walks keyspaces through add, drop and purge,
// persisting (Encode, ParseCatalog) after each step: a purged id stays
// used.
func TestCatalogIDsNeverReused(t *testing.T) {
	c := NewCatalog()
	if got := mustEncode(t, c); got != "" {
		t.Fatalf("empty catalog encodes as %q", got)
	}
	persist := func() {
		t.Helper()
		enc := mustEncode(t, c)
		back := mustParse(t, enc)
		if !catalogEqual(back, c) {
			t.Fatalf("round trip of %+v via %q gave %+v", c, enc, back)
		}
		c = back
	}
	used := map[uint32]bool{}
	add := func(name string) {
		t.Helper()
		id, err := c.Add(name)
		if err != nil {
			t.Fatal(err)
		}
		if used[id] {
			t.Fatalf("id %d reused for %q", id, name)
		}
		used[id] = true
		persist()
	}
	add("a")
	add("b")
	add("c")
	if id, ok := c.Drop("c"); !ok || id != 3 {
		t.Fatalf("Drop(c) = %d, %v", id, ok)
	}
	persist()
	if got := mustEncode(t, c); got != "a 1\nb 2\n@dropped 3\n" {
		t.Fatalf("after a drop: %q", got)
	}
	if !c.Purge(3) || c.Purge(3) {
		t.Fatal("Purge")
	}
	persist()
	if got := mustEncode(t, c); got != "a 1\nb 2\n@next 4\n" {
		t.Fatalf("after a purge: %q", got)
	}
	add("c") // the same name, a new id
	if c.Keyspaces["c"] != 4 {
		t.Fatalf("re-created keyspace got id %d", c.Keyspaces["c"])
	}
	c.Drop("a")
	c.Drop("c")
	c.Drop("b")
	persist()
	if !slices.Equal(c.Dropped, []uint32{1, 2, 4}) {
		t.Fatalf("dropped %v", c.Dropped)
	}
	for _, id := range []uint32{4, 1, 2} {
		c.Purge(id)
		persist()
	}
	if got := mustEncode(t, c); got != "@next 5\n" {
		t.Fatalf("everything purged: %q", got)
	}
	add("d")
	if c.Keyspaces["d"] != 5 {
		t.Fatalf("id %d after everything was purged", c.Keyspaces["d"])
	}
	if _, ok := c.Drop("nope"); ok {
		t.Fatal("Drop of a missing keyspace")
	}
}

func TestCatalogAddErrors(t *testing.T) {
	c := NewCatalog()
	if _, err := c.Add("bad name"); !errors.Is(err, kverr.ErrBadName) {
		t.Fatalf("Add(bad name): %v", err)
	}
	if _, err := c.Add("k"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Add("k"); err == nil {
		t.Fatal("Add of an existing keyspace")
	}
	c.NextID = MaxKeyspaceID
	if id, err := c.Add("last"); err != nil || id != MaxKeyspaceID {
		t.Fatalf("Add of the last id: %d, %v", id, err)
	}
	if _, err := c.Add("more"); !errors.Is(err, errIDsExhausted) {
		t.Fatalf("Add with no id left: %v", err)
	}
	persisted := mustParse(t, mustEncode(t, c))
	if !catalogEqual(persisted, c) {
		t.Fatalf("round trip %+v -> %+v", c, persisted)
	}
	var zero Catalog // a zero Catalog has no next id
	if _, err := zero.Add("k"); !errors.Is(err, errIDsExhausted) {
		t.Fatalf("Add on a zero Catalog: %v", err)
	}
	nilMap := Catalog{NextID: 1}
	if id, err := nilMap.Add("k"); err != nil || id != 1 {
		t.Fatalf("Add on a nil map: %d, %v", id, err)
	}
}

func TestCatalogValidate(t *testing.T) {
	bad := []Catalog{
		{Keyspaces: map[string]uint32{"bad name": 1}, NextID: 2},
		{Keyspaces: map[string]uint32{"k": 0}, NextID: 2},
		{Keyspaces: map[string]uint32{"k": math.MaxUint32}, NextID: math.MaxUint32},
		{Keyspaces: map[string]uint32{"k": 1, "j": 1}, NextID: 2},
		{Keyspaces: map[string]uint32{"k": 1}, Dropped: []uint32{1}, NextID: 2},
		{Dropped: []uint32{3, 2}, NextID: 4},
		{Dropped: []uint32{0}, NextID: 4},
		{Keyspaces: map[string]uint32{"k": 5}, NextID: 5},
		{Dropped: []uint32{5}, NextID: 3},
		{}, // NextID 0
	}
	for _, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil", c)
		}
		if b, err := c.Encode(); err == nil {
			t.Errorf("Encode(%+v) = %q, want an error", c, b)
		}
	}
	if err := NewCatalog().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestCatalogClone(t *testing.T) {
	c := mustParse(t, "k 1\n@dropped 2\n")
	d := c.Clone()
	d.Add("j")
	d.Drop("k")
	d.Purge(2)
	if !catalogEqual(c, mustParse(t, "k 1\n@dropped 2\n")) {
		t.Fatalf("changing a clone changed the original: %+v", c)
	}
	if names := c.Names(); !slices.Equal(names, []string{"k"}) {
		t.Fatalf("Names = %q", names)
	}
}

// legacyParse is the parser of earlier versions (kvbuf's loadCatalog),
// kept as the oracle for FuzzParseCatalog.
func legacyParse(b []byte) (map[string]uint32, error) {
	m := map[string]uint32{}
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line == "" {
			continue
		}
		name, idText, ok := strings.Cut(line, " ")
		id, perr := strconv.ParseUint(idText, 10, 32)
		if !ok || perr != nil || id == 0 || CheckName("keyspace", name) != nil {
			return nil, fmt.Errorf("line %q", line)
		}
		if _, dup := m[name]; dup {
			return nil, fmt.Errorf("%q twice", name)
		}
		m[name] = uint32(id)
	}
	return m, nil
}

// FuzzParseCatalog checks ParseCatalog against the old parser and its own
// encoder: it never panics; what it refuses is kverr.ErrCorruptDir; what it accepts
// is valid and survives Encode and ParseCatalog unchanged, and Encode is
// canonical; it reads every catalog the old parser read, except those with
// an id listed twice or the id 0xffffffff (which the old engine never
// wrote: it gave ids from 1, one at a time), and reads them the same way;
// and it accepts nothing the old parser refused but "@" lines.
func FuzzParseCatalog(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseCatalog(b)
		old, oldErr := legacyParse(b)
		if err != nil {
			if !errors.Is(err, kverr.ErrCorruptDir) {
				t.Fatalf("ParseCatalog(%q): %v does not wrap ErrCorrupt", b, err)
			}
			if oldErr == nil && !hasDupIDs(old) && !slices.Contains(slices.Collect(maps.Values(old)), math.MaxUint32) {
				t.Fatalf("ParseCatalog refuses %q (%v), which the old parser read", b, err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("ParseCatalog(%q) = %+v, which is not valid: %v", b, c, err)
		}
		enc, err := c.Encode()
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseCatalog(enc)
		if err != nil || !catalogEqual(back, c) {
			t.Fatalf("round trip of %q via %q: %+v, %v; want %+v", b, enc, back, err, c)
		}
		if enc2, _ := back.Encode(); string(enc2) != string(enc) {
			t.Fatalf("Encode is not canonical: %q then %q", enc, enc2)
		}
		hasDirective := strings.HasPrefix(string(b), "@") || strings.Contains(string(b), "\n@")
		switch {
		case oldErr == nil:
			if !maps.Equal(old, c.Keyspaces) {
				t.Fatalf("%q: keyspaces %v, the old parser read %v", b, c.Keyspaces, old)
			}
		case !hasDirective:
			t.Fatalf("ParseCatalog accepts %q, which the old parser refused (%v)", b, oldErr)
		}
		if !hasDirective && len(c.Dropped) != 0 {
			t.Fatalf("%q: dropped ids without a directive", b)
		}
	})
}

func hasDupIDs(m map[string]uint32) bool {
	seen := map[uint32]bool{}
	for _, id := range m {
		if seen[id] {
			return true
		}
		seen[id] = true
	}
	return false
}
