package flush

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/kvbuf/kvbuf/internal/kverr"
)

func TestGateZeroValue(t *testing.T) {
	var g drainGate
	tok, err := g.Enter()
	if err != nil {
		t.Fatalf("Enter on zero drainGate: %v", err)
	}
	if n := g.InFlight(); n != 1 {
		t.Fatalf("InFlight = %d, want 1", n)
	}
	select {
	case <-g.Done():
		t.Fatal("Done closed before Close")
	default:
	}
	g.Leave(tok)
	if n := g.InFlight(); n != 0 {
		t.Fatalf("InFlight = %d, want 0", n)
	}
	g.Close()
	if _, err := g.Enter(); !errors.Is(err, kverr.ErrClosed) {
		t.Fatalf("Enter after Close = %v, want kverr.ErrClosed", err)
	}
	<-g.Done()
	if err := g.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestGateCloseNeverEntered(t *testing.T) {
	var g drainGate
	if !g.Shut() {
		t.Fatal("first Shut reported false")
	}
	if g.Shut() {
		t.Fatal("second Shut reported true")
	}
	<-g.Done()
	if _, err := g.Enter(); !errors.Is(err, kverr.ErrClosed) {
		t.Fatalf("Enter = %v, want kverr.ErrClosed", err)
	}
	if n := g.InFlight(); n != 0 {
		t.Fatalf("InFlight after refused Enter = %d", n)
	}
}

func TestGateLeaveZeroToken(t *testing.T) {
	var g drainGate
	g.Leave(gateToken{}) // must not panic or go negative
	if n := g.InFlight(); n != 0 {
		t.Fatalf("InFlight = %d", n)
	}
	tok, _ := g.Enter()
	g.Shut()
	select {
	case <-g.Done():
		t.Fatal("drained with an operation in flight")
	default:
	}
	g.Leave(tok)
	<-g.Done()
}

func TestGateCloseWaitsAndObservers(t *testing.T) {
	for _, striped := range []bool{false, true} {
		t.Run(fmt.Sprint("striped=", striped), func(t *testing.T) { gateCloseWaits(t, striped) })
	}
}

func gateCloseWaits(t *testing.T, striped bool) {
	synctest.Test(t, func(t *testing.T) {
		var g drainGate
		if striped {
			g.Stripe()
			g.Stripe() // no-op
		}
		toks := make([]gateToken, 3)
		for i := range toks {
			var err error
			if toks[i], err = g.Enter(); err != nil {
				t.Fatal(err)
			}
		}
		var observed atomic.Int32
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				if err := g.Wait(context.Background()); err != nil {
					t.Error(err)
				}
				observed.Add(1)
			})
		}
		closed := make(chan struct{})
		go func() { g.Close(); close(closed) }()
		synctest.Wait()
		if _, err := g.Enter(); !errors.Is(err, kverr.ErrClosed) {
			t.Fatalf("Enter during drain = %v", err)
		}
		for i, tok := range toks {
			synctest.Wait()
			select {
			case <-closed:
				t.Fatalf("Close returned with %d operations in flight", len(toks)-i)
			default:
			}
			if observed.Load() != 0 {
				t.Fatal("observer woke early")
			}
			g.Leave(tok)
		}
		<-closed
		wg.Wait()
		if observed.Load() != 4 {
			t.Fatalf("%d observers woke, want 4", observed.Load())
		}
	})
}

func TestGateWaitContext(t *testing.T) {
	var g drainGate
	tok, _ := g.Enter()
	defer g.Leave(tok)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
}

// TestGateCloseRaceStress races Close against Enter many times: an operation
// admitted after the drain completed would see drained == true.
func TestGateCloseRaceStress(t *testing.T) {
	for _, striped := range []bool{false, true} {
		t.Run(fmt.Sprint("striped=", striped), func(t *testing.T) { gateStress(t, striped) })
	}
}

func gateStress(t *testing.T, striped bool) {
	rounds := 300
	if testing.Short() {
		rounds = 50
	}
	for range rounds {
		var g drainGate
		if striped {
			g.Stripe()
		}
		var drained atomic.Bool
		var late atomic.Int64
		var admitted atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 6 {
			wg.Go(func() {
				<-start
				for range 200 {
					tok, err := g.Enter()
					if err != nil {
						if !errors.Is(err, kverr.ErrClosed) {
							t.Errorf("Enter: %v", err)
						}
						return
					}
					admitted.Add(1)
					if drained.Load() {
						late.Add(1)
					}
					g.Leave(tok)
				}
			})
		}
		obs := make(chan struct{})
		go func() {
			<-g.Done()
			drained.Store(true)
			close(obs)
		}()
		close(start)
		g.Close()
		if n := g.InFlight(); n < 0 {
			t.Fatalf("InFlight = %d after drain", n)
		}
		<-obs
		wg.Wait()
		if late.Load() != 0 {
			t.Fatalf("%d operations admitted after the drain completed", late.Load())
		}
	}
}

// Many goroutines in a striped gate: the count stays exact.
func TestGateStripedInFlight(t *testing.T) {
	var g drainGate
	g.Stripe()
	const n = 32
	toks := make(chan gateToken, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			tok, err := g.Enter()
			if err != nil {
				t.Error(err)
			}
			toks <- tok
		})
	}
	wg.Wait()
	if got := g.InFlight(); got != n {
		t.Fatalf("InFlight = %d, want %d", got, n)
	}
	g.Shut()
	for range n - 1 {
		g.Leave(<-toks)
	}
	select {
	case <-g.Done():
		t.Fatal("drained with one operation in flight")
	default:
	}
	g.Leave(<-toks)
	<-g.Done()
	if got := g.InFlight(); got != 0 {
		t.Fatalf("InFlight = %d after drain", got)
	}
}
