package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// Dial starts a session with the cell; Open gives a handle on a file (here
// creating it); Acquire takes its lock, waiting for it as long as ctx
// allows; GetSequencer gives the lock's sequencer to hand to resource
// servers.
func ExampleDial() {
	cfg, stop := fixtures.ExampleCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	c, err := client.Dial(ctx, cfg) // cfg: the cell's name and some replicas' addresses
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer c.Close()

	h, err := c.Open(ctx, "/ls/example/jobs", client.Read|client.Write|client.Create,
		client.WithContents([]byte("nightly")))
	if err != nil {
		fmt.Println("open:", err)
		return
	}
	defer h.Close()
	if err := h.Acquire(ctx, client.Exclusive); err != nil {
		fmt.Println("acquire:", err)
		return
	}
	data, st, err := h.GetContentsAndStat(ctx)
	if err != nil {
		fmt.Println("read:", err)
		return
	}
	fmt.Printf("%s holds %s lock, contents %q\n", h.Name(), st.LockMode, data)

	seq, err := h.GetSequencer(ctx)
	if err != nil {
		fmt.Println("sequencer:", err)
		return
	}
	fmt.Println("sequencer for", seq.Path(), seq.Mode()) // its fields, with no call

	if err := h.Release(ctx); err != nil {
		fmt.Println("release:", err)
	}
	_, err = h.GetSequencer(ctx)
	fmt.Println("after Release:", errors.Is(err, client.ErrNotHeld))
	// Output:
	// /ls/example/jobs holds exclusive lock, contents "nightly"
	// sequencer for /ls/example/jobs exclusive
	// after Release: true
}

// A handle opened WithEvents delivers the events it asks for on its own
// Handle.Events; Client.Events carries only the session's (jeopardy,
// safe, expired, renewed, master fail-over).
func ExampleWithEvents() {
	cfg, stop := fixtures.ExampleCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	watcher, err := client.Dial(ctx, cfg)
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer watcher.Close()
	dir, err := watcher.Open(ctx, "/ls/example/members", client.Read|client.Write|client.Create|client.Directory,
		client.WithEvents(client.OnChildAdded))
	if err != nil {
		fmt.Println("open:", err)
		return
	}
	defer dir.Close()

	// Another session joins by creating a child.
	member, err := client.Dial(ctx, cfg)
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer member.Close()
	h, err := member.Open(ctx, "/ls/example/members/worker-1", client.Write|client.Create)
	if err != nil {
		fmt.Println("join:", err)
		return
	}
	defer h.Close()

	for {
		select {
		case e := <-dir.Events():
			if e.Kind == client.ChildAdded {
				fmt.Println(e.Kind, e.Path, e.Child)
				return
			}
		case <-ctx.Done():
			fmt.Println("no event:", ctx.Err())
			return
		}
	}
	// Output:
	// child-added /ls/example/members worker-1
}
