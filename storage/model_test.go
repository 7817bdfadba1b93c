package storage

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

// modelKeyspaces are the keyspaces the model tests write: neighbours, and
// the last ID (whose end is the end of the user namespace).
var modelKeyspaces = []KeyspaceID{1, 2, 0x01000000, math.MaxUint32}

// modelAlphabet makes keys from bytes that could confuse the key layout
// (tags, keyspace ID bytes, 0xff), so that keys repeat, share prefixes and
// spell internal keys.
var modelAlphabet = []byte{0x00, 0x01, 0x02, 0x03, 'w', 'm', 0xff}

func randKey(rng *rand.Rand, maxLen int) []byte {
	k := make([]byte, rng.IntN(maxLen+1))
	for i := range k {
		k[i] = modelAlphabet[rng.IntN(len(modelAlphabet))]
	}
	return k
}

// randBound returns nil (open) a quarter of the time, else a random key.
func randBound(rng *rand.Rand) []byte {
	if rng.IntN(4) == 0 {
		return nil
	}
	return randKey(rng, 3)
}

// inRange reports whether lower <= k < upper, nil bounds open.
func inRange(k string, lower, upper []byte) bool {
	return (lower == nil || k >= string(lower)) && (upper == nil || k < string(upper))
}

// kvModel is the expected user data: keyspace -> key -> value.
type kvModel map[KeyspaceID]map[string]string

func (m kvModel) clone() kvModel {
	c := kvModel{}
	for ks, kv := range m {
		c[ks] = maps.Clone(kv)
	}
	return c
}

// scan returns the model's "k=v" pairs of ks in [lower, upper), in order.
func (m kvModel) scan(ks KeyspaceID, lower, upper []byte) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m[ks])) {
		if inRange(k, lower, upper) {
			out = append(out, k+"="+m[ks][k])
		}
	}
	return out
}

// TestRandomBatchesAgainstModel applies random batches of puts, deletes,
// range deletions (nil bounds included) over several keyspaces, meta
// entries and watermarks, some with Apply and some with Commit and a
// deferred Wait in random order, with flushes, snapshots and reopens in
// between, and checks every read (Get, forward and reverse scans, snapshot
// reads, GetMeta, Watermark) against a model.
func TestRandomBatchesAgainstModel(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runModel(t, seed) })
	}
}

func runModel(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 42))
	fs := vfs.NewMem()
	open := func() *Store {
		s, err := Open("db", &Options{FS: fs, MemTableSize: 256 << 10})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	defer func() { _ = s.Close() }()

	user := kvModel{}
	for _, ks := range modelKeyspaces {
		user[ks] = map[string]string{}
	}
	meta := map[string]string{}
	var committedWM, persistedWM uint64
	type pending struct {
		c  *Commit
		wm uint64 // committedWM after it
	}
	var inflight []pending
	var newest *Commit // the latest commit not known durable
	type snap struct {
		sn   *Snapshot
		want kvModel
	}
	var snaps []snap
	randKS := func() KeyspaceID { return modelKeyspaces[rng.IntN(len(modelKeyspaces))] }

	for round := range 80 {
		b := s.NewBatch()
		for range rng.IntN(50) {
			ks, k := randKS(), randKey(rng, 3)
			switch r := rng.IntN(20); {
			case r < 11:
				v := fmt.Sprintf("v%d-%d", round, rng.IntN(1000))
				b.Put(ks, k, []byte(v))
				user[ks][string(k)] = v
			case r < 16:
				b.Delete(ks, k)
				delete(user[ks], string(k))
			case r < 17:
				lower, upper := randBound(rng), randBound(rng)
				b.DeleteRange(ks, lower, upper)
				for key := range user[ks] {
					if inRange(key, lower, upper) {
						delete(user[ks], key)
					}
				}
			case r < 19:
				v := fmt.Sprintf("m%d", round)
				b.SetMeta(string(k), []byte(v))
				meta[string(k)] = v
			default:
				b.DeleteMeta(string(k))
				delete(meta, string(k))
			}
		}
		if rng.IntN(2) == 0 {
			op := rng.Uint64N(1000)
			b.SetWatermark(op)
			committedWM = max(committedWM, op)
		}
		if rng.IntN(2) == 0 {
			mustApply(t, s, b)
			persistedWM, newest = committedWM, nil
		} else {
			c := mustCommit(t, s, b)
			inflight = append(inflight, pending{c, committedWM})
			newest = c
		}
		// Wait for a random subset of the pending commits, in random order.
		rng.Shuffle(len(inflight), func(i, j int) { inflight[i], inflight[j] = inflight[j], inflight[i] })
		n := rng.IntN(len(inflight) + 1)
		for _, p := range inflight[:n] {
			if err := p.c.Wait(); err != nil {
				t.Fatal(err)
			}
			persistedWM = max(persistedWM, p.wm)
		}
		inflight = inflight[n:]
		// A commit is visible once its group is applied, which may wait
		// for the group before it to be durable (see Store.Commit): the
		// reads below need every commit applied, so wait for the newest,
		// which makes every earlier one durable too.
		if newest != nil {
			if err := newest.Wait(); err != nil {
				t.Fatal(err)
			}
			persistedWM, newest = committedWM, nil
		}
		switch rng.IntN(12) {
		case 0:
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
		case 1:
			sn, err := s.NewSnapshot()
			if err != nil {
				t.Fatal(err)
			}
			snaps = append(snaps, snap{sn, user.clone()})
		case 2:
			for _, sn := range snaps {
				if err := sn.sn.Close(); err != nil {
					t.Fatal(err)
				}
			}
			snaps = nil
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			// Close finished every pending commit: their Waits succeed
			// and, reopened, the store has the highest watermark
			// committed.
			for _, p := range inflight {
				if err := p.c.Wait(); err != nil {
					t.Fatalf("Wait after Close: %v", err)
				}
			}
			inflight = nil
			s = open()
			persistedWM = committedWM
		}
		checkModel(t, rng, s, user, meta, persistedWM)
		for _, sn := range snaps {
			checkReads(t, rng, sn.sn, sn.want)
		}
	}
	for _, sn := range snaps {
		if err := sn.sn.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func checkModel(t *testing.T, rng *rand.Rand, s *Store, user kvModel, meta map[string]string, wm uint64) {
	t.Helper()
	checkReads(t, rng, s, user)
	for range 50 {
		k := randKey(rng, 3)
		gotM, err := s.GetMeta(string(k))
		wantM, ok := meta[string(k)]
		if ok != (err == nil) || (ok && string(gotM) != wantM) || (!ok && !errors.Is(err, kverr.ErrNotFound)) {
			t.Fatalf("GetMeta(%q) = %q, %v; model %q, %v", k, gotM, err, wantM, ok)
		}
	}
	wantWatermark(t, s, wm)
}

// checkReads compares random Gets and random-bound scans, both directions,
// of r with the model.
func checkReads(t *testing.T, rng *rand.Rand, r reader, user kvModel) {
	t.Helper()
	for range 50 {
		ks := modelKeyspaces[rng.IntN(len(modelKeyspaces))]
		k := randKey(rng, 3)
		got, err := r.Get(ks, k)
		want, ok := user[ks][string(k)]
		if ok != (err == nil) || (ok && string(got) != want) || (!ok && !errors.Is(err, kverr.ErrNotFound)) {
			t.Fatalf("Get(%d, %q) = %q, %v; model %q, %v", ks, k, got, err, want, ok)
		}
	}
	for range 3 {
		ks := modelKeyspaces[rng.IntN(len(modelKeyspaces))]
		lower, upper := randBound(rng), randBound(rng)
		want := user.scan(ks, lower, upper)
		if got := scanKS(t, r, ks, lower, upper); !slices.Equal(got, want) {
			t.Fatalf("scan %d [%q, %q) =\n%q\nmodel\n%q", ks, lower, upper, got, want)
		}
		if got := scanReverse(t, r, ks, lower, upper); !slices.Equal(got, want) {
			t.Fatalf("reverse scan %d [%q, %q) =\n%q\nmodel\n%q", ks, lower, upper, got, want)
		}
	}
}
