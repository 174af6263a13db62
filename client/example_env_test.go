package client_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// ConfigFromEnv reads what the lockcell CLI reads, with its defaults;
// names without a leading "/" are relative to /ls/<cell>; CloseContext
// (and Close, within Config.CloseTimeout) never waits past its bound.
func ExampleConfigFromEnv() {
	dev, stop := fixtures.ExampleCell()
	defer stop()
	// A shell set up for the CLI has these exported already.
	os.Setenv(client.EnvCell, dev.Cell)
	os.Setenv(client.EnvReplicas, strings.Join(dev.Replicas, ","))
	defer os.Unsetenv(client.EnvCell)
	defer os.Unsetenv(client.EnvReplicas)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	cfg, err := client.ConfigFromEnv()
	if err != nil {
		fmt.Println(err) // an *EnvError: the variable, its value and what is wrong
		return
	}
	cfg.Logger = fixtures.Logger()
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	h, err := c.Open(ctx, "jobs", client.Read|client.Write|client.Create|client.Directory)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(h.Name())
	closeCtx, cancelClose := context.WithTimeout(ctx, time.Second)
	defer cancelClose()
	fmt.Println(h.CloseContext(closeCtx))
	// Output:
	// /ls/example/jobs
	// <nil>
}
