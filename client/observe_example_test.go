package client_test

import (
	"context"
	"fmt"
	"time"

	"lockcell/client"
)

// Observe follows an election from the outside: who leads, and when
// nobody does. Values are coalesced, so a slow reader gets the latest
// state rather than a backlog.
func ExampleClient_Observe() {
	cfg, stop := exampleCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	watcher, err := client.Dial(ctx, cfg)
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer watcher.Close()
	changes := watcher.Observe(ctx, "/ls/example/api-leader")

	candidate, err := client.Dial(ctx, cfg)
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer candidate.Close()
	lead, err := candidate.Campaign(ctx, "/ls/example/api-leader", []byte("host-b:9090"))
	if err != nil {
		fmt.Println("campaign:", err)
		return
	}
	for v := range changes {
		if !v.NoLeader {
			fmt.Printf("leader %s\n", v.Leader)
			break
		}
	}
	lead.Close() // resign
	for v := range changes {
		if v.NoLeader {
			fmt.Println("no leader")
			break
		}
	}
	// Output:
	// leader host-b:9090
	// no leader
}
