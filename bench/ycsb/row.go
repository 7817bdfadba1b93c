package ycsb

import (
	"encoding/binary"
	"fmt"
	"strconv"
)

// Row format: go-ycsb's (pkg/util EncodeRow, a simplified TiDB row): for
// each field present, the varint flag byte 8 and the zig-zag varint field
// index, then the bytes flag 2, the zig-zag varint length and the bytes. A
// row with no field is the single byte 0. This codec writes fields in index
// order and decodes into a slot per field without allocating; rows written
// by go-ycsb's own bindings decode the same (TestRowMatchesGoYCSB).
const (
	flagVarint byte = 8
	flagBytes  byte = 2
)

// codec maps the workload's field names (field0 .. fieldN-1, or the names
// a caller configured) to indexes and back.
type codec struct {
	names []string
	index map[string]int
}

func newCodec(fieldCount int) *codec {
	c := &codec{names: make([]string, fieldCount), index: make(map[string]int, fieldCount)}
	for i := range c.names {
		c.names[i] = "field" + strconv.Itoa(i)
		c.index[c.names[i]] = i
	}
	return c
}

// fieldIndex returns the index of a field name, or an error wrapping
// ErrUnknownField.
func (c *codec) fieldIndex(name string) (int, error) {
	i, ok := c.index[name]
	if !ok {
		return 0, fmt.Errorf("%w: %q (the table has fields field0..field%d)", ErrUnknownField, name, len(c.names)-1)
	}
	return i, nil
}

// encode appends the row holding slots' non-nil fields to dst.
func (c *codec) encode(dst []byte, slots [][]byte) []byte {
	n := 0
	for i, v := range slots {
		if v == nil {
			continue
		}
		n++
		dst = append(dst, flagVarint)
		dst = binary.AppendVarint(dst, int64(i))
		dst = append(dst, flagBytes)
		dst = binary.AppendVarint(dst, int64(len(v)))
		dst = append(dst, v...)
	}
	if n == 0 {
		dst = append(dst, 0)
	}
	return dst
}

// decode sets slots[i] to field i of row (a subslice of row) or nil if the
// row does not hold it. len(slots) is the table's field count; a field index
// at or past it, or a malformed row, is an error wrapping ErrCorruptRow.
func (c *codec) decode(row []byte, slots [][]byte) error {
	clear(slots)
	if len(row) == 1 && row[0] == 0 {
		return nil
	}
	rest := row
	for len(rest) > 0 {
		if rest[0] != flagVarint {
			return fmt.Errorf("%w: field flag %#x at byte %d", ErrCorruptRow, rest[0], len(row)-len(rest))
		}
		idx, n := binary.Varint(rest[1:])
		if n <= 0 || idx < 0 || idx >= int64(len(slots)) {
			return fmt.Errorf("%w: field index at byte %d", ErrCorruptRow, len(row)-len(rest))
		}
		rest = rest[1+n:]
		if len(rest) == 0 || rest[0] != flagBytes {
			return fmt.Errorf("%w: missing value of field %d", ErrCorruptRow, idx)
		}
		l, n := binary.Varint(rest[1:])
		if n <= 0 || l < 0 || l > int64(len(rest)-1-n) {
			return fmt.Errorf("%w: length of field %d", ErrCorruptRow, idx)
		}
		rest = rest[1+n:]
		slots[idx] = rest[:l:l]
		rest = rest[l:]
	}
	return nil
}

// setValues sets the slot of every field of values (nil slots stay absent).
func (c *codec) setValues(slots [][]byte, values map[string][]byte) error {
	for name, v := range values {
		i, err := c.fieldIndex(name)
		if err != nil {
			return err
		}
		if v == nil {
			v = []byte{} // present, empty
		}
		slots[i] = v
	}
	return nil
}

// fill sets m to the fields of slots named in fields (every present field
// if fields is empty). m's values alias slots.
func (c *codec) fill(m map[string][]byte, slots [][]byte, fields []string) {
	clear(m)
	if len(fields) == 0 {
		for i, v := range slots {
			if v != nil {
				m[c.names[i]] = v
			}
		}
		return
	}
	for _, f := range fields {
		if i, ok := c.index[f]; ok && slots[i] != nil {
			m[f] = slots[i]
		}
	}
}
