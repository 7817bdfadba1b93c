package buffer

import (
	"slices"
	"strings"
)

// spans is an immutable set of a table's range tombstones, each [lo, hi)
// with the sequence number of the range delete that made it, sorted by lo.
// Spans may overlap: two spans of different numbers cannot be merged
// without losing which points each one hides (a point hides under a span
// only if the span is newer). Touching or overlapping spans of the same
// number are merged.
type spans struct {
	s      []span
	maxEnd []span // maxEnd[i] is the span of s[:i+1] that ends last
	maxSeq uint64
}

// span is one range [lo, hi); open means hi is +infinity.
type span struct {
	lo, hi string
	open   bool
	seq    uint64
}

// endsAfter reports whether s extends past k (k < hi).
func (s span) endsAfter(k string) bool { return s.open || k < s.hi }

// endsAfterSpan reports whether s ends after o.
func (s span) endsAfterSpan(o span) bool { return s.open || !o.open && s.hi > o.hi }

// find returns the newest span holding k whose number is in (above, vis].
func (sp *spans) find(k string, above, vis uint64) (span, bool) {
	if sp == nil || sp.maxSeq <= above {
		return span{}, false
	}
	// Spans with lo <= k, from the last: stop once no earlier span can
	// reach k.
	n, _ := slices.BinarySearchFunc(sp.s, k, func(s span, k string) int {
		if s.lo <= k {
			return -1
		}
		return 1
	})
	var best span
	found := false
	for i := n - 1; i >= 0 && sp.maxEnd[i].endsAfter(k); i-- {
		if s := sp.s[i]; s.endsAfter(k) && s.seq > above && s.seq <= vis && (!found || s.seq > best.seq) {
			best, found = s, true
		}
	}
	return best, found
}

// hides reports whether a span numbered in (above, vis] holds k.
func (sp *spans) hides(k string, above, vis uint64) bool {
	_, ok := sp.find(k, above, vis)
	return ok
}

// with returns a new set that also holds [lo, hi) (hi = +inf when open)
// numbered seq.
func (sp *spans) with(lo, hi string, open bool, seq uint64) *spans {
	n := span{lo: lo, hi: hi, open: open, seq: seq}
	var out []span
	for _, s := range sp.list() {
		if s.seq == seq && !(!s.open && s.hi < n.lo) && !(!n.open && n.hi < s.lo) {
			// Same number, overlapping or touching: merge into n.
			n.lo = min(n.lo, s.lo)
			if n.open || s.open {
				n.open, n.hi = true, ""
			} else {
				n.hi = max(n.hi, s.hi)
			}
			continue
		}
		out = append(out, s)
	}
	i, _ := slices.BinarySearchFunc(out, n, func(a, b span) int { return strings.Compare(a.lo, b.lo) })
	out = slices.Insert(out, i, n)
	res := &spans{s: out, maxEnd: make([]span, len(out))}
	for i, s := range out {
		res.maxEnd[i] = s
		if i > 0 && !s.endsAfterSpan(res.maxEnd[i-1]) {
			res.maxEnd[i] = res.maxEnd[i-1]
		}
		res.maxSeq = max(res.maxSeq, s.seq)
	}
	return res
}

func (sp *spans) list() []span {
	if sp == nil {
		return nil
	}
	return sp.s
}
