package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/sequencer/httpfence"
)

// TestFencedStoreRefuses runs the store against a cell and writes with a
// real lock's sequencer, then with sequencers it must refuse: none, a
// malformed one, a forged one (a real one with its signature altered), the
// lock's sequencer after the lock was released (the cell no longer
// vouches for it), and an older holder's after a newer one wrote.
func TestFencedStoreRefuses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the example binary against a cell; skipped with -short")
	}
	bin := fixtures.Binary{Pkg: "./examples/fencedstore"}.Build(t)
	c := fixtures.NewCell(t, 1, fixtures.Options{})
	env := []string{"LOCKCELL_CELL=" + c.Options().Cell, "LOCKCELL_REPLICAS=" + strings.Join(c.Addrs(), ",")}
	p := fixtures.StartLineProc(t, "fencedstore", bin, env, "-listen", "127.0.0.1:0")
	_, m := p.WaitLine(t, 0, regexp.MustCompile(`^listening (\S+)$`), 30*time.Second)
	url := "http://" + m[1] + "/write?writer=test&n=1"

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := c.Client(t)
	h, err := cl.Open(ctx, "fencedstore-test/lock", client.Read|client.Write|client.Create, client.WithParents())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Acquire(ctx, client.Exclusive); err != nil {
		t.Fatal(err)
	}
	first, err := h.GetSequencer(ctx)
	if err != nil {
		t.Fatal(err)
	}

	post := func(header string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", url, strings.NewReader("v"))
		if header != "" {
			req.Header.Set(httpfence.Header, header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	text := func(seq []byte) string {
		hd := http.Header{}
		httpfence.SetHeader(hd, seq)
		return hd.Get(httpfence.Header)
	}
	want := func(what string, status int, reason, header string) {
		t.Helper()
		got, body := post(header)
		if got != status || !strings.HasPrefix(body, reason) {
			t.Errorf("%s: %d %q; want %d %s", what, got, body, status, reason)
		}
	}

	want("the holder", http.StatusOK, "stored", text(first))
	want("no sequencer", http.StatusBadRequest, "missing", "")
	want("not a sequencer", http.StatusBadRequest, "malformed", "bm90IGEgc2VxdWVuY2Vy")
	forged := append([]byte(nil), first...)
	forged[len(forged)-1] ^= 1
	want("a forged sequencer", http.StatusConflict, "forged", text(forged))

	// Released, the lock's sequencer is stale once the store's
	// confirmation from the cell is older than its cache (1 s).
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got, body := post(text(first))
		if got == http.StatusConflict && strings.HasPrefix(body, "stale") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a released lock's sequencer: %d %q; want 409 stale", got, body)
		}
	}

	// A newer holder writes; the older one's sequencer is refused locally.
	if err := h.Acquire(ctx, client.Exclusive); err != nil {
		t.Fatal(err)
	}
	second, err := h.GetSequencer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if second.Generation() <= first.Generation() {
		t.Fatalf("generation %d after %d", second.Generation(), first.Generation())
	}
	want("the newer holder", http.StatusOK, "stored", text(second))
	want("the older holder", http.StatusConflict, "stale", text(first))
}
