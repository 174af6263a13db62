package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// A transaction checks names and changes several of them at once: here a
// compare-and-swap of a configuration file that also records which
// version is live, and a second attempt from a stale read, which changes
// nothing and says which check failed.
func ExampleClient_Txn() {
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

	h, err := c.Open(ctx, "/ls/example/config", client.Read|client.Write|client.Create, client.WithContents([]byte("v1")))
	if err != nil {
		fmt.Println("open:", err)
		return
	}
	defer h.Close()
	_, st, err := h.GetContentsAndStat(ctx)
	if err != nil {
		fmt.Println("read:", err)
		return
	}

	res, err := c.Txn(ctx).
		If(client.GenerationIs("/ls/example/config", st.ContentGen), client.Missing("/ls/example/live")).
		Then(client.OpSet("/ls/example/config", []byte("v2")), client.OpCreate("/ls/example/live", []byte("v2"))).
		Commit()
	if err != nil {
		fmt.Println("txn:", err)
		return
	}
	fmt.Println("committed both:", res.Generation > st.ContentGen)

	// The same transaction again: its generation is stale now.
	_, err = c.Txn(ctx).
		If(client.GenerationIs("/ls/example/config", st.ContentGen)).
		Then(client.OpSet("/ls/example/config", []byte("v3"))).
		Commit()
	var te *client.TxnError
	if errors.As(err, &te) && errors.Is(err, client.ErrGenerationMismatch) {
		fmt.Printf("check %d on %s failed\n", te.Check, te.Path)
	}
	// Output:
	// committed both: true
	// check 0 on /ls/example/config failed
}
