package kvbuf

// Atomic batches, from the caller's side (the contract of DB.Apply):
//
//   - TestBatchesSerialOrder: batches applied concurrently over the same
//     keys end in a state some serial order of them gives, whatever flushes
//     and snapshots run meanwhile; every snapshot, GetMany and scan taken
//     meanwhile sees such a state too.
//   - TestBatchesNeverPartlyVisible: a reader never sees part of a batch:
//     not two Gets in a row (the second never older than the first), not
//     GetMany, not a scan, not a snapshot; with flushes in a loop, readers
//     pinning old tables, and batches that add keys (so that tables grow
//     under the readers and iterators).
//
// Both run at GOMAXPROCS well above the core count (see stress_test.go).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// TestBatchesSerialOrder: each of 4 writers applies batches that write one
// value (its own, new for each batch) to the same 64 keys, in its own
// shuffled order, while a goroutine flushes and another takes snapshots.
// Every state a reader sees (GetMany of the 64 keys, a scan, a snapshot)
// has one value in all 64 keys, and so has the final state, read back after
// a last flush from a reopened engine. Several trials, each on a fresh
// keyspace.
func TestBatchesSerialOrder(t *testing.T) {
	stressSetup(t)
	dir := stressDir(t)
	db := stressOpen(t, dir, stressOptions())
	const nkeys, writers = 64, 4
	keys := make([][]byte, nkeys)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "shared-%02d", i)
	}
	// same checks that vals holds one value in every key (or none in
	// any, before the first batch).
	same := func(vals [][]byte) error {
		for i := range vals {
			if !bytes.Equal(vals[i], vals[0]) {
				return fmt.Errorf("key %s = %q but key %s = %q (all: %q)", keys[i], vals[i], keys[0], vals[0], vals)
			}
		}
		return nil
	}
	trials := 6
	if testing.Short() {
		trials = 2
	}
	var batches atomic.Int64
	for trial := range trials {
		k := mustKV(t, db, fmt.Sprintf("serial-%d", trial))
		r := newStressRun(t)
		var flushes, snaps, reads atomic.Int64
		stressFlusher(r, db, 32, &flushes)
		for w := range writers {
			r.goWork(fmt.Sprintf("writer %d", w), func(wk *stressWorker) {
				b := db.NewBatch()
				order := make([]int, nkeys)
				for i := range order {
					order[i] = i
				}
				for n := 1; !wk.stopped(); n++ {
					b.Reset()
					v := fmt.Appendf(nil, "w%d.%d", w, n)
					wk.rng.Shuffle(nkeys, func(i, j int) { order[i], order[j] = order[j], order[i] })
					for _, i := range order {
						b.Put(k, keys[i], v)
					}
					if err := db.Apply(context.Background(), b, 0); err != nil {
						r.failf("Apply: %v", err)
						return
					}
					batches.Add(1)
				}
			})
		}
		r.goWork("snapshots", func(wk *stressWorker) {
			vals := make([][]byte, nkeys)
			for !wk.stopped() {
				s, err := db.NewSnapshot()
				if err != nil {
					r.failf("NewSnapshot: %v", err)
					return
				}
				sk, err := s.KV(k.Name())
				if err == nil {
					_, err = sk.GetMany(keys, vals, nil)
				}
				if err == nil {
					err = same(vals)
				}
				s.Close()
				if err != nil {
					r.failf("snapshot: %v", err)
					return
				}
				snaps.Add(1)
				wk.pause()
			}
		})
		for id := range 2 {
			r.goWork(fmt.Sprintf("reader %d", id), func(wk *stressWorker) {
				vals := make([][]byte, nkeys)
				for !wk.stopped() {
					var err error
					how := "GetMany"
					if wk.rng.IntN(2) == 0 {
						_, err = k.GetMany(keys, vals, nil)
					} else {
						how = "scan"
						err = scanShared(k, vals)
					}
					if err == nil {
						err = same(vals)
					}
					if err != nil {
						err = fmt.Errorf("%s: %w", how, err)
					}
					if err != nil {
						r.failf("reader %d: %v", id, err)
						return
					}
					reads.Add(1)
				}
			})
		}
		r.runUntil(stressDuration(300*time.Millisecond), 30*time.Second, func() bool {
			return flushes.Load() >= 5 && snaps.Load() >= 5
		})
		vals := make([][]byte, nkeys)
		if _, err := k.GetMany(keys, vals, nil); err != nil {
			t.Fatal(err)
		}
		if err := same(vals); err != nil || vals[0] == nil {
			t.Fatalf("trial %d: final state: %v (first key %q)", trial, err, vals[0])
		}
		t.Logf("trial %d: %d flushes, %d snapshots, %d reads; final value %s", trial, flushes.Load(), snaps.Load(), reads.Load(), vals[0])
	}
	t.Logf("%d batches", batches.Load())
	// The store holds one serial order's state too.
	closeT(t, db)
	db = openT(t, dir, nil)
	defer closeT(t, db)
	for trial := range trials {
		k := mustKV(t, db, fmt.Sprintf("serial-%d", trial))
		vals := make([][]byte, nkeys)
		if _, err := k.GetMany(keys, vals, nil); err != nil {
			t.Fatal(err)
		}
		if err := same(vals); err != nil {
			t.Fatalf("trial %d after reopening: %v", trial, err)
		}
	}
}

// scanShared scans a keyspace of 64 shared keys into vals.
func scanShared(k *KV, vals [][]byte) error {
	it, err := k.NewIter(nil)
	if err != nil {
		return err
	}
	clear(vals)
	i := 0
	for ok := it.First(); ok; ok = it.Next() {
		if i == len(vals) {
			break
		}
		vals[i] = append([]byte(nil), it.Value()...)
		i++
	}
	if err := it.Close(); err != nil {
		return err
	}
	if i != 0 && i != len(vals) {
		return fmt.Errorf("scan found %d keys, want 0 or %d", i, len(vals))
	}
	return nil
}

// TestBatchesNeverPartlyVisible: writer w's batch n sets a.w = n, sets key
// f.w.<n mod 1000> to n (a new key for the first 1000 batches) and sets
// b.w = n. A reader then checks, for every writer:
//
//   - Get(a.w) then Get(b.w): b >= a (and Get(b.w) then Get(a.w): a >= b):
//     batches of one writer apply in order, so the second read, later, can
//     only see a later batch, unless the first saw part of one;
//   - GetMany(a.w, b.w): a == b;
//   - a scan of the keyspace: a.w == b.w == the largest value of the keys
//     f.w.*, and there are min(a.w, 1000) of them;
//   - the same scan and GetMany through a snapshot.
//
// Flushes run in a loop, other goroutines keep iterators open (pinning old
// tables, so that released ones are recycled under readers), and the
// fresh keys make the active table grow under readers and iterators.
func TestBatchesNeverPartlyVisible(t *testing.T) {
	stressSetup(t)
	db := stressOpen(t, stressDir(t), stressOptions())
	k := mustKV(t, db, "atomic")
	const writers, freshKeys = 3, 1000
	r := newStressRun(t)
	var flushes, reads, scans, snaps atomic.Int64
	stressFlusher(r, db, 64, &flushes)
	stressPinner(r, k, 0)
	keyA := func(w int) []byte { return fmt.Appendf(nil, "a.%d", w) }
	keyB := func(w int) []byte { return fmt.Appendf(nil, "b.%d", w) }
	for w := range writers {
		r.goWork(fmt.Sprintf("writer %d", w), func(wk *stressWorker) {
			b := db.NewBatch()
			for n := 1; !wk.stopped(); n++ {
				b.Reset()
				v := []byte(strconv.Itoa(n))
				b.Put(k, keyA(w), v)
				b.Put(k, fmt.Appendf(nil, "f.%d.%03d", w, n%freshKeys), v)
				b.Put(k, keyB(w), v)
				if err := db.Apply(context.Background(), b, 0); err != nil {
					r.failf("Apply: %v", err)
					return
				}
				if wk.rng.IntN(8) == 0 {
					wk.pause()
				}
			}
		})
	}
	num := func(v []byte, err error) (int, error) {
		if errors.Is(err, ErrNotFound) || err == nil && v == nil {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(string(v))
	}
	for id := range 4 {
		r.goWork(fmt.Sprintf("reader %d", id), func(wk *stressWorker) {
			vals := make([][]byte, 2)
			for !wk.stopped() {
				w := wk.rng.IntN(writers)
				first, second := keyA(w), keyB(w)
				if wk.rng.IntN(2) == 0 {
					first, second = second, first
				}
				x, err := num(k.Get(first))
				var y int
				if err == nil {
					y, err = num(k.Get(second))
				}
				if err != nil {
					r.failf("Get: %v", err)
					return
				}
				if y < x {
					r.failf("Get(%s) = %d, then Get(%s) = %d: part of a batch was visible", first, x, second, y)
					return
				}
				if _, err := k.GetMany([][]byte{keyA(w), keyB(w)}, vals, nil); err != nil {
					r.failf("GetMany: %v", err)
					return
				}
				a, _ := num(vals[0], nil)
				b, _ := num(vals[1], nil)
				if a != b {
					r.failf("GetMany(%s, %s) = %d, %d: part of a batch was visible", keyA(w), keyB(w), a, b)
					return
				}
				reads.Add(1)
			}
		})
	}
	// checkScan scans a keyspace (live or a snapshot's) and checks every
	// writer's a, b and fresh-key count.
	checkScan := func(it *Iter, where string) error {
		var a, b, fmax, f [writers]int
		for ok := it.First(); ok; ok = it.Next() {
			key, val := it.Key(), it.Value()
			if len(key) < 3 || key[1] != '.' {
				continue
			}
			w := int(key[2] - '0')
			n, err := strconv.Atoi(string(val))
			if w < 0 || w >= writers || err != nil {
				return fmt.Errorf("%s: key %q = %q", where, key, val)
			}
			switch key[0] {
			case 'a':
				a[w] = n
			case 'b':
				b[w] = n
			case 'f':
				f[w]++
				fmax[w] = max(fmax[w], n)
			}
		}
		if err := it.Close(); err != nil {
			return err
		}
		for w := range writers {
			if a[w] != b[w] || a[w] != fmax[w] || f[w] != min(a[w], freshKeys) {
				return fmt.Errorf("%s: writer %d: a = %d, b = %d, %d fresh keys, the newest %d: part of a batch was visible", where, w, a[w], b[w], f[w], fmax[w])
			}
		}
		return nil
	}
	r.goWork("scanner", func(wk *stressWorker) {
		for !wk.stopped() {
			it, err := k.NewIter(nil)
			if err == nil {
				err = checkScan(it, "scan")
			}
			if err != nil {
				r.failf("%v", err)
				return
			}
			scans.Add(1)
		}
	})
	r.goWork("snapshots", func(wk *stressWorker) {
		vals := make([][]byte, 2)
		for !wk.stopped() {
			s, err := db.NewSnapshot()
			if err != nil {
				r.failf("NewSnapshot: %v", err)
				return
			}
			sk, err := s.KV(k.Name())
			var it *Iter
			if err == nil {
				it, err = sk.NewIter(nil)
			}
			if err == nil {
				err = checkScan(it, "snapshot scan")
			}
			for w := 0; err == nil && w < writers; w++ {
				if _, err = sk.GetMany([][]byte{keyA(w), keyB(w)}, vals, nil); err == nil && !bytes.Equal(vals[0], vals[1]) {
					err = fmt.Errorf("snapshot GetMany(%s, %s) = %q, %q", keyA(w), keyB(w), vals[0], vals[1])
				}
			}
			s.Close()
			if err != nil {
				r.failf("%v", err)
				return
			}
			snaps.Add(1)
			wk.pause()
		}
	})
	r.runUntil(stressDuration(1500*time.Millisecond), 60*time.Second, func() bool {
		return flushes.Load() >= 20 && scans.Load() >= 20 && snaps.Load() >= 5
	})
	t.Logf("%d flushes, %d reads, %d scans, %d snapshots", flushes.Load(), reads.Load(), scans.Load(), snaps.Load())
}
