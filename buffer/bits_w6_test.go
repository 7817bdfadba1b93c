package buffer

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvbuf/kvbuf/bitslice"
)

// benchW6FlushBits is W6's bit half (BenchmarkW6/flush-bits-1m): the time
// to flush 1,000,000 pending random bit changes (Freeze, Apply with a new
// watermark, Release) against applying the same changes straight to the
// mapped file and syncing it (the floor). Each op gets fresh random changes,
// so every data page is dirty.
func benchW6FlushBits(b *testing.B) {
	b.Run("flush-bits-1m/kvbuf", func(b *testing.B) {
		f, err := bitslice.Create(b.TempDir()+"/w6", w1Bits)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		bits := NewBits(f, nil)
		rng := rand.New(rand.NewPCG(6, 6))
		changes := make([]w1Change, w1Sets)
		b.ReportAllocs()
		var op uint64
		for b.Loop() {
			b.StopTimer()
			op++
			fillW1Changes(rng, changes)
			for _, c := range changes {
				if err := bits.Set(c.i, c.v, op); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
			if err := bits.Apply(context.Background(), bits.Freeze()); err != nil {
				b.Fatal(err)
			}
			bits.Release()
		}
		reportMSPerFlush(b)
	})
	b.Run("flush-bits-1m/direct-apply+msync", func(b *testing.B) {
		f, err := bitslice.Create(b.TempDir()+"/w6", w1Bits)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		rng := rand.New(rand.NewPCG(6, 6))
		changes := make([]w1Change, w1Sets)
		b.ReportAllocs()
		var op uint64
		for b.Loop() {
			b.StopTimer()
			op++
			fillW1Changes(rng, changes)
			b.StartTimer()
			for _, c := range changes {
				if err := f.Set(c.i, c.v); err != nil {
					b.Fatal(err)
				}
			}
			f.SetWatermark(op)
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
		}
		reportMSPerFlush(b)
	})
}

func fillW1Changes(rng *rand.Rand, c []w1Change) {
	for k := range c {
		c[k] = w1Change{rng.Uint64N(w1Bits), rng.IntN(2) == 1}
	}
}

func reportMSPerFlush(b *testing.B) {
	b.ReportMetric(float64(b.Elapsed())/float64(time.Millisecond)/float64(b.N), "ms/flush")
}
