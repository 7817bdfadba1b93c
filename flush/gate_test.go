package flush

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

func TestGateZeroValue(t *testing.T) {
	var g Gate
	tok, err := g.Enter()
	if err != nil {
		t.Fatalf("Enter on zero Gate: %v", err)
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
	if _, err := g.Enter(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Enter after Close = %v, want ErrClosed", err)
	}
	<-g.Done()
	if err := g.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestGateCloseNeverEntered(t *testing.T) {
	var g Gate
	if !g.Shut() {
		t.Fatal("first Shut reported false")
	}
	if g.Shut() {
		t.Fatal("second Shut reported true")
	}
	<-g.Done()
	if _, err := g.Enter(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Enter = %v, want ErrClosed", err)
	}
	if n := g.InFlight(); n != 0 {
		t.Fatalf("InFlight after refused Enter = %d", n)
	}
}

func TestGateLeaveZeroToken(t *testing.T) {
	var g Gate
	g.Leave(Token{}) // must not panic or go negative
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
	synctest.Test(t, func(t *testing.T) {
		var g Gate
		toks := make([]Token, 3)
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
		if _, err := g.Enter(); !errors.Is(err, ErrClosed) {
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
	var g Gate
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
	rounds := 300
	if testing.Short() {
		rounds = 50
	}
	for range rounds {
		var g Gate
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
						if !errors.Is(err, ErrClosed) {
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
