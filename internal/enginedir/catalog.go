package enginedir

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

const (
	// CatalogMeta is the name of the storage meta entry holding the
	// keyspace catalog (see Catalog).
	CatalogMeta = "kvbuf/catalog"

	// HighestOpMeta is the name of the storage meta entry holding the
	// highest op number the engine had seen at its latest flush (8 bytes,
	// big-endian), so that Metrics.HighestOp survives a reopen.
	HighestOpMeta = "kvbuf/highest-op"

	// MaxKeyspaceID is the largest keyspace id. The id is the big-endian
	// key prefix of the keyspace's keys; 0xffffffff is never one, so every
	// prefix has a successor (the end of a keyspace's range).
	MaxKeyspaceID = math.MaxUint32 - 1

	directiveNext    = "@next"
	directiveDropped = "@dropped"
)

// Catalog is the keyspace catalog: the engine's keyspaces and their ids
// (each keyspace's keys are stored under its id as a 4-byte big-endian
// prefix). The package documentation gives its encoding.
//
// A valid catalog (Validate) has good, unique names; ids from 1 to
// MaxKeyspaceID, unique across Keyspaces and Dropped; and NextID above
// every id. Catalog holds a map: copy it with Clone before changing a copy
// that others may read.
type Catalog struct {
	// Keyspaces maps each live keyspace's name to its id.
	Keyspaces map[string]uint32
	// NextID is the id the next new keyspace gets. It only grows: ids are
	// never reused, so the stale keys of a dropped keyspace can never
	// surface in a new one.
	NextID uint32
	// Dropped lists, in increasing order, the ids of dropped keyspaces
	// whose keys may still be in the store, awaiting deletion.
	Dropped []uint32
}

// NewCatalog returns an empty catalog: no keyspaces, next id 1.
func NewCatalog() Catalog {
	return Catalog{Keyspaces: map[string]uint32{}, NextID: 1}
}

// ParseCatalog decodes a catalog. It reads catalogs written by every kvbuf
// version (lines "name id" only, the format from before drops existed) as
// well as Encode's output. Anything malformed is an error wrapping
// kverr.ErrCorruptDir: a bad line, name or id, an id of 0 or above MaxKeyspaceID, a
// name or an id listed twice, an unknown or repeated "@" directive, a
// "@next" not above every id.
func ParseCatalog(b []byte) (Catalog, error) {
	c := Catalog{Keyspaces: map[string]uint32{}}
	ids := map[uint32]bool{}
	var maxID uint32
	next, haveNext := uint32(0), false
	s := strings.TrimSuffix(string(b), "\n")
	for i, line := range strings.Split(s, "\n") {
		if line == "" {
			continue
		}
		bad := func(why string) (Catalog, error) {
			return Catalog{}, kverr.Errorf("keyspace catalog line %d %.80q: %s: %w", i+1, line, why, kverr.ErrCorruptDir)
		}
		key, arg, ok := strings.Cut(line, " ")
		if !ok {
			return bad("no space")
		}
		id64, err := strconv.ParseUint(arg, 10, 32)
		if err != nil {
			return bad("bad id")
		}
		id := uint32(id64)
		if key == directiveNext {
			if haveNext {
				return bad(directiveNext + " given twice")
			}
			if id == 0 {
				return bad("id 0")
			}
			next, haveNext = id, true
			continue
		}
		if id == 0 || id > MaxKeyspaceID {
			return bad("id out of range")
		}
		if ids[id] {
			return bad("id listed twice")
		}
		ids[id] = true
		maxID = max(maxID, id)
		switch {
		case key == directiveDropped:
			c.Dropped = append(c.Dropped, id)
		case strings.HasPrefix(key, "@"):
			// A directive of a newer kvbuf: refused, never misread.
			return bad("unknown directive")
		case CheckName("keyspace", key) != nil:
			return bad("bad keyspace name")
		default:
			if _, dup := c.Keyspaces[key]; dup {
				return bad("keyspace named twice")
			}
			c.Keyspaces[key] = id
		}
	}
	c.NextID = maxID + 1 // no overflow: maxID <= MaxKeyspaceID
	if haveNext {
		if next <= maxID {
			return Catalog{}, kverr.Errorf("keyspace catalog: %s %d is not above id %d: %w", directiveNext, next, maxID, kverr.ErrCorruptDir)
		}
		c.NextID = next
	}
	slices.Sort(c.Dropped)
	return c, nil
}

// Validate reports whether c is a valid catalog (see Catalog).
func (c Catalog) Validate() error {
	ids := make(map[uint32]bool, len(c.Keyspaces)+len(c.Dropped))
	var maxID uint32
	use := func(what string, id uint32) error {
		if id == 0 || id > MaxKeyspaceID {
			return fmt.Errorf("%s: id %d out of range", what, id)
		}
		if ids[id] {
			return fmt.Errorf("%s: id %d used twice", what, id)
		}
		ids[id] = true
		maxID = max(maxID, id)
		return nil
	}
	for name, id := range c.Keyspaces {
		if err := CheckName("keyspace", name); err != nil {
			return err
		}
		if err := use(fmt.Sprintf("keyspace %q", name), id); err != nil {
			return err
		}
	}
	for i, id := range c.Dropped {
		if err := use("dropped keyspace", id); err != nil {
			return err
		}
		if i > 0 && c.Dropped[i-1] > id {
			return fmt.Errorf("dropped keyspace ids %v not in increasing order", c.Dropped)
		}
	}
	if c.NextID <= maxID {
		return fmt.Errorf("next id %d is not above id %d", c.NextID, maxID)
	}
	return nil
}

// Encode returns c's canonical encoding (package documentation), for which
// ParseCatalog returns a catalog equal to c. It refuses a catalog that
// fails Validate, whose encoding would make the engine unopenable.
func (c Catalog) Encode() ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, kverr.Errorf("encode keyspace catalog: %w", err)
	}
	names := c.Names()
	var maxID uint32
	var b []byte
	for _, n := range names {
		id := c.Keyspaces[n]
		maxID = max(maxID, id)
		b = append(b, n...)
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(id), 10)
		b = append(b, '\n')
	}
	for _, id := range c.Dropped {
		maxID = max(maxID, id)
		b = append(b, directiveDropped+" "...)
		b = strconv.AppendUint(b, uint64(id), 10)
		b = append(b, '\n')
	}
	if c.NextID != maxID+1 {
		b = append(b, directiveNext+" "...)
		b = strconv.AppendUint(b, uint64(c.NextID), 10)
		b = append(b, '\n')
	}
	return b, nil
}

// Names returns the live keyspaces' names, sorted.
func (c Catalog) Names() []string {
	names := make([]string, 0, len(c.Keyspaces))
	for n := range c.Keyspaces {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Clone returns a deep copy of c.
func (c Catalog) Clone() Catalog {
	m := make(map[string]uint32, len(c.Keyspaces))
	for n, id := range c.Keyspaces {
		m[n] = id
	}
	return Catalog{Keyspaces: m, NextID: c.NextID, Dropped: slices.Clone(c.Dropped)}
}

// errIDsExhausted is returned by Add when every keyspace id has been used.
var errIDsExhausted = errors.New("kvbuf: no keyspace id left")

// Add gives the new keyspace name the next id and returns it. It fails
// with kverr.ErrBadName for a bad name, and if name is already a keyspace or
// every id up to MaxKeyspaceID has been used.
func (c *Catalog) Add(name string) (uint32, error) {
	if err := CheckName("keyspace", name); err != nil {
		return 0, err
	}
	if _, ok := c.Keyspaces[name]; ok {
		return 0, kverr.Errorf("keyspace %q is in the catalog already", name)
	}
	if c.NextID == 0 || c.NextID > MaxKeyspaceID {
		return 0, kverr.Errorf("add keyspace %q: %w", name, errIDsExhausted)
	}
	if c.Keyspaces == nil {
		c.Keyspaces = map[string]uint32{}
	}
	id := c.NextID
	c.Keyspaces[name] = id
	c.NextID++
	return id, nil
}

// Drop removes the keyspace name and lists its id in Dropped until Purge.
// It returns the id, or false if there is no such keyspace.
func (c *Catalog) Drop(name string) (uint32, bool) {
	id, ok := c.Keyspaces[name]
	if !ok {
		return 0, false
	}
	delete(c.Keyspaces, name)
	i, _ := slices.BinarySearch(c.Dropped, id)
	c.Dropped = slices.Insert(c.Dropped, i, id)
	return id, true
}

// Purge removes id from Dropped once the keyspace's keys are deleted from
// the store. NextID stays: the id is never used again. It reports whether
// id was listed.
func (c *Catalog) Purge(id uint32) bool {
	i, ok := slices.BinarySearch(c.Dropped, id)
	if ok {
		c.Dropped = slices.Delete(c.Dropped, i, i+1)
		if len(c.Dropped) == 0 {
			c.Dropped = nil
		}
	}
	return ok
}
