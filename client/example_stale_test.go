package client_test

import (
	"context"
	"fmt"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// A read that may be a little stale is given a bound: a replica other
// than the master answers it from its own state when it can prove that
// state misses no write older than the bound, and never one this client
// made or saw; otherwise the master answers. Such reads are never cached.
// WithReadInfo tells who answered.
func ExampleMaxStaleness() {
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
	h, err := c.Open(ctx, "/ls/example/flags", client.Read|client.Write|client.Create)
	if err != nil {
		fmt.Println("open:", err)
		return
	}
	defer h.Close()
	if err := h.SetContents(ctx, []byte("beta=on")); err != nil {
		fmt.Println("write:", err)
		return
	}
	var info client.ReadInfo
	data, _, err := h.GetContentsAndStat(ctx, client.MaxStaleness(2*time.Second), client.WithReadInfo(&info))
	if err != nil {
		fmt.Println("read:", err)
		return
	}
	// Whoever answered (info.Replica; info.Follower is false when the
	// master did), the read sees this client's own write.
	fmt.Printf("%s\n", data)
	// Output: beta=on
}
