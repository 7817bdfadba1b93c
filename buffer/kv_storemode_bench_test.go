package buffer

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// BenchmarkStoreModes compares the stores of place (storeMode) within one
// process: each op runs one unit of work in every mode, in an order that
// rotates from op to op, and each mode's time is divided by the plain
// stores' of the same op. It reports the median of those ratios per mode
// (MODE/plain) and logs their quartiles and each mode's median time per
// key. Units: w8-batch-64, one ApplyAt of 64 new keys (uniform in
// [0, 4,194,304), 16-byte values; the table is released every 640,000
// keys, untimed); w8-single-puts-64, 64 Puts of such keys; w3-churn-64, 64
// W3 churn ops (a put and a delete of key 64 + t mod 65,536).
func BenchmarkStoreModes(b *testing.B) {
	modes := []struct {
		name string
		m    uint8
	}{
		{"plain", modePlain}, {"A", modeA}, {"B", modeB}, {"B2", modeBNoCount},
		{"ctrl-only", modeCtrlOnly}, {"A+touch", modeATouch}, {"B+touch", modeBTouch}, {"plain+touch", modePlainTouch}, {"B2+touch", modeB2Touch},
	}
	defer func() { storeMode = modeB }()
	const batch = 64
	val := make([]byte, w2ValueLen)
	run := func(b *testing.B, unit func(), after func()) {
		n := len(modes)
		times := make([][]float64, n)
		ratios := make([][]float64, n)
		d := make([]time.Duration, n)
		round := 0
		for b.Loop() {
			for k := range n {
				j := (round + k) % n
				storeMode = modes[j].m
				start := time.Now()
				unit()
				d[j] = time.Since(start)
				storeMode = modeB
				b.StopTimer()
				after()
				b.StartTimer()
			}
			for j := range n {
				times[j] = append(times[j], float64(d[j].Nanoseconds())/batch)
				ratios[j] = append(ratios[j], float64(d[j])/float64(d[0]))
			}
			round++
		}
		q := func(x []float64, f float64) float64 {
			slices.Sort(x)
			return x[int(f*float64(len(x)-1))]
		}
		for j := 1; j < n; j++ {
			b.ReportMetric(q(ratios[j], 0.5), modes[j].name+"/plain")
		}
		var log string
		for j := range n {
			log += fmt.Sprintf("\n%-12s ns/key %7.1f  /plain p25 %.3f p50 %.3f p75 %.3f", modes[j].name, q(times[j], 0.5), q(ratios[j], 0.25), q(ratios[j], 0.5), q(ratios[j], 0.75))
		}
		b.Logf("%d rounds%s", round, log)
	}
	b.Run("w8-batch-64", func(b *testing.B) {
		r := newKVRig(b, nil)
		rng := rand.New(rand.NewPCG(4, 4))
		cs := make([]Change, batch)
		keys := 0
		g := uint64(0)
		run(b, func() {
			for j := range cs {
				cs[j] = Change{Kind: ChangePut, Key: w2Key(rng.Uint64N(w2Space)), Value: val}
			}
			seqs := r.kv.Seq().Reserve(batch)
			if err := r.kv.ApplyAt(seqs.Take(batch), cs); err != nil {
				b.Fatal(err)
			}
			seqs.Publish()
		}, func() {
			if keys += batch; keys >= 640_000 {
				g++
				r.kv.Freeze(g).Release()
				keys = 0
			}
		})
	})
	b.Run("w8-single-puts-64", func(b *testing.B) {
		r := newKVRig(b, nil)
		rng := rand.New(rand.NewPCG(4, 4))
		ks := make([][]byte, batch)
		keys := 0
		g := uint64(0)
		run(b, func() {
			for j := range ks {
				ks[j] = w2Key(rng.Uint64N(w2Space))
			}
			for _, k := range ks {
				if err := r.kv.Put(k, val); err != nil {
					b.Fatal(err)
				}
			}
		}, func() {
			if keys += batch; keys >= 640_000 {
				g++
				r.kv.Freeze(g).Release()
				keys = 0
			}
		})
	})
	b.Run("w3-churn-64", func(b *testing.B) {
		kv := benchKV(b, nil)
		keys := make([][]byte, 64+w3ChurnKeys)
		for i := range keys {
			keys[i] = w2Key(uint64(i))
		}
		t := 0
		run(b, func() {
			for range batch {
				k := keys[64+t%w3ChurnKeys]
				if err := kv.Put(k, k); err != nil {
					b.Fatal(err)
				}
				if err := kv.Delete(k); err != nil {
					b.Fatal(err)
				}
				t++
			}
		}, func() {})
	})
}
