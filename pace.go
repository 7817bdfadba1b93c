package kvbuf

import (
	"runtime"
	"sync/atomic"
	"time"
)

// flushPacer bounds the CPU the flusher's own work takes from readers
// while it writes a generation's tables (flush by ingestion: encoding,
// compressing, filtering). Go preempts a goroutine that runs on only every
// 10ms or so, so a flush that encodes a large generation in one go keeps a
// processor from every reader queued behind it for that long: on a machine
// with as many busy goroutines as cores, a read's tail latency becomes the
// flush's time slice. The pacer cuts the work into slices of at most
// Options.FlushQuantum and yields the processor between them (readers
// waiting for it run first), and, under Options.FlushCPUPercent, sleeps
// between slices so that over time the flusher uses at most that share of
// one core. Metrics.FlushYields and FlushThrottled count both.
//
// One pacer serves the flusher's writer goroutine (Write is never called
// concurrently); its counters are read by Metrics.
type flushPacer struct {
	quantum time.Duration // <= 0: never yield
	percent int           // 1-100; 100: yield only

	start time.Time // of the current slice (writer goroutine only)

	yields    atomic.Int64
	throttled atomic.Int64 // nanoseconds slept
}

func newFlushPacer(quantum time.Duration, percent int) *flushPacer {
	return &flushPacer{quantum: quantum, percent: percent}
}

// begin starts a slice of work (at the start of a generation's write).
func (p *flushPacer) begin() { p.start = time.Now() }

// pace is called between small units of work: once the slice is over, it
// yields (and sleeps under a CPU share) and starts the next one.
func (p *flushPacer) pace() {
	if p.quantum <= 0 {
		return
	}
	el := time.Since(p.start)
	if el < p.quantum {
		return
	}
	p.yields.Add(1)
	if p.percent < 100 {
		// Work el, then rest el*(100-percent)/percent: the slice's share
		// of the core is percent.
		rest := el * time.Duration(100-p.percent) / time.Duration(p.percent)
		t0 := time.Now()
		time.Sleep(rest)
		p.throttled.Add(int64(time.Since(t0))) // a short sleep may last longer
	} else {
		runtime.Gosched()
	}
	p.start = time.Now()
}
