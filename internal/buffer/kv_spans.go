package buffer

import (
	"slices"
	"strings"
	"unsafe"
)

// spans is an immutable set of a table's range tombstones, each [lo, hi)
// with the sequence number of the range delete that made it. Spans may
// overlap: two spans of different numbers cannot be merged without losing
// which points each one hides (a point hides under a span only if the span
// is newer). Touching or overlapping spans of the same number are merged.
//
// The set is kept as a few sorted runs (the logarithmic method): adding a
// span makes a run of one, then merges the last two runs while the older
// is at most twice the size of the newer, so runs shrink by more than half
// from the oldest to the newest (at most log2(n)+1 of them) and a span is
// copied O(log n) times over the table's life. One sorted array copied
// whole on every range delete (the design before) made n range deletes
// into one table cost O(n^2): a host deleting many small ranges per
// generation (TestSpansCopiesAmortized) slowed its own writers, and the
// freeze that waits for them, as the table grew.
type spans struct {
	runs   []*spanRun // oldest (largest) first
	n      int        // spans held
	maxSeq uint64
}

// spanRun is one sorted run of a spans set.
type spanRun struct {
	s      []span // sorted by lo
	maxEnd []span // maxEnd[i] is the span of s[:i+1] that ends last
}

// span is one range [lo, hi); open means hi is +infinity.
type span struct {
	lo, hi string
	open   bool
	seq    uint64
}

// spanBytes is the memory a range tombstone [lo, hi) holds in a pending
// table, counted in its bytes (and so against MaxPendingBytes and the
// memory budget): its bounds, and its entry in a run and in the run's
// maxEnd.
func spanBytes(lo, hi string) int64 {
	return int64(len(lo)+len(hi)) + 2*int64(unsafe.Sizeof(span{}))
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
	var best span
	found := false
	for _, r := range sp.runs {
		if s, ok := r.find(k, above, vis); ok && (!found || s.seq > best.seq) {
			best, found = s, true
		}
	}
	return best, found
}

// find is spans.find within the run.
func (r *spanRun) find(k string, above, vis uint64) (span, bool) {
	// Spans with lo <= k, from the last: stop once no earlier span can
	// reach k.
	n, _ := slices.BinarySearchFunc(r.s, k, func(s span, k string) int {
		if s.lo <= k {
			return -1
		}
		return 1
	})
	var best span
	found := false
	for i := n - 1; i >= 0 && r.maxEnd[i].endsAfter(k); i-- {
		if s := r.s[i]; s.endsAfter(k) && s.seq > above && s.seq <= vis && (!found || s.seq > best.seq) {
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
// numbered seq. sp is left as it was (readers may hold it).
func (sp *spans) with(lo, hi string, open bool, seq uint64) *spans {
	n := span{lo: lo, hi: hi, open: open, seq: seq}
	if sp != nil && seq <= sp.maxSeq {
		// A number the set may hold already (a batch applied out of
		// order): merge the same-numbered spans it touches into one run.
		return flatWith(sp.list(), n)
	}
	var old []*spanRun
	var count int
	var maxSeq uint64
	if sp != nil {
		old, count, maxSeq = sp.runs, sp.n, sp.maxSeq
	}
	runs := make([]*spanRun, 0, len(old)+1)
	runs = append(runs, old...)
	cur := []span{n}
	for len(runs) > 0 && len(runs[len(runs)-1].s) <= 2*len(cur) {
		cur = mergeSpans(runs[len(runs)-1].s, cur)
		runs = runs[:len(runs)-1]
	}
	runs = append(runs, newSpanRun(cur))
	return &spans{runs: runs, n: count + 1, maxSeq: max(maxSeq, seq)}
}

// flatWith is with's slow path: list plus n, same-numbered spans that
// overlap or touch n merged into it, as one run.
func flatWith(list []span, n span) *spans {
	out := make([]span, 0, len(list)+1)
	for _, s := range list {
		if s.seq == n.seq && !(!s.open && s.hi < n.lo) && !(!n.open && n.hi < s.lo) {
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
	res := &spans{runs: []*spanRun{newSpanRun(out)}, n: len(out)}
	for _, s := range out {
		res.maxSeq = max(res.maxSeq, s.seq)
	}
	return res
}

// mergeSpans merges two runs sorted by lo into a new one, b's spans (the
// newer run's) before a's of the same lo, as with placed a new span before
// the older ones of its lo in the design before.
func mergeSpans(a, b []span) []span {
	out := make([]span, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if b[0].lo <= a[0].lo {
			out, b = append(out, b[0]), b[1:]
		} else {
			out, a = append(out, a[0]), a[1:]
		}
	}
	return append(append(out, a...), b...)
}

// newSpanRun returns the run of s (sorted by lo), with its maxEnd.
func newSpanRun(s []span) *spanRun {
	r := &spanRun{s: s, maxEnd: make([]span, len(s))}
	for i, x := range s {
		r.maxEnd[i] = x
		if i > 0 && !x.endsAfterSpan(r.maxEnd[i-1]) {
			r.maxEnd[i] = r.maxEnd[i-1]
		}
	}
	return r
}

// list returns every span sorted by lo (callers must not modify it).
func (sp *spans) list() []span {
	if sp == nil {
		return nil
	}
	switch len(sp.runs) {
	case 0:
		return nil
	case 1:
		return sp.runs[0].s
	}
	out := sp.runs[0].s
	for _, r := range sp.runs[1:] {
		out = mergeSpans(out, r.s)
	}
	return out
}

// whole reports whether the set is one open span over every key (Drop's).
func (sp *spans) whole() bool {
	if sp == nil || sp.n != 1 {
		return false
	}
	s := sp.runs[len(sp.runs)-1].s[0]
	return s.lo == "" && s.open
}
