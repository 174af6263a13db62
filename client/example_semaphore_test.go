package client_test

import (
	"context"
	"fmt"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// A semaphore of two permits: two holders at once, the third waits (FIFO)
// until one gives its permit back. Each holder's sequencer is its own:
// it goes stale when that holder lets go, whoever else still holds.
func ExampleClient_OpenSemaphore() {
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

	var sems []*client.Semaphore
	for range 3 {
		s, err := c.OpenSemaphore(ctx, "/ls/example/slots", 2)
		if err != nil {
			fmt.Println("open:", err)
			return
		}
		defer s.Close()
		sems = append(sems, s)
	}
	for _, s := range sems[:2] {
		if err := s.Acquire(ctx); err != nil {
			fmt.Println("acquire:", err)
			return
		}
	}
	ok, err := sems[2].TryAcquire(ctx)
	fmt.Println("third permit now:", ok, err)

	first, _ := sems[0].GetSequencer(ctx)
	second, _ := sems[1].GetSequencer(ctx)
	if err := sems[0].Release(ctx); err != nil {
		fmt.Println("release:", err)
		return
	}
	stale, _ := c.CheckSequencer(ctx, first)
	valid, _ := c.CheckSequencer(ctx, second)
	fmt.Println("released holder's sequencer valid:", stale, "other holder's:", valid)

	ok, err = sems[2].TryAcquire(ctx)
	_, held, _, _ := sems[2].Holders(ctx)
	fmt.Println("third permit after a release:", ok, err, "holders:", held, "of", sems[2].Limit())
	// Output:
	// third permit now: false <nil>
	// released holder's sequencer valid: false other holder's: true
	// third permit after a release: true <nil> holders: 2 of 2
}

// AcquireAll takes several locks all at once or not at all: two callers
// naming the same locks in opposite orders cannot deadlock.
func ExampleClient_AcquireAll() {
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
	open := func(name string) *client.Handle {
		h, err := c.Open(ctx, name, client.Read|client.Write|client.Create)
		if err != nil {
			panic(err)
		}
		return h
	}
	a, b := open("/ls/example/acct-a"), open("/ls/example/acct-b")
	defer a.Close()
	defer b.Close()
	if err := c.AcquireAll(ctx, a, b); err != nil {
		fmt.Println("acquire:", err)
		return
	}
	fmt.Println("both held:", a.LockContext().Err() == nil && b.LockContext().Err() == nil)

	// Another caller asking in the opposite order gets neither while they are held.
	b2, a2 := open("/ls/example/acct-b"), open("/ls/example/acct-a")
	defer b2.Close()
	defer a2.Close()
	ok, err := c.TryAcquireAll(ctx, b2, a2)
	fmt.Println("other order now:", ok, err)

	if err := c.ReleaseAll(ctx, a, b); err != nil {
		fmt.Println("release:", err)
		return
	}
	ok, err = c.TryAcquireAll(ctx, b2, a2)
	fmt.Println("other order after release:", ok, err)
	// Output:
	// both held: true
	// other order now: false <nil>
	// other order after release: true <nil>
}
