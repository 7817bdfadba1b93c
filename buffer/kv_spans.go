package buffer

import (
	"slices"
	"strings"
)

// spans is an immutable set of range tombstones [lo, hi), sorted by lo and
// non-overlapping (touching or overlapping ranges are merged: every span of
// one table has the same age, so merging loses nothing).
type spans struct {
	s []span
}

// span is one range [lo, hi); open means hi is +infinity.
type span struct {
	lo, hi string
	open   bool
}

// endsAfter reports whether s extends past k (k < hi).
func (s span) endsAfter(k string) bool { return s.open || k < s.hi }

// covers reports whether some span holds k.
func (sp *spans) covers(k string) bool {
	_, ok := sp.find(k)
	return ok
}

// find returns the span holding k.
func (sp *spans) find(k string) (span, bool) {
	// The last span with lo <= k is the only candidate.
	i, found := slices.BinarySearchFunc(sp.s, k, func(s span, k string) int { return strings.Compare(s.lo, k) })
	if !found {
		i--
	}
	if i < 0 {
		return span{}, false
	}
	if s := sp.s[i]; s.endsAfter(k) {
		return s, true
	}
	return span{}, false
}

// with returns a new set that also covers [lo, hi) (hi = +inf when open).
func (sp *spans) with(lo, hi string, open bool) *spans {
	n := span{lo: lo, hi: hi, open: open}
	var out []span
	if sp != nil {
		out = make([]span, 0, len(sp.s)+1)
	}
	inserted := false
	for _, s := range sp.list() {
		switch {
		case !s.open && s.hi < n.lo: // s entirely before n, not touching
			out = append(out, s)
		case !n.open && n.hi < s.lo: // s entirely after n
			if !inserted {
				out = append(out, n)
				inserted = true
			}
			out = append(out, s)
		default: // overlapping or touching: merge into n
			n.lo = min(n.lo, s.lo)
			switch {
			case n.open || s.open:
				n.open, n.hi = true, ""
			default:
				n.hi = max(n.hi, s.hi)
			}
		}
	}
	if !inserted {
		out = append(out, n)
	}
	return &spans{s: out}
}

func (sp *spans) list() []span {
	if sp == nil {
		return nil
	}
	return sp.s
}
