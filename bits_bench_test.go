package kvbuf

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kvbuf/kvbuf/bitslice"
	"github.com/kvbuf/kvbuf/internal/workload"
)

// BenchmarkBitsW6 is W6/flush-bits-1m at engine level, without the bench
// harness (so that -cpuprofile sees the engine's set path and flush alone):
// 1,000,000 Bits.Set calls at random indexes of a 4,194,304-bit slice (half
// of them true, W1's changes) and the DB.Flush that makes them durable,
// against coalescing the same changes into words, File.ApplyWords and a
// sync of a raw bitslice file (W6's coalesce+apply-words+msync), and
// against the same words written to a second raw file with pwrite
// (workload.PwriteWords: W6's coalesce+pwrite-words+sync, the best raw
// baseline, since the mapping's stores take a write fault per page after
// every sync). One
// iteration is one round of both and of the split below, in rotating
// order; the values flip
// each round, so that every round changes every bit it sets. A third
// engine runs the host's best call for the same work in the same rounds:
// the 1M changes in one Bits.SetMany (one admission), then its Flush,
// read back like the Set row (W6's indexes are random, without runs, so
// there is no SetRange row).
//
// Metrics: kvbuf-ns/set and coalesce-ns/set (the sets and the coalescing
// alone), overlay-ns/set and admission-ns/set (the split of a Set, on a
// second engine: the overlay's Set alone, and Flusher.Write with an empty
// apply, the admission a Set pays; before admit15 this loop timed
// BeginWrite plus End, which cost about twice as much), direct-ns/set and direct/set (design C, not kept: a
// Set without DB.write's closure, setDirect, on the second engine, and the
// median of its per-round ratio to Bits.Set), kvbuf-flush-ns and apply-words+msync-ns (the flush and the word
// apply with its sync alone), kvbuf-flush-cpu-ns and apply-cpu-ns (process
// CPU over the same spans, background goroutines included), and the
// median of the per-round ratios baseline ÷ kvbuf: speedup (sets plus
// flush) and speedup-flush (the flush alone), with their min and max; for
// the SetMany row setmany-ns/set, setmany-flush-ns, setmany-flush-cpu-ns
// and speedup-setmany (baseline ÷ SetMany plus its Flush, min and max);
// for the pwrite baseline pwrite-words+sync-ns and pwrite-cpu-ns (its
// write and sync, the coalescing apart) and speedup-pwrite,
// speedup-flush-pwrite and speedup-setmany-pwrite (the same ratios with
// it as the baseline).
// doc/design.md ("W6's bit sets") quotes it with the command.
func BenchmarkBitsW6(b *testing.B) {
	const (
		nbits = w6BitsLen
		n     = w6BitsN
	)
	idx, vals, db, bs := w6BitsSetup(b)
	// A second engine for the split: its overlay's Set alone (no
	// admission) and its admission alone (BeginWrite and End, nothing
	// applied), each timed over the same 1M indexes.
	db2, err := Open(b.TempDir(), &Options{FlushInterval: -1, MaxPendingBytes: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db2.Close() })
	bs2, err := db2.Bits("w6")
	if err != nil {
		b.Fatal(err)
	}
	raw, err := bitslice.Create(filepath.Join(b.TempDir(), "raw.bits"), nbits)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = raw.Close() })
	rawP, err := bitslice.Create(filepath.Join(b.TempDir(), "raw-pwrite.bits"), nbits)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rawP.Close() })
	var pbuf []uint64
	dense := make([]bitslice.WordChange, nbits/64)
	coalesce := func(flip bool) []bitslice.WordChange {
		clear(dense)
		for k, i := range idx {
			wc := &dense[i>>6]
			bit := uint64(1) << (i & 63)
			wc.Mask |= bit
			if vals[k] != flip {
				wc.Bits |= bit
			} else {
				wc.Bits &^= bit
			}
		}
		out := dense[:0]
		for j, wc := range dense {
			if wc.Mask != 0 {
				wc.Word = uint64(j)
				out = append(out, wc)
			}
		}
		return out
	}
	// A third engine for the SetMany row: the same changes in one
	// SetMany call (one admission), then its Flush.
	db3, err := Open(b.TempDir(), &Options{FlushInterval: -1, MaxPendingBytes: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db3.Close() })
	bs3, err := db3.Bits("w6")
	if err != nil {
		b.Fatal(err)
	}
	mvals := make([]bool, n)
	var sets, flush, fcpu, coal, apply, acpu, ovs, adm, dir, many, mflush, mcpu time.Duration
	var pw, pcpu time.Duration
	var dirRatio []float64
	var all, alone, manyAll, allP, aloneP, manyP []float64
	round := uint64(0)
	for b.Loop() {
		round++
		flip := round&1 == 0
		var ds, df, dfc, dc, da, dac, dov, dadm, ddir, dm, dmf, dmc, dpc, dp, dpcpu time.Duration
		split := func() {
			t0 := time.Now()
			for k, i := range idx {
				if err := bs2.ov.Set(i, vals[k] != flip); err != nil {
					b.Fatal(err)
				}
			}
			dov = time.Since(t0)
			if err := db2.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			t0 = time.Now()
			for range idx {
				// Flusher.Write with an empty apply: what Bits.Set's
				// DB.write pays (BeginWrite and End, which batches use,
				// cost more: the Ticket is copied and End is a call).
				if err := db2.flusher.Write(ctx, 0, nopApply); err != nil {
					b.Fatal(err)
				}
			}
			dadm = time.Since(t0)
			t0 = time.Now()
			for k, i := range idx {
				if err := setDirect(bs2, ctx, i, vals[k] == flip, 0); err != nil {
					b.Fatal(err)
				}
			}
			ddir = time.Since(t0)
			if err := db2.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		}
		kv := func() {
			t0 := time.Now()
			for k, i := range idx {
				if err := bs.Set(ctx, i, vals[k] != flip, 0); err != nil {
					b.Fatal(err)
				}
			}
			t1 := time.Now()
			c0 := processCPU()
			if err := db.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			ds, df, dfc = t1.Sub(t0), time.Since(t1), processCPU()-c0
		}
		base := func() {
			t0 := time.Now()
			words := coalesce(flip)
			t1 := time.Now()
			c0 := processCPU()
			if err := raw.ApplyWords(words); err != nil {
				b.Fatal(err)
			}
			raw.SetWatermark(round)
			if err := raw.Sync(); err != nil {
				b.Fatal(err)
			}
			dc, da, dac = t1.Sub(t0), time.Since(t1), processCPU()-c0
		}
		basePwrite := func() {
			t0 := time.Now()
			words := coalesce(flip)
			t1 := time.Now()
			c0 := processCPU()
			var err error
			if pbuf, err = workload.PwriteWords(rawP, words, pbuf); err != nil {
				b.Fatal(err)
			}
			rawP.SetWatermark(round)
			if err := rawP.Sync(); err != nil {
				b.Fatal(err)
			}
			dpc, dp, dpcpu = t1.Sub(t0), time.Since(t1), processCPU()-c0
		}
		setMany := func() {
			for k := range mvals {
				mvals[k] = vals[k] != flip
			}
			t0 := time.Now()
			if err := bs3.SetMany(ctx, idx, mvals, 0); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			c0 := processCPU()
			if err := db3.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			dm, dmf, dmc = t1.Sub(t0), time.Since(t1), processCPU()-c0
		}
		steps := []func(){kv, base, split, setMany, basePwrite}
		for j := range steps {
			steps[(j+int(round))%len(steps)]()
		}
		for k := 0; k < n; k += n / 97 {
			if v, err := bs.Get(idx[k]); err != nil || v != raw.Get(idx[k]) {
				b.Fatalf("bit %d: engine %v (%v), raw %v", idx[k], v, err, raw.Get(idx[k]))
			}
			if v, err := bs3.Get(idx[k]); err != nil || v != raw.Get(idx[k]) {
				b.Fatalf("bit %d: SetMany engine %v (%v), raw %v", idx[k], v, err, raw.Get(idx[k]))
			}
			if rawP.Get(idx[k]) != raw.Get(idx[k]) {
				b.Fatalf("bit %d: pwrite raw %v, raw %v", idx[k], rawP.Get(idx[k]), raw.Get(idx[k]))
			}
		}
		sets, flush, fcpu, coal, apply, acpu = sets+ds, flush+df, fcpu+dfc, coal+dc, apply+da, acpu+dac
		ovs, adm, dir = ovs+dov, adm+dadm, dir+ddir
		many, mflush, mcpu = many+dm, mflush+dmf, mcpu+dmc
		manyAll = append(manyAll, float64(dc+da)/float64(dm+dmf))
		dirRatio = append(dirRatio, float64(ddir)/float64(ds))
		all = append(all, float64(dc+da)/float64(ds+df))
		alone = append(alone, float64(da)/float64(df))
		pw, pcpu = pw+dp, pcpu+dpcpu
		allP = append(allP, float64(dpc+dp)/float64(ds+df))
		aloneP = append(aloneP, float64(dp)/float64(df))
		manyP = append(manyP, float64(dpc+dp)/float64(dm+dmf))
	}
	r := float64(max(round, 1))
	b.ReportMetric(float64(sets.Nanoseconds())/r/n, "kvbuf-ns/set")
	b.ReportMetric(float64(coal.Nanoseconds())/r/n, "coalesce-ns/set")
	b.ReportMetric(float64(ovs.Nanoseconds())/r/n, "overlay-ns/set")
	b.ReportMetric(float64(adm.Nanoseconds())/r/n, "admission-ns/set")
	b.ReportMetric(float64(dir.Nanoseconds())/r/n, "direct-ns/set")
	medianMetric(b, dirRatio, "direct/set")
	b.ReportMetric(float64(flush.Nanoseconds())/r, "kvbuf-flush-ns")
	b.ReportMetric(float64(apply.Nanoseconds())/r, "apply-words+msync-ns")
	b.ReportMetric(float64(fcpu.Nanoseconds())/r, "kvbuf-flush-cpu-ns")
	b.ReportMetric(float64(acpu.Nanoseconds())/r, "apply-cpu-ns")
	b.ReportMetric(float64(many.Nanoseconds())/r/n, "setmany-ns/set")
	b.ReportMetric(float64(mflush.Nanoseconds())/r, "setmany-flush-ns")
	b.ReportMetric(float64(mcpu.Nanoseconds())/r, "setmany-flush-cpu-ns")
	medianMetric(b, all, "speedup")
	medianMetric(b, manyAll, "speedup-setmany")
	medianMetric(b, alone, "speedup-flush")
	b.ReportMetric(float64(pw.Nanoseconds())/r, "pwrite-words+sync-ns")
	b.ReportMetric(float64(pcpu.Nanoseconds())/r, "pwrite-cpu-ns")
	medianMetric(b, allP, "speedup-pwrite")
	medianMetric(b, aloneP, "speedup-flush-pwrite")
	medianMetric(b, manyP, "speedup-setmany-pwrite")
}

// medianMetric reports the median, min and max of xs as name, name-min
// and name-max.
func medianMetric(b *testing.B, xs []float64, name string) {
	if len(xs) == 0 {
		return
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	b.ReportMetric(s[len(s)/2], name)
	b.ReportMetric(s[0], name+"-min")
	b.ReportMetric(s[len(s)-1], name+"-max")
}

// setDirect is Bits.Set without DB.write's closure and its second index
// check (design C of doc/design.md's "W6's bit sets": what the wrapper
// costs; it measured no clear gain, so Bits.Set keeps DB.write).
func setDirect(b *Bits, ctx context.Context, i uint64, v bool, op uint64) error {
	if err := b.ov.CheckSet(i); err != nil {
		return mapErr(err, "bitslice", b.name)
	}
	t, err := b.db.flusher.BeginWrite(ctx, op, false)
	if err != nil {
		return mapErr(err, "bitslice", b.name)
	}
	if !t.Skipped() {
		err = b.ov.Set(i, v)
		if err == nil && b.db.feed.on.Load() {
			b.db.feed.setBits(op, b.name, i, i+1, v)
		}
		t.End()
	}
	return mapErr(err, "bitslice", b.name)
}

// BenchmarkBitsW6SetMany is BenchmarkBitsW6's SetMany row alone, for
// -cpuprofile: each iteration sets the same 1,000,000 random indexes of a
// 4,194,304-bit slice (values flipped each round, so every bit changes) in
// one Bits.SetMany, then Flushes. Metrics: setmany-ns/set and flush-ns.
// doc/design.md ("W6's SetMany row and the bit flush") quotes its profile.
func BenchmarkBitsW6SetMany(b *testing.B) {
	const (
		nbits = w6BitsLen
		n     = w6BitsN
	)
	idx, vals, db, bs := w6BitsSetup(b)
	var sets, flush time.Duration
	round := 0
	for b.Loop() {
		round++
		for k := range vals {
			vals[k] = !vals[k]
		}
		t0 := time.Now()
		if err := bs.SetMany(ctx, idx, vals, 0); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := db.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		sets, flush = sets+t1.Sub(t0), flush+time.Since(t1)
		if v, err := bs.Get(idx[round%n]); err != nil || v != vals[round%n] {
			// The last change of an index wins: find it.
			last := -1
			for k, i := range idx {
				if i == idx[round%n] {
					last = k
				}
			}
			if err != nil || v != vals[last] {
				b.Fatalf("bit %d: %v (%v), want %v", idx[round%n], v, err, vals[last])
			}
		}
	}
	r := float64(max(round, 1))
	b.ReportMetric(float64(sets.Nanoseconds())/r/n, "setmany-ns/set")
	b.ReportMetric(float64(flush.Nanoseconds())/r, "flush-ns")
}

// BenchmarkBitsW6Set is BenchmarkBitsW6's Set row alone and taken apart,
// for -cpuprofile (issue 26: a single Bits.Set as cheap as coalescing
// words): each iteration makes W6's 1,000,000 random changes of a
// 4,194,304-bit slice one call each (values flipped each round, so every
// bit changes), then Flushes. Rows: set (Bits.Set, op 0, as W6's rows),
// set-ops (Bits.Set, each change a new op in order: a host that applies
// one delete per log entry, so every Set begins an op and ends the one
// before), overlay (the overlay's Set alone: no admission), admission and
// admission-ops (Flusher.Write with an empty apply, op 0 or a new op each:
// the engine's write path alone). Metrics: ns/set (the calls) and
// flush-ns.
func BenchmarkBitsW6Set(b *testing.B) {
	rows := []struct {
		name string
		ops  bool
		set  func(bs *Bits, i uint64, v bool, op uint64) error
	}{
		{"set", false, func(bs *Bits, i uint64, v bool, op uint64) error { return bs.Set(ctx, i, v, op) }},
		{"set-ops", true, func(bs *Bits, i uint64, v bool, op uint64) error { return bs.Set(ctx, i, v, op) }},
		{"overlay", false, func(bs *Bits, i uint64, v bool, _ uint64) error { return bs.ov.Set(i, v) }},
		{"admission", false, func(bs *Bits, _ uint64, _ bool, op uint64) error { return bs.db.flusher.Write(ctx, op, nopApply) }},
		{"admission-ops", true, func(bs *Bits, _ uint64, _ bool, op uint64) error { return bs.db.flusher.Write(ctx, op, nopApply) }},
	}
	for _, row := range rows {
		b.Run(row.name, func(b *testing.B) {
			idx, vals, db, bs := w6BitsSetup(b)
			if err := bs.Set(ctx, 1, true, 0); err != nil { // something pending
				b.Fatal(err)
			}
			var sets, flush time.Duration
			op := uint64(0)
			round := 0
			for b.Loop() {
				round++
				flip := round&1 == 0
				t0 := time.Now()
				for k, i := range idx {
					if row.ops {
						op++
					}
					if err := row.set(bs, i, vals[k] != flip, op); err != nil {
						b.Fatal(err)
					}
				}
				t1 := time.Now()
				if err := db.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				sets, flush = sets+t1.Sub(t0), flush+time.Since(t1)
			}
			r := float64(max(round, 1))
			b.ReportMetric(float64(sets.Nanoseconds())/r/w6BitsN, "ns/set")
			b.ReportMetric(float64(flush.Nanoseconds())/r, "flush-ns")
		})
	}
}

// W6's bit workload: w6BitsN random changes of a w6BitsLen-bit slice.
const (
	w6BitsLen = 4_194_304
	w6BitsN   = 1_000_000
)

// w6BitsSetup returns W6's indexes and values (the same for every
// benchmark: seeded) and an engine (closed at the end of b) with its
// bitslice "w6", flushed only when the benchmark says so.
func w6BitsSetup(b *testing.B) (idx []uint64, vals []bool, db *DB, bs *Bits) {
	rng := rand.New(rand.NewPCG(1, 7))
	idx = make([]uint64, w6BitsN)
	vals = make([]bool, w6BitsN)
	for k := range idx {
		idx[k], vals[k] = rng.Uint64N(w6BitsLen), rng.IntN(2) == 1
	}
	db, err := Open(b.TempDir(), &Options{FlushInterval: -1, MaxPendingBytes: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	if bs, err = db.Bits("w6"); err != nil {
		b.Fatal(err)
	}
	return idx, vals, db, bs
}

// nopApply is the admission-alone loop's apply: nothing.
func nopApply() error { return nil }
