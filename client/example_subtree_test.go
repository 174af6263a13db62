package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// WatchSubtree reports every change below a directory with its position.
// A program saves the position of the last change it handled (here in a
// string; on disk in practice) and, after a restart, resumes from it with
// FromPosition: it gets the next change, none missed and none twice. If
// the cell's history no longer reaches back that far, the watch says so
// with ErrHistoryCompacted and the program re-reads instead.
func ExampleHandle_WatchSubtree() {
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
	if err := c.MkdirAll(ctx, "/ls/example/svc/a"); err != nil {
		fmt.Println("mkdir:", err)
		return
	}
	dir, err := c.Open(ctx, "/ls/example/svc", client.Read|client.Directory)
	if err != nil {
		fmt.Println("open:", err)
		return
	}
	defer dir.Close()

	w, err := dir.WatchSubtree(ctx)
	if err != nil {
		fmt.Println("watch:", err)
		return
	}
	put := func(name, v string) {
		h, err := c.Open(ctx, name, client.Write|client.Create)
		if err == nil {
			err = h.SetContents(ctx, []byte(v))
			h.Close()
		}
		if err != nil {
			fmt.Println("put:", err)
		}
	}
	put("/ls/example/svc/a/config", "v1")
	var saved string
	for ev := range w.Events() {
		if ev.Kind == client.Progress {
			saved = ev.Position.String()
			continue
		}
		fmt.Println(ev.Kind, ev.Path)
		saved = ev.Position.String() // handled: a restart goes on after it
		if ev.Kind == client.NodeContentsChanged {
			break
		}
	}
	w.Stop() // the program goes away; meanwhile the file changes again
	put("/ls/example/svc/a/config", "v2")

	from, err := client.ParsePosition(saved)
	if err != nil {
		fmt.Println("position:", err)
		return
	}
	w, err = dir.WatchSubtree(ctx, client.FromPosition(from))
	if errors.Is(err, client.ErrHistoryCompacted) {
		fmt.Println("too far behind: re-read /ls/example/svc")
		return
	}
	if err != nil {
		fmt.Println("watch:", err)
		return
	}
	defer w.Stop()
	for ev := range w.Events() {
		if ev.Kind != client.Progress {
			fmt.Println("resumed:", ev.Kind, ev.Path)
			break
		}
	}
	// Output:
	// created /ls/example/svc/a/config
	// contents /ls/example/svc/a/config
	// resumed: contents /ls/example/svc/a/config
}
