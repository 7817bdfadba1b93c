package storage

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// iterModel is the expected behaviour of an Iter over sorted keys.
type iterModel struct {
	keys, vals   []string
	lower, upper []byte
	empty        bool // lower >= upper
	state        int  // one of the iter* constants
	pos          int  // index into keys when state == iterValid
}

const (
	iterUnpositioned = iota
	iterValid
	iterPastEnd   // ran off the end (Next, SeekGE): Prev goes to Last
	iterPastStart // ran off the start (Prev, SeekLT): Next goes to First
)

func newIterModel(kv map[string]string, lower, upper []byte) *iterModel {
	m := &iterModel{lower: lower, upper: upper}
	m.empty = lower != nil && upper != nil && string(lower) >= string(upper) ||
		lower == nil && upper != nil && len(upper) == 0
	if m.empty {
		return m
	}
	for _, k := range slices.Sorted(maps.Keys(kv)) {
		if inRange(k, lower, upper) {
			m.keys = append(m.keys, k)
			m.vals = append(m.vals, kv[k])
		}
	}
	return m
}

func (m *iterModel) at(i int) bool {
	switch {
	case m.empty:
		return false
	case i < 0:
		m.state = iterPastStart
	case i >= len(m.keys):
		m.state = iterPastEnd
	default:
		m.state, m.pos = iterValid, i
	}
	return m.state == iterValid
}

func (m *iterModel) first() bool { return m.at(0) }
func (m *iterModel) last() bool  { return m.at(len(m.keys) - 1) }

func (m *iterModel) next() bool {
	switch m.state {
	case iterValid:
		return m.at(m.pos + 1)
	case iterPastStart:
		return m.first()
	}
	return false
}

func (m *iterModel) prev() bool {
	switch m.state {
	case iterValid:
		return m.at(m.pos - 1)
	case iterPastEnd:
		return m.last()
	}
	return false
}

func (m *iterModel) seekGE(k []byte) bool {
	return m.at(sort.SearchStrings(m.keys, string(k)))
}

func (m *iterModel) seekLT(k []byte) bool {
	return m.at(sort.SearchStrings(m.keys, string(k)) - 1)
}

// TestIterAgainstModel drives iterators (from the store and from
// snapshots) with random sequences of First, Last, Next, Prev, SeekGE and
// SeekLT, random bounds (nil, empty, equal, inverted) and random seek keys
// inside and outside the bounds, and compares every result, Key and Value
// with a model. Keys come from an alphabet of bytes that spell tags and
// keyspace IDs, in neighbouring keyspaces, partly flushed to sstables,
// with deletions and range deletions.
func TestIterAgainstModel(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runIterModel(t, seed) })
	}
}

func runIterModel(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	s, _ := openMem(t)
	user := kvModel{}
	for _, ks := range modelKeyspaces {
		user[ks] = map[string]string{}
	}
	write := func(n int) {
		b := s.NewBatch()
		for range n {
			ks, k := modelKeyspaces[rng.IntN(len(modelKeyspaces))], randKey(rng, 4)
			switch r := rng.IntN(20); {
			case r < 15:
				v := fmt.Sprint(rng.IntN(1000))
				b.Put(ks, k, []byte(v))
				user[ks][string(k)] = v
			case r < 19:
				b.Delete(ks, k)
				delete(user[ks], string(k))
			default:
				lower, upper := randBound(rng), randBound(rng)
				if lower == nil && upper == nil {
					upper = randKey(rng, 2) // keep most of the keyspace
				}
				b.DeleteRange(ks, lower, upper)
				for key := range user[ks] {
					if inRange(key, lower, upper) {
						delete(user[ks], key)
					}
				}
			}
		}
		mustApply(t, s, b)
	}
	write(300)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	write(300)

	sn, err := s.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Close()
	atSnap := user.clone()
	write(200) // the snapshot must not see these

	for round := range 200 {
		r, want := reader(s), user
		if round%2 == 1 {
			r, want = sn, atSnap
		}
		ks := modelKeyspaces[rng.IntN(len(modelKeyspaces))]
		lower, upper := randBound(rng), randBound(rng)
		switch rng.IntN(8) {
		case 0:
			upper = lower // equal bounds (nil, nil: whole keyspace)
		case 1:
			lower, upper = nil, []byte{} // nothing is below the empty key
		}
		it, err := r.NewIter(ks, lower, upper)
		if err != nil {
			t.Fatal(err)
		}
		m := newIterModel(want[ks], lower, upper)
		var trace []string
		for range 40 {
			var got, exp bool
			var op string
			switch rng.IntN(6) {
			case 0:
				op, got, exp = "First", it.First(), m.first()
			case 1:
				op, got, exp = "Last", it.Last(), m.last()
			case 2, 3:
				op, got, exp = "Next", it.Next(), m.next()
				if rng.IntN(2) == 0 {
					op, got, exp = "Prev", it.Prev(), m.prev()
				}
			case 4:
				k := randKey(rng, 4)
				op, got, exp = fmt.Sprintf("SeekGE(%q)", k), it.SeekGE(k), m.seekGE(k)
			case 5:
				k := randKey(rng, 4)
				op, got, exp = fmt.Sprintf("SeekLT(%q)", k), it.SeekLT(k), m.seekLT(k)
			}
			trace = append(trace, op)
			var wantKey, wantVal []byte
			if exp {
				wantKey, wantVal = []byte(m.keys[m.pos]), []byte(m.vals[m.pos])
			}
			if got != exp || it.Valid() != exp ||
				string(it.Key()) != string(wantKey) || (it.Key() == nil) != (wantKey == nil) ||
				string(it.Value()) != string(wantVal) || (it.Value() == nil) != (wantVal == nil) {
				t.Fatalf("keyspace %d [%q, %q), after %q: got %v at %q=%q, model %v at %q=%q",
					ks, lower, upper, trace, got, it.Key(), it.Value(), exp, wantKey, wantVal)
			}
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
