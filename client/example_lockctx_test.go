package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// LockContext is live while the handle holds its lock and the client can
// be sure of it; work done under the lock runs under it, so it stops the
// moment the lock may be gone (jeopardy, expiry, Release, Close, the
// node's deletion). context.Cause says why it ended.
func ExampleHandle_LockContext() {
	cfg, stop := fixtures.ExampleCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer c.Close()

	h, err := c.Open(ctx, "/ls/example/batch", client.Read|client.Write|client.Create)
	if err != nil {
		fmt.Println("open:", err)
		return
	}
	defer h.Close()
	if err := h.Acquire(ctx, client.Exclusive); err != nil {
		fmt.Println("acquire:", err)
		return
	}

	lockCtx := h.LockContext()
	done := make(chan error)
	go func() { // the work done under the lock
		<-lockCtx.Done() // a real worker checks lockCtx between steps
		done <- context.Cause(lockCtx)
	}()

	if err := h.Release(ctx); err != nil {
		fmt.Println("release:", err)
		return
	}
	cause := <-done
	fmt.Println("work stopped, released:", errors.Is(cause, client.ErrReleased))

	// An ended context stays ended; acquiring again starts a new one.
	if err := h.Acquire(ctx, client.Exclusive); err != nil {
		fmt.Println("acquire:", err)
		return
	}
	fmt.Println("old ended:", lockCtx.Err() != nil, "new live:", h.LockContext().Err() == nil)
	// Output:
	// work stopped, released: true
	// old ended: true new live: true
}
