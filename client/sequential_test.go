package client_test

import (
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// A handle that made its node with Sequential keeps that node's name
// across a session renewal and never makes a second node: the renewal
// re-opens the made name (a queue item), and an ephemeral one, gone with
// the old session, is not made again (ReopenFailed) — making it again
// would hand a consumer an item twice. The directory's counter goes on
// from where it was.
func TestRenewSessionKeepsSequentialName(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: time.Second})
	ctx := testCtx(t, 90*time.Second)
	cut := fixtures.NewCutter()
	cfg := c.ClientConfig()
	cfg.Dialer, cfg.GracePeriod, cfg.RetryTimeout, cfg.RenewSession = cut.Dial, 1500*time.Millisecond, 10*time.Second, true
	a := c.ClientWith(t, cfg)
	sessEvents := logEvents(a.Events())
	other := c.Client(t)
	open(t, ctx, other, c.Name("q"), rwc|client.Directory).Close()

	item := open(t, ctx, a, c.Name("q/job-"), rwc|client.Sequential, client.WithContents([]byte("payload")))
	eph := open(t, ctx, a, c.Name("q/member-"), rwc|client.Sequential|client.Ephemeral)
	if item.Name() != c.Name("q/job-0000000000") || eph.Name() != c.Name("q/member-0000000001") {
		t.Fatalf("made %s and %s", item.Name(), eph.Name())
	}

	cut.Cut()
	nextKindLog(t, sessEvents, client.Expired, 15*time.Second)
	cut.Heal()
	nextKindLog(t, sessEvents, client.Renewed, 20*time.Second)

	if re := nextKind(t, item.Events(), client.Reopened, 5*time.Second, "the item"); re.Path != c.Name("q/job-0000000000") {
		t.Fatalf("the item's Reopened %+v", re)
	}
	if item.Name() != c.Name("q/job-0000000000") {
		t.Fatalf("the item's handle now names %s", item.Name())
	}
	if data, _, err := item.GetContentsAndStat(ctx); err != nil || string(data) != "payload" {
		t.Fatalf("the item after the renewal: %q %v", data, err)
	}
	nextKind(t, eph.Events(), client.ReopenFailed, 5*time.Second, "the ephemeral member")
	dir := open(t, ctx, other, c.Name("q"), client.Read|client.Directory)
	entries, err := dir.ReadDir(ctx)
	if err != nil || len(entries) != 1 || entries[0].Name != "job-0000000000" {
		t.Fatalf("q after the renewal: %+v %v, want the one item", entries, err)
	}
	if h := open(t, ctx, a, c.Name("q/job-"), rwc|client.Sequential); h.Name() != c.Name("q/job-0000000002") {
		t.Fatalf("the next sequential name is %s, want number 2", h.Name())
	}
}
