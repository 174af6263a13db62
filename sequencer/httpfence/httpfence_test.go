package httpfence_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/sequencer"
	"lockcell/sequencer/httpfence"
)

// recorder is a resource handler that records the sequencer each admitted
// request carried and echoes the body.
type recorder struct {
	mu   sync.Mutex
	seen []sequencer.Sequencer
	none int // requests admitted without a sequencer
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s, ok := httpfence.FromContext(r.Context())
	rec.mu.Lock()
	if ok {
		rec.seen = append(rec.seen, s)
	} else {
		rec.none++
	}
	rec.mu.Unlock()
	w.Write(body)
}

func (rec *recorder) count() (int, int) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return len(rec.seen), rec.none
}

type reply struct {
	status int
	body   string
}

func (a reply) errBody(t *testing.T) httpfence.ErrorBody {
	t.Helper()
	var e httpfence.ErrorBody
	if err := json.Unmarshal([]byte(a.body), &e); err != nil || e.Error == "" || e.Reason == "" {
		t.Fatalf("error body %q: %v", a.body, err)
	}
	return e
}

// send POSTs body to url with the header set to header (none if "").
func send(t *testing.T, url, header, body string) reply {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if header != "" {
		req.Header.Set(httpfence.Header, header)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) reply {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, string(b)}
}

// holder takes name's lock exclusively in its own session and returns the
// handle and its sequencer.
func holder(t *testing.T, ctx context.Context, c *fixtures.Cell, name string) (*client.Handle, []byte) {
	t.Helper()
	h, err := c.Client(t).Open(ctx, name, client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Acquire(ctx, client.Exclusive); err != nil {
		t.Fatal(err)
	}
	seq, err := h.GetSequencer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return h, seq
}

// A guard without a Checker: the holder's requests pass with its
// sequencer in the context; once the lock has moved on and the new holder
// has been admitted, the old holder is refused with 409 and the handler
// never runs for it.
func TestMiddlewareRefusesTheOldHolder(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec := &recorder{}
	srv := httptest.NewServer(httpfence.Wrap(rec, httpfence.Config{Guard: sequencer.NewGuard(sequencer.GuardConfig{Cell: "t"})}))
	defer srv.Close()
	name := c.Name("job")

	hA, _ := holder(t, ctx, c, name)
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/write", strings.NewReader("from A"))
	if err := httpfence.Attach(ctx, req, hA); err != nil {
		t.Fatal(err)
	}
	oldHeader := req.Header.Get(httpfence.Header)
	if a := do(t, req); a.status != 200 || a.body != "from A" {
		t.Fatalf("the holder's request: %d %s", a.status, a.body)
	}
	if err := hA.Release(ctx); err != nil {
		t.Fatal(err)
	}
	req, _ = http.NewRequestWithContext(ctx, "POST", srv.URL+"/write", nil)
	if err := httpfence.Attach(ctx, req, hA); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("Attach after Release: %v, want ErrNotHeld", err)
	}

	_, seqB := holder(t, ctx, c, name)
	if a := send(t, srv.URL, sequencer.EncodeText(seqB), "from B"); a.status != 200 || a.body != "from B" {
		t.Fatalf("the new holder's request: %d %s", a.status, a.body)
	}
	a := send(t, srv.URL, oldHeader, "late A")
	if a.status != http.StatusConflict {
		t.Fatalf("the old holder's request after the new holder's: %d %s, want 409", a.status, a.body)
	}
	sB, _ := sequencer.Parse(seqB)
	if e := a.errBody(t); e.Reason != httpfence.ReasonStale || e.Lock != name || e.Highest != sB.Generation || e.Generation >= sB.Generation {
		t.Fatalf("refusal body: %+v (new holder's generation %d)", e, sB.Generation)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.seen) != 2 || rec.seen[0].Path != name || rec.seen[1] != sB || rec.seen[0].Generation >= sB.Generation {
		t.Fatalf("the handler saw %v; want A's then B's sequencer, and nothing of the refused request", rec.seen)
	}
}

// A guard that asks the cell refuses the old holder at once, before the
// new holder has sent anything, refuses a forged sequencer without letting
// it lock the real holder out, and answers 503 when the cell cannot be
// asked. Missing and malformed headers get 400, unless Optional lets
// requests without one through.
func TestMiddlewareAsksTheCell(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	checker := c.Client(t)
	guard := sequencer.NewGuard(sequencer.GuardConfig{Checker: checker, CacheTTL: -1})
	rec := &recorder{}
	srv := httptest.NewServer(httpfence.Wrap(rec, httpfence.Config{Guard: guard, BufferBody: 64}))
	defer srv.Close()
	name := c.Name("job")

	hA, seqA := holder(t, ctx, c, name)
	if a := send(t, srv.URL, sequencer.EncodeText(seqA), "from A"); a.status != 200 {
		t.Fatalf("the holder's request: %d %s", a.status, a.body)
	}
	if err := hA.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_, seqB := holder(t, ctx, c, name)
	a := send(t, srv.URL, sequencer.EncodeText(seqA), "late A")
	if e := a.errBody(t); a.status != http.StatusConflict || e.Reason != httpfence.ReasonStale {
		t.Fatalf("the old holder, before the new one wrote: %d %s, want 409 stale", a.status, a.body)
	}

	// A sequencer of a far newer generation, signed with another key.
	sB, _ := sequencer.Parse(seqB)
	forged := sB
	forged.Generation += 1000
	a = send(t, srv.URL, sequencer.EncodeText(sequencer.Sign([]byte("not the cell's key"), forged)), "forged")
	if e := a.errBody(t); a.status != http.StatusConflict || e.Reason != httpfence.ReasonForged || e.Generation != forged.Generation {
		t.Fatalf("forged sequencer: %d %s, want 409 forged", a.status, a.body)
	}
	if a := send(t, srv.URL, sequencer.EncodeText(seqB), "from B"); a.status != 200 || a.body != "from B" {
		t.Fatalf("the holder after a forgery was refused: %d %s", a.status, a.body)
	}
	if a := send(t, srv.URL, sequencer.EncodeText(seqB), strings.Repeat("x", 65)); a.status != http.StatusRequestEntityTooLarge ||
		a.errBody(t).Reason != httpfence.ReasonTooLarge {
		t.Fatalf("body over BufferBody: %d %s", a.status, a.body)
	}

	bad := []struct {
		name, header, reason string
	}{
		{"missing", "", httpfence.ReasonMissing},
		{"not base64", "!!!", httpfence.ReasonMalformed},
		{"truncated", sequencer.EncodeText(seqB[:len(seqB)-3]), httpfence.ReasonMalformed},
	}
	for _, b := range bad {
		if a := send(t, srv.URL, b.header, "x"); a.status != http.StatusBadRequest || a.errBody(t).Reason != b.reason {
			t.Fatalf("%s: %d %s, want 400 %s", b.name, a.status, a.body, b.reason)
		}
	}
	if seen, none := rec.count(); seen != 2 || none != 0 {
		t.Fatalf("the handler ran for %d sequenced and %d bare requests; want the 2 admitted ones", seen, none)
	}

	// Optional mode: no header passes unchecked; a bad one is still refused.
	opt := httptest.NewServer(httpfence.Wrap(rec, httpfence.Config{Guard: guard, Optional: true}))
	defer opt.Close()
	if a := send(t, opt.URL, "", "read"); a.status != 200 || a.body != "read" {
		t.Fatalf("optional, no header: %d %s", a.status, a.body)
	}
	if a := send(t, opt.URL, sequencer.EncodeText(seqA), "late A"); a.status != http.StatusConflict {
		t.Fatalf("optional, stale header: %d %s", a.status, a.body)
	}
	if seen, none := rec.count(); seen != 2 || none != 1 {
		t.Fatalf("after the optional requests: %d sequenced, %d bare", seen, none)
	}

	// A checker whose session is closed cannot ask the cell: 503, and the
	// OnReject hook answers in the server's own format.
	closed := c.Client(t)
	closed.Close()
	hooks := make(chan *httpfence.Rejection, 1)
	down := httptest.NewServer(httpfence.Wrap(rec, httpfence.Config{
		Guard: sequencer.NewGuard(sequencer.GuardConfig{Checker: closed}),
		OnReject: func(w http.ResponseWriter, r *http.Request, rej *httpfence.Rejection) {
			hooks <- rej
			http.Error(w, rej.Error(), rej.Status)
		}}))
	defer down.Close()
	a = send(t, down.URL, sequencer.EncodeText(seqB), "x")
	if hooked := <-hooks; a.status != http.StatusServiceUnavailable || hooked.Reason != httpfence.ReasonUnavailable || !errors.Is(hooked, client.ErrClosed) {
		t.Fatalf("cell not reachable: %d %s, rejection %v", a.status, a.body, hooked)
	}
}

// A request whose lock's fence stays held by another request's handler
// for longer than CheckTimeout is answered 503, without running the
// handler; other locks' requests pass meanwhile.
func TestMiddlewareFenceBusy(t *testing.T) {
	key := []byte("a test stand-in for the cell's key")
	seq := func(path string) string {
		return sequencer.EncodeText(sequencer.Sign(key, sequencer.Sequencer{Cell: "t", Path: path, Mode: sequencer.Exclusive, Generation: 5}))
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			once.Do(func() { close(entered) })
			<-release
		}
		io.WriteString(w, "done")
	})
	srv := httptest.NewServer(httpfence.Wrap(slow, httpfence.Config{Guard: sequencer.NewGuard(sequencer.GuardConfig{}),
		CheckTimeout: 200 * time.Millisecond}))
	defer srv.Close()
	first := make(chan reply, 1)
	go func() {
		req, _ := http.NewRequest("POST", srv.URL+"/slow", nil)
		req.Header.Set(httpfence.Header, seq("/ls/t/a"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- reply{body: err.Error()}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		first <- reply{resp.StatusCode, string(b)}
	}()
	<-entered
	a := send(t, srv.URL+"/fast", seq("/ls/t/a"), "")
	if e := a.errBody(t); a.status != http.StatusServiceUnavailable || e.Reason != httpfence.ReasonUnavailable {
		t.Fatalf("behind a held fence: %d %s, want 503 unavailable", a.status, a.body)
	}
	if a := send(t, srv.URL+"/fast", seq("/ls/t/b"), ""); a.status != 200 {
		t.Fatalf("another lock meanwhile: %d %s", a.status, a.body)
	}
	close(release)
	if a := <-first; a.status != 200 || a.body != "done" {
		t.Fatalf("the slow request: %d %s", a.status, a.body)
	}
	if a := send(t, srv.URL+"/fast", seq("/ls/t/a"), ""); a.status != 200 {
		t.Fatalf("after the fence was freed: %d %s", a.status, a.body)
	}
}
