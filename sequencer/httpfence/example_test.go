package httpfence_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"lockcell/client"
	"lockcell/sequencer"
	"lockcell/sequencer/httpfence"
)

// Wrap puts the guard in front of a handler: the handler sees the admitted
// sequencer in the request's context, and an older holder of the lock is
// refused with 409 once a newer one has been admitted.
func ExampleWrap() {
	// A real server gives the guard a Checker (a *client.Client), so that
	// the cell vouches for each sequencer; these stand-ins are signed
	// locally, as only a cell would.
	key := []byte("stands in for the cell's key")
	holder := func(gen uint64) []byte {
		return sequencer.Sign(key, sequencer.Sequencer{Cell: "local", Path: "/ls/local/ledger", Mode: sequencer.Exclusive, Generation: gen})
	}

	ledger := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, _ := httpfence.FromContext(r.Context())
		fmt.Fprintf(w, "written under %s generation %d", s.Path, s.Generation)
	})
	guard := sequencer.NewGuard(sequencer.GuardConfig{Cell: "local"})
	srv := httptest.NewServer(httpfence.Wrap(ledger, httpfence.Config{Guard: guard}))
	defer srv.Close()

	post := func(seq []byte) {
		req, _ := http.NewRequest("POST", srv.URL+"/entries", strings.NewReader("entry"))
		if seq != nil {
			httpfence.SetHeader(req.Header, seq)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		fmt.Println(resp.StatusCode, strings.TrimSpace(string(body)))
	}
	post(holder(12)) // the first holder
	post(holder(15)) // the lock moved on
	post(holder(12)) // the first holder, back from a pause
	post(nil)
	// Output:
	// 200 written under /ls/local/ledger generation 12
	// 200 written under /ls/local/ledger generation 15
	// 409 {"error":"httpfence: this lock holder has been superseded; stop and re-acquire the lock: sequencer: stale: /ls/local/ledger generation 12 is older than 15, already accepted","reason":"stale","lock":"/ls/local/ledger","generation":12,"highest":15}
	// 400 {"error":"httpfence: no sequencer: no Lockcell-Sequencer header (the lock holder's sequencer)","reason":"missing"}
}

// Attach sends a held lock's sequencer with a request, so that the
// resource server can refuse it once the lock has moved on.
func ExampleAttach() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Config{Cell: "local", Replicas: []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	h, err := c.Open(ctx, "/ls/local/ledger", client.Read|client.Write|client.Create)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Close()
	if err := h.Acquire(ctx, client.Exclusive); err != nil {
		fmt.Println(err)
		return
	}

	req, _ := http.NewRequestWithContext(ctx, "POST", "http://ledger.internal/entries", strings.NewReader("entry"))
	if err := httpfence.Attach(ctx, req, h); err != nil {
		fmt.Println(err) // errors.Is(err, client.ErrNotHeld): the lock is gone; do not send
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusConflict {
		// This client's hold is over: stop, and re-acquire before writing again.
		fmt.Println("superseded")
	}
}
