package client_test

import (
	"context"
	"log"

	"lockcell/client"
)

// With RenewSession a long-running holder does not write its own
// reconnect loop: when the session expires the Client opens a new one and
// re-opens the handle, and the program only has to take the lock again.
// The lock is never kept across the expiry: another session may hold it
// in between, so the work under the old lock context must stop, and
// Acquire must be called again.
func ExampleConfig_renewSession() {
	cfg, err := client.ConfigFromEnv()
	if err != nil {
		log.Fatal(err)
	}
	cfg.RenewSession = true
	ctx := context.Background()
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	h, err := c.Open(ctx, "jobs/nightly", client.Read|client.Write|client.Create)
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	go func() {
		for ev := range c.Events() { // session events only
			switch ev.Kind {
			case client.Expired:
				log.Print("session expired: the lock is lost")
			case client.Renewed:
				log.Printf("new session %d", ev.Session)
			}
		}
	}()
	for {
		if err := h.Acquire(ctx, client.Exclusive); err != nil {
			log.Fatal(err) // ErrHandleInvalid: the node is gone (a ReopenFailed event says why)
		}
		// work stops when the lock may be lost (jeopardy; expiry, whose
		// cause matches client.ErrLockLost); the next Acquire takes it
		// again, in the renewed session if need be.
		if err := work(h.LockContext()); err == nil {
			h.Release(ctx)
			return
		}
	}
}

// work is the program's work under the lock: nil when done, or why it
// stopped.
func work(lock context.Context) error {
	<-lock.Done()
	return context.Cause(lock)
}
