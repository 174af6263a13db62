package cell_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"lockcell/cell"
	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/master"
)

// A session may have at most MaxCallsPerSession calls in flight on its
// connection; the excess is answered "too many" and everyone else, the
// session included, keeps being served.
func TestCallsPerSessionAreCapped(t *testing.T) {
	const max = 4
	c := fixtures.NewCell(t, 1, fixtures.Options{ConnLimits: cell.ConnLimits{MaxCallsPerSession: max}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder, waiter := c.Client(t), c.Client(t)
	h, err := holder.Open(ctx, c.Name("capped"), client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Acquire(ctx, client.Exclusive); err != nil {
		t.Fatal(err)
	}
	// max+2 blocking Acquires of one session park on its connection (with
	// its KeepAlive): at least two of them must be refused.
	const tries = max + 2
	var wg sync.WaitGroup
	errs := make(chan error, tries)
	actx, acancel := context.WithCancel(ctx)
	var handles []*client.Handle
	for range tries {
		wh, err := waiter.Open(ctx, c.Name("capped"), client.Read|client.Write, client.WithoutCache())
		if err != nil {
			t.Fatal(err)
		}
		defer wh.Close()
		handles = append(handles, wh)
	}
	for i, wh := range handles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := wh.Acquire(actx, client.Exclusive)
			if err != nil && !errors.Is(err, client.ErrTooMany) && actx.Err() == nil {
				err = fmt.Errorf("acquire %d: %w", i, err)
			}
			errs <- err
		}()
	}
	refused := 0
	for refused < 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, client.ErrTooMany) {
				t.Fatalf("an acquire over the cap ended with %v, want too many", err)
			}
			refused++
		case <-ctx.Done():
			t.Fatal("no acquire was refused: the per-session cap does not hold")
		}
	}
	// The capped session's other calls and another session still work.
	if _, err := waiter.Sessions(ctx); err != nil && !errors.Is(err, client.ErrTooMany) {
		t.Fatalf("the capped session: %v", err)
	}
	if _, _, err := h.GetContentsAndStat(ctx); err != nil {
		t.Fatalf("another session: %v", err)
	}
	acancel()
	wg.Wait()
}

// A principal may hold at most SessionsPerPrincipal live sessions.
func TestSessionsPerPrincipalAreCapped(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{SessionLimits: master.Limits{SessionsPerPrincipal: 3}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var live []*client.Client
	for range 3 {
		live = append(live, c.Client(t))
	}
	_, err := client.Dial(ctx, c.ClientConfig())
	if !errors.Is(err, client.ErrTooMany) {
		t.Fatalf("a fourth session of one principal: %v, want too many", err)
	}
	// Closing one frees a place.
	live[0].Close()
	cl, err := client.Dial(ctx, c.ClientConfig())
	if err != nil {
		t.Fatalf("after closing a session: %v", err)
	}
	cl.Close()
}
