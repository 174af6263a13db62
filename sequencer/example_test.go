package sequencer_test

import (
	"context"
	"errors"
	"fmt"

	"lockcell/sequencer"
)

// demoKey stands in for the cell's key: only a cell signs sequencers, and
// clients get them from client.Handle's GetSequencer.
var demoKey = []byte("demo key; a cell keeps its own in its replicated state")

// A resource server runs each write inside Guard.Do: once a holder of a
// newer generation of the lock has written, an older holder is refused
// with ErrStale, and its write never runs.
func ExampleGuard() {
	ctx := context.Background()
	old := sequencer.Sign(demoKey, sequencer.Sequencer{Cell: "local", Path: "/ls/local/orders", Mode: sequencer.Exclusive, Generation: 41})
	cur := sequencer.Sign(demoKey, sequencer.Sequencer{Cell: "local", Path: "/ls/local/orders", Mode: sequencer.Exclusive, Generation: 57})

	// Checker: a *client.Client asks the cell; without one the guard
	// fences locally only.
	g := sequencer.NewGuard(sequencer.GuardConfig{Cell: "local"})
	store := map[string]string{}
	put := func(seq []byte, v string) error {
		_, err := g.Do(ctx, seq, func(s sequencer.Sequencer) error {
			store["total"] = v // the protected write, inside the lock's fence
			return nil
		})
		return err
	}

	fmt.Println(put(old, "10")) // the first holder writes
	fmt.Println(put(cur, "20")) // its successor writes
	err := put(old, "15")       // the first holder comes back from a pause
	fmt.Println(errors.Is(err, sequencer.ErrStale), store["total"])
	fmt.Println(g.Highest(sequencer.Sequencer{Cell: "local", Path: "/ls/local/orders"}))
	// Output:
	// <nil>
	// <nil>
	// true 20
	// 57
}

// Parse reads a sequencer's fields; only the cell can check its
// signature (client.CheckSequencer, or a Guard with a Checker).
// EncodeText gives the form sent in headers and environment variables.
func ExampleParse() {
	seq := sequencer.Sign(demoKey, sequencer.Sequencer{Cell: "local", Path: "/ls/local/orders", Mode: sequencer.Shared, Generation: 7})
	text := sequencer.EncodeText(seq) // e.g. the Lockcell-Sequencer header
	raw, err := sequencer.DecodeText(text)
	if err != nil {
		fmt.Println(err)
		return
	}
	s, err := sequencer.Parse(raw)
	fmt.Println(s, err)
	_, err = sequencer.Parse(raw[:5])
	fmt.Println(errors.Is(err, sequencer.ErrMalformed))
	// Output:
	// /ls/local/orders shared generation 7 (cell local) <nil>
	// true
}
