package client_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
)

// Every wait between tries lies in [BackoffBase, BackoffCap] and within
// three times the previous one, the first within three times the base;
// waits are spread (jitter). Until the waits add up to BackoffFastFor
// (the length of a master fail-over) none exceeds BackoffFastCap, so the
// new master is found soon after it serves; a longer search reaches the
// cap's region.
func TestBackoffJitterBounds(t *testing.T) {
	const runs, tries = 1000, 40
	firstMin, firstMax, top, fastTop := time.Hour, time.Duration(0), time.Duration(0), time.Duration(0)
	for range runs {
		waits := client.BackoffWaits(tries)
		prev, slept := client.BackoffBase, time.Duration(0)
		for i, w := range waits {
			if w < client.BackoffBase || w > client.BackoffCap {
				t.Fatalf("wait %d is %v, outside [%v, %v]", i, w, client.BackoffBase, client.BackoffCap)
			}
			if w > 3*prev {
				t.Fatalf("wait %d is %v, more than three times the previous %v", i, w, prev)
			}
			if slept < client.BackoffFastFor {
				if w > client.BackoffFastCap {
					t.Fatalf("wait %d is %v after %v of waiting, over the first second's cap %v", i, w, slept, client.BackoffFastCap)
				}
				fastTop = max(fastTop, w)
			}
			prev, slept = w, slept+w
			top = max(top, w)
		}
		firstMin, firstMax = min(firstMin, waits[0]), max(firstMax, waits[0])
	}
	// The first wait is uniform in [10 ms, 30 ms]: over a thousand runs
	// both ends of the range are approached.
	if firstMin > 12*time.Millisecond || firstMax < 28*time.Millisecond {
		t.Fatalf("first waits span [%v, %v]: not spread over [10ms, 30ms]", firstMin, firstMax)
	}
	if fastTop < client.BackoffFastCap*8/10 {
		t.Fatalf("the longest wait in the first %v of %d searches is %v: waits do not grow toward %v", client.BackoffFastFor, runs, fastTop, client.BackoffFastCap)
	}
	if top < client.BackoffCap*8/10 {
		t.Fatalf("the longest wait in %d searches of %d tries is %v: waits do not grow toward the cap", runs, tries, top)
	}
}

// unreachable is a Dialer for which every replica is unreachable (not a
// refusal, so Dial keeps trying); it counts the tries.
func unreachable(tries *atomic.Int64) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		tries.Add(1)
		return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("network is unreachable")}
	}
}

// While no replica can be reached, a call backs off and tries again until
// its context ends (then it fails with the context's error, not
// ErrNoMaster) or RetryTimeout passes (then ErrNoMaster).
func TestRetryLoopContextAndBudget(t *testing.T) {
	addrs := []string{"192.0.2.1:1", "192.0.2.2:1"}
	var tries atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	_, err := client.Dial(ctx, client.Config{Cell: "t", Replicas: addrs, RetryTimeout: time.Minute, Dialer: unreachable(&tries)})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, client.ErrNoMaster) {
		t.Fatalf("Dial whose context ends first: %v, want context.DeadlineExceeded", err)
	}
	if tries.Load() < 2 {
		t.Fatalf("Dial tried %d times before its context ended, want a retry", tries.Load())
	}

	tries.Store(0)
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = client.Dial(ctx, client.Config{Cell: "t", Replicas: addrs, RetryTimeout: 300 * time.Millisecond, Dialer: unreachable(&tries)})
	if !errors.Is(err, client.ErrNoMaster) {
		t.Fatalf("Dial past RetryTimeout: %v, want ErrNoMaster", err)
	}
	if tries.Load() < 2 {
		t.Fatalf("Dial tried %d times within RetryTimeout, want a retry", tries.Load())
	}
}

// A call sent to a follower follows its NotMaster redirect to the master;
// with the cell's quorum gone, a call ends with its context, long before
// RetryTimeout.
func TestRetryLoopRedirectAndCancel(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	m := c.WaitForMaster(30 * time.Second)
	cl := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := cl.Open(ctx, c.Name("f"), client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	follower := (m + 1) % 3
	cl.BelieveMaster(c.Addrs()[follower])
	if err := h.SetContents(ctx, []byte("x")); err != nil {
		t.Fatalf("write sent to a follower: %v", err)
	}
	if got := admin.New(cl).Master(); got != c.Addrs()[m] {
		t.Fatalf("after the redirect the client believes %s is master, want %s", got, c.Addrs()[m])
	}
	// It keeps no connection to the replica that redirected it.
	if open := cl.OpenConns(); len(open) != 1 || open[0] != c.Addrs()[m] {
		t.Fatalf("after the redirect the client holds connections to %v; want the master %s only", open, c.Addrs()[m])
	}

	// No quorum: the call backs off between tries until its context ends.
	others := []int{follower, (m + 2) % 3}
	for _, i := range others {
		c.Stop(i)
	}
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelShort()
	start := time.Now()
	err = h.SetContents(short, []byte("y"))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, client.ErrNoMaster) {
		t.Fatalf("write without a quorum: %v, want context.DeadlineExceeded", err)
	}
	// RetryTimeout is 20 s: anything near it means ctx was not honoured.
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("write without a quorum returned after %v", took)
	}
	for _, i := range others {
		c.Start(i)
	}
	if _, err := h.GetStat(ctx); err != nil {
		t.Fatalf("stat once the quorum is back: %v", err)
	}
}
