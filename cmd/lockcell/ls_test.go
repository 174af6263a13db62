package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/wire"
)

// lsBigName is the i-th child of the big directory: 255 bytes, sorting in
// creation order.
func lsBigName(i int) string {
	p := fmt.Sprintf("%06d-", i)
	return p + strings.Repeat("x", 255-len(p))
}

// lsBigChildren 255-byte names make a listing over the frame limit (260
// bytes an entry) and two pages.
const lsBigChildren = 6200

// ls, ls --json and shell completion work on a directory whose listing is
// larger than a frame: before listings paged, ls failed with "no master
// reachable" after retrying the overflowing reply.
func TestLsLargeDirectory(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	flags := []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "60s"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if lsBigChildren*(255+5) <= wire.MaxFrameSize {
		t.Fatal("the listing would fit in one frame: the test proves nothing")
	}
	maker := c.Client(t)
	if _, err := maker.Open(ctx, c.Name("big"), client.Read|client.Create|client.Directory); err != nil {
		t.Fatal(err)
	}
	// 16 creators; the creating handles stay open until the client closes.
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < lsBigChildren; i += 16 {
				if _, err := maker.Open(ctx, c.Name("big/"+lsBigName(i)), client.Read|client.Write|client.Create); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	want := make([]string, lsBigChildren)
	for i := range want {
		want[i] = lsBigName(i)
	}

	t.Run("Plain", func(t *testing.T) {
		r := cliRunner{t, flags}
		got := strings.Split(strings.TrimSuffix(r.ok("ls", "big").stdout, "\n"), "\n")
		if !slices.Equal(got, want) {
			t.Fatalf("ls big: %d lines, want the %d names in order", len(got), len(want))
		}
	})
	t.Run("JSON", func(t *testing.T) {
		var out struct {
			Name    string
			Entries []struct {
				Name string
				Dir  bool
			}
		}
		res := cliRunner{t, flags}.ok("--json", "ls", "big")
		if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
			t.Fatalf("ls --json is not one JSON document: %v", err)
		}
		if strings.Count(res.stdout, "\n") != 1 {
			t.Fatalf("ls --json printed %d lines, want one document on one line", strings.Count(res.stdout, "\n"))
		}
		got := make([]string, len(out.Entries))
		for i, e := range out.Entries {
			got[i] = e.Name
		}
		if out.Name != c.Name("big") || !slices.Equal(got, want) {
			t.Fatalf("ls --json: name %q, %d entries; want %q and the %d names", out.Name, len(got), c.Name("big"), len(want))
		}
	})
	t.Run("Recursive", func(t *testing.T) {
		// ls -R pages through big directories as ls does.
		got := strings.Split(strings.TrimSuffix(cliRunner{t, flags}.ok("ls", "-R", "big").stdout, "\n"), "\n")
		if len(got) == 0 || got[0] != c.Name("big")+":" || !slices.Equal(got[1:], want) {
			t.Fatalf("ls -R big: %d lines, want a %s: line and the %d names in order", len(got), c.Name("big"), len(want))
		}
	})
	t.Run("CompleteOnALaterPage", func(t *testing.T) {
		var out, errb bytes.Buffer
		e := &env{stdout: &out, stderr: &errb, cell: "t", replicas: c.Addrs(), timeout: 20 * time.Second}
		sh := newShell(e)
		defer sh.close()
		// 006100-... to 006199-...: past the first page of 4096.
		word, got := sh.complete("cat big/0061", len("cat big/0061"))
		if word != "big/0061" || len(got) != 100 || got[0] != "big/"+lsBigName(6100) || got[99] != "big/"+lsBigName(6199) {
			t.Fatalf("complete big/0061: word %q, %d candidates (want 100, %s..%s)", word, len(got), lsBigName(6100)[:8], lsBigName(6199)[:8])
		}
	})
}

// The completion cursor sorts just before the first name with the prefix
// and after every name before it.
func TestBeforePrefix(t *testing.T) {
	names := []string{"a", "ez", "ez-", "ezzz", "f", "f-1", "fa", "fz", "fzz", "g", "g.", "ga"}
	for _, p := range []string{"f", "fz", "g", "a", "ez", "h"} {
		cur := beforePrefix(p)
		for _, n := range names {
			if strings.HasPrefix(n, p) && !(n > cur) {
				t.Errorf("prefix %q: cursor %q does not come before %q", p, cur, n)
			}
			if n < p && !(n < cur) {
				t.Errorf("prefix %q: cursor %q does not come after %q", p, cur, n)
			}
		}
	}
	if beforePrefix("") != "" {
		t.Errorf("empty prefix: cursor %q, want the start", beforePrefix(""))
	}
}
