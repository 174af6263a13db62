package client_test

import (
	"context"
	"fmt"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// A waiter asks the holder of a lock to let go (RequestRelease, with a
// reason); the holder hears who asked and why on its handle's Events (a
// ReleaseRequested event), finishes its work and releases, and the
// waiter's Acquire is granted.
func ExampleHandle_RequestRelease() {
	cfg, stop := fixtures.ExampleCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder, err := client.Dial(ctx, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer holder.Close()
	waiter, err := client.Dial(ctx, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer waiter.Close()
	const name = "/ls/example/report"
	h, err := holder.Open(ctx, name, client.Read|client.Write|client.Create)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := h.Acquire(ctx, client.Exclusive); err != nil {
		fmt.Println(err)
		return
	}
	heard, done := make(chan client.ReleaseRequest, 1), make(chan error, 1)
	go func() { // the holder's work loop
		for {
			select {
			case e := <-h.Events():
				if e.Kind != client.ReleaseRequested {
					continue
				}
				heard <- *e.ReleaseRequest
				done <- h.Release(ctx) // after winding the work down
			case <-h.LockContext().Done():
				close(heard)
				done <- context.Cause(h.LockContext())
			}
			return
		}
	}()

	w, err := waiter.Open(ctx, name, client.Read|client.Write)
	if err != nil {
		fmt.Println(err)
		return
	}
	n, err := w.RequestRelease(ctx, "the deploy needs the report lock")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("holders asked:", n)
	rr, ok := <-heard
	if !ok {
		fmt.Println("the lock was lost:", <-done)
		return
	}
	fmt.Printf("the holder was asked to let go of %s: %q\n", rr.Path, rr.Reason)
	if err := w.Acquire(ctx, client.Exclusive); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("holder released:", <-done == nil)
	fmt.Println("the waiter holds it:", w.LockContext().Err() == nil)
	// Output:
	// holders asked: 1
	// the holder was asked to let go of /ls/example/report: "the deploy needs the report lock"
	// holder released: true
	// the waiter holds it: true
}
