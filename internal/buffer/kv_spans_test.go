package buffer

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestSpansModel checks a spans set built by with against every span added
// (the model: a point is hidden by the newest span that holds it, whatever
// merging the set did), for find and list, with numbers mostly growing
// (the fast path: runs) and now and then repeated or older (a batch applied
// out of order: the merged slow path).
func TestSpansModel(t *testing.T) {
	seed := seedFor(t)
	for round := range 8 {
		rng := rand.New(rand.NewPCG(seed, uint64(round)))
		key := func() string { return fmt.Sprintf("%03d", rng.IntN(200)) }
		var sp *spans
		var all []span
		seq := uint64(10)
		for step := range 600 {
			lo, hi := key(), key()
			if hi < lo {
				lo, hi = hi, lo
			}
			s := span{lo: lo, hi: hi, seq: seq}
			switch p := rng.IntN(100); {
			case p < 5:
				s.open, s.hi = true, ""
			case p < 15 && len(all) > 0:
				s.seq = all[rng.IntN(len(all))].seq // a number held already
			case p < 20:
				s.seq = 1 + uint64(rng.IntN(int(seq))) // an older one
			default:
				seq += 1 + uint64(rng.IntN(3))
				s.seq = seq
			}
			if !s.open && s.lo == s.hi {
				continue // DeleteRange adds no span for an empty range
			}
			sp = sp.with(s.lo, s.hi, s.open, s.seq)
			all = append(all, s)
			where := fmt.Sprintf("round %d step %d", round, step)
			if r := len(sp.runs); r > bits.Len(uint(len(all)))+1 {
				t.Fatalf("%s: %d runs for %d spans", where, r, len(all))
			}
			l := sp.list()
			if !slices.IsSortedFunc(l, func(a, b span) int { return strings.Compare(a.lo, b.lo) }) {
				t.Fatalf("%s: list not sorted by lo", where)
			}
			for range 20 {
				k := key()
				above, vis := uint64(rng.IntN(int(seq)+2)), uint64(rng.IntN(int(seq)+2))
				want, wok := modelFind(all, k, above, vis)
				got, gok := sp.find(k, above, vis)
				if gok != wok || gok && got.seq != want.seq {
					t.Fatalf("%s: find(%q, %d, %d) = %+v %v, want number %d %v", where, k, above, vis, got, gok, want.seq, wok)
				}
				if lok := modelFindIn(l, k, above, vis); lok != wok {
					t.Fatalf("%s: list covers %q in (%d, %d]: %v, want %v", where, k, above, vis, lok, wok)
				}
			}
		}
	}
}

func modelFind(all []span, k string, above, vis uint64) (span, bool) {
	var best span
	found := false
	for _, s := range all {
		if s.lo <= k && s.endsAfter(k) && s.seq > above && s.seq <= vis && (!found || s.seq > best.seq) {
			best, found = s, true
		}
	}
	return best, found
}

func modelFindIn(l []span, k string, above, vis uint64) bool {
	_, ok := modelFind(l, k, above, vis)
	return ok
}

// TestSpansCopiesAmortized checks that n range deletes into one table copy
// O(n log n) spans in all, not O(n^2) (each with copied the whole set in the
// design before): it counts the spans of every run a with made new (a run
// of the old set is shared, not copied).
func TestSpansCopiesAmortized(t *testing.T) {
	const n = 1 << 12
	var sp *spans
	copied := 0
	for i := range n {
		next := sp.with(fmt.Sprintf("t/%06d", i%256), fmt.Sprintf("t/%06d\x00", i%256), false, uint64(i+1))
		old := map[*spanRun]bool{}
		if sp != nil {
			for _, r := range sp.runs {
				old[r] = true
			}
		}
		for _, r := range next.runs {
			if !old[r] {
				copied += len(r.s)
			}
		}
		sp = next
	}
	if limit := n * (bits.Len(n) + 1); copied > limit {
		t.Fatalf("%d range deletes copied %d spans, above n(log2 n + 1) = %d", n, copied, limit)
	}
	if sp.n != n || len(sp.list()) != n {
		t.Fatalf("set holds %d spans (%d listed), want %d", sp.n, len(sp.list()), n)
	}
}

// TestKVRangeDeletesCounted checks that range tombstones count in the
// pending bytes (and so against MaxPendingBytes and the memory budget) and
// leave them with their generation's release.
func TestKVRangeDeletesCounted(t *testing.T) {
	r := newKVRig(t, nil)
	lo, hi := strings.Repeat("a", 1000), strings.Repeat("b", 1000)
	for range 100 {
		r.delRange(&lo, &hi)
	}
	want := 100 * spanBytes(lo, hi)
	if n := r.acct.Bytes(); n != want {
		t.Fatalf("account after 100 range deletes = %d, want %d", n, want)
	}
	if n := r.kv.PendingBytes(); n != want {
		t.Fatalf("PendingBytes after 100 range deletes = %d, want %d", n, want)
	}
	r.flush()
	if n := r.acct.Bytes(); n != 0 {
		t.Fatalf("account after the flush = %d", n)
	}
}
