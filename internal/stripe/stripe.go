// Package stripe provides the striping primitives behind kvbuf's hot-path
// synchronisation: a cheap per-goroutine stripe hint, cache-line padded
// counters and a striped reader/writer barrier.
//
// A single shared counter or sync.RWMutex touched by every read and write
// turns into one cache line bouncing between cores. Striping gives each
// goroutine (most of the time) a line of its own, at the price of an
// O(stripes) slow path for whoever needs the total or exclusive access.
//
// # Caveats
//
// Hint is a hash of a stack address, not a processor id: two goroutines can
// land on the same stripe (they then share a line, which is slower but still
// correct), and a goroutine whose stack moves may change stripe between
// calls, so callers must remember the stripe they used for the matching
// decrement or unlock.
package stripe

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// CacheLine is the padding unit. 64 bytes matches amd64 and most arm64
// parts; the extra memory of 128-byte padding did not pay for itself here.
const CacheLine = 64

// Hint returns a stripe index of the given number of bits (in [0,
// 1<<bits)) for the calling goroutine; bits must be in [1, 32]. It hashes
// the address of a stack variable: goroutine stacks are distinct
// allocations, so different goroutines usually get different stripes, and
// the cost is a multiply and a shift (no atomics, no runtime call;
// math/rand/v2.Uint32 costs about as much as the atomic add/sub pair this is
// meant to spread).
func Hint(bits uint) uint32 {
	var anchor byte
	// Fibonacci hashing: the high bits of the product mix every input bit,
	// including the stack-base bits that differ between goroutines.
	return uint32(uint64(uintptr(unsafe.Pointer(&anchor))) * 0x9E3779B97F4A7C15 >> (64 - bits))
}

// Count returns the default number of stripes for this process: the
// smallest power of two >= 8*GOMAXPROCS, clamped to [16, 256]. Eight stripes
// per processor keep the chance that two running goroutines share a stripe
// low (about 1/16 at GOMAXPROCS=2) while bounding memory to
// Count()*CacheLine bytes.
func Count() int {
	n := 8 * runtime.GOMAXPROCS(0)
	c := 16
	for c < n && c < 256 {
		c <<= 1
	}
	return c
}

// Counter is one cache-line padded signed counter. The atomic.Int64 is
// embedded (not wrapped) so that its methods cost nothing extra in the
// inliner's budget of hot callers.
type Counter struct {
	atomic.Int64
	_ [CacheLine - 8]byte
}

type rwStripe struct {
	mu sync.RWMutex
	_  [CacheLine - unsafe.Sizeof(sync.RWMutex{})%CacheLine]byte
}

// RWBarrier is a striped reader/writer lock: RLock touches one stripe, Lock
// takes every stripe. Like sync.RWMutex it prefers the writer: once Lock has
// started, new readers of the stripes it holds wait.
type RWBarrier struct {
	s []rwStripe
}

// NewRWBarrier returns a barrier with n stripes (rounded up to a power of
// two, minimum 1).
func NewRWBarrier(n int) *RWBarrier {
	return &RWBarrier{s: make([]rwStripe, roundPow2(n))}
}

// RLock takes the shared side on the caller's stripe and returns the lock
// that must be passed to RUnlock (or RUnlock'ed directly).
func (b *RWBarrier) RLock() *sync.RWMutex {
	m := &b.s[Hint(32)&uint32(len(b.s)-1)].mu
	m.RLock()
	return m
}

// RLockAt is RLock on stripe i&(stripes-1), for callers that already chose a
// stripe.
func (b *RWBarrier) RLockAt(i uint32) *sync.RWMutex {
	m := &b.s[i&uint32(len(b.s)-1)].mu
	m.RLock()
	return m
}

// At returns stripe i&(stripes-1)'s lock without taking it, for callers
// that take the shared side themselves (m.RLock(), inlined at the call
// site: RLockAt is over the inliner's budget, At is not) and must pass it
// to RUnlock.
func (b *RWBarrier) At(i uint32) *sync.RWMutex {
	return &b.s[i&uint32(len(b.s)-1)].mu
}

// Lock takes every stripe exclusively, in index order (so concurrent Lock
// calls cannot deadlock).
func (b *RWBarrier) Lock() {
	for i := range b.s {
		b.s[i].mu.Lock()
	}
}

// Stripes returns the number of stripes.
func (b *RWBarrier) Stripes() int { return len(b.s) }

// Free reports whether stripe i had no holder at some instant during the
// call (a TryLock that succeeded, undone at once). It never waits: a
// reader that arrives in the instant the stripe is held waits only for the
// Unlock that follows. A true result orders every RUnlock of the stripe
// before it (the lock's own happens-before edge), so whatever a reader did
// while holding the stripe, before this call, is visible after it.
func (b *RWBarrier) Free(i int) bool {
	m := &b.s[i].mu
	if !m.TryLock() {
		return false
	}
	m.Unlock()
	return true
}

// WaitFree returns once every holder of stripe i at the call has left it:
// it takes the stripe exclusively and releases it at once. Readers that
// arrive meanwhile wait for that instant (as for a Lock), so it ends even
// when the stripe's readers overlap without a gap, where Free may never
// find one. The caller must not hold the stripe.
func (b *RWBarrier) WaitFree(i int) {
	m := &b.s[i].mu
	m.Lock()
	m.Unlock()
}

// Unlock releases every stripe taken by Lock.
func (b *RWBarrier) Unlock() {
	for i := range b.s {
		b.s[i].mu.Unlock()
	}
}

func roundPow2(n int) int {
	c := 1
	for c < n {
		c <<= 1
	}
	return c
}
