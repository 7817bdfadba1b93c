package workload

import (
	"context"
	"sync"

	"golang.org/x/sync/singleflight"
)

// The W4 baselines: three ways a user turns one physical flush (freeze what
// is pending, write it, sync, release) into a Flush that many goroutines
// call. Each runs at most one physical flush at a time, so physical needs
// no locking of its own against itself.

// PerCallerSync returns a Flush that runs one physical flush per call,
// callers taking turns on a mutex: correct, no coalescing.
func PerCallerSync(physical func(context.Context) error) func(context.Context) error {
	var mu sync.Mutex
	return func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		return physical(ctx)
	}
}

// Singleflight returns a Flush through golang.org/x/sync/singleflight with
// one key: a caller joins the physical flush in progress, whatever it froze.
// Incorrect by design: a caller that joins a flush which froze before the
// caller's own write returns before that write is durable (a W4 violation).
// physical runs under a mutex too, only to give the race detector the
// happens-before edge that singleflight's one-call-at-a-time already
// implies.
func Singleflight(physical func(context.Context) error) func(context.Context) error {
	var sf singleflight.Group
	var mu sync.Mutex
	return func(ctx context.Context) error {
		_, err, _ := sf.Do("flush", func() (any, error) {
			mu.Lock()
			defer mu.Unlock()
			return nil, physical(ctx)
		})
		return err
	}
}

// GroupCommit returns the group commit a careful user writes on top of a
// physical flush: a caller that finds no flush running starts one (it
// freezes after the caller's write, so it covers it); a caller that finds
// one running cannot know whether it froze before its write, so it waits
// for it to end and then joins the flush that started after it (which
// froze after the caller's write) or, if none has, starts one. Every
// caller's write is durable when its Flush returns nil, and concurrent
// callers share physical flushes.
//
// A caller whose ctx ends while it waits returns ctx.Err(); the flush it
// waited for goes on. A flush runs with the context of the caller that
// started it.
func GroupCommit(physical func(context.Context) error) func(context.Context) error {
	g := &groupCommit{physical: physical}
	return g.flush
}

// flight is one physical flush and the callers waiting for it.
type flight struct {
	done chan struct{}
	err  error // written before done is closed
}

type groupCommit struct {
	physical func(context.Context) error
	mu       sync.Mutex
	running  *flight // the physical flush in progress, or nil; mu held
}

func (g *groupCommit) flush(ctx context.Context) error {
	g.mu.Lock()
	if f := g.running; f != nil {
		// f may have frozen before our write: wait for it to end.
		g.mu.Unlock()
		if err := wait(ctx, f); err != nil {
			return err
		}
		g.mu.Lock()
		if next := g.running; next != nil {
			// next started after f ended, so after our write: join it.
			g.mu.Unlock()
			if err := wait(ctx, next); err != nil {
				return err
			}
			return next.err
		}
	}
	f := &flight{done: make(chan struct{})}
	g.running = f
	g.mu.Unlock()
	f.err = g.physical(ctx)
	// Publication order: running is cleared before done is closed, so a
	// waiter woken by done never sees f as the flush to join.
	g.mu.Lock()
	g.running = nil
	g.mu.Unlock()
	close(f.done)
	return f.err
}

// wait waits for f to end or ctx to end, returning ctx.Err() in the latter
// case.
func wait(ctx context.Context, f *flight) error {
	select {
	case <-f.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
