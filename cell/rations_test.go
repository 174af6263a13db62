package cell_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/master"
)

// Reads are rationed per principal: a principal that reads more than its
// rate waits, while another principal reading the same file meanwhile is
// not held up, and the admin is never rationed.
func TestReadsAreRationedPerPrincipal(t *testing.T) {
	const rate = 128 << 10
	set := fixtures.TestCerts(t, "bob", "mallory")
	c := fixtures.NewCell(t, 3, fixtures.Options{TLS: set, SessionLimits: master.Limits{ReadBytesPerSecond: rate}})
	ctx := ctxT(t, 2*time.Minute)
	c.WaitForMaster(30 * time.Second)
	name := c.Name("big")
	data := bytes.Repeat([]byte("x"), 256<<10)
	admin := c.Client(t)
	mustOpen(t, ctx, admin, name, client.Read|client.Write|client.Create, client.WithContents(data))

	readN := func(cl *client.Client, n int) (time.Duration, error) {
		h, err := cl.Open(ctx, name, client.Read, client.WithoutCache())
		if err != nil {
			return 0, err
		}
		defer h.Close()
		start := time.Now()
		for range n {
			got, _, err := h.GetContentsAndStat(ctx)
			if err != nil {
				return 0, err
			}
			if len(got) != len(data) {
				t.Errorf("read %d bytes, want %d", len(got), len(data))
			}
		}
		return time.Since(start), nil
	}

	mallory := c.ClientWith(t, c.ClientConfigAs("mallory"))
	bob := c.ClientWith(t, c.ClientConfigAs("bob"))
	type result struct {
		took time.Duration
		err  error
		at   time.Time
	}
	malDone := make(chan result, 1)
	go func() {
		took, err := readN(mallory, 4) // 1 MiB at 128 KiB/s: the last three wait
		malDone <- result{took, err, time.Now()}
	}()
	// bob reads the same file meanwhile, from his own ration (one read
	// is within it: a full bucket lets a read start).
	bobTook, err := readN(bob, 1)
	if err != nil {
		t.Fatal(err)
	}
	bobAt := time.Now()
	// The admin is not rationed either.
	if _, err := readN(admin, 4); err != nil {
		t.Fatal(err)
	}
	mal := <-malDone
	if mal.err != nil {
		t.Fatal(mal.err)
	}
	// Each read of 258 KiB leaves a debt the next waits out at 128 KiB/s:
	// about 1, 2 and 2 s before the second, third and fourth.
	if mal.took < 4*time.Second {
		t.Fatalf("mallory read 1 MiB in %v at a ration of %d KiB/s", mal.took, rate>>10)
	}
	if !bobAt.Before(mal.at) {
		t.Fatalf("bob's reads (%v) waited for mallory's ration (%v)", bobTook, mal.took)
	}
	t.Logf("mallory's 4 reads took %v; bob's %v", mal.took.Round(time.Millisecond), bobTook.Round(time.Millisecond))
	if ctx.Err() != nil {
		t.Fatal(context.Cause(ctx))
	}
}

// Writes are rationed per principal too, in a budget of their own: a
// principal that proposes more bytes a second than its write rate waits,
// another principal writing meanwhile is not held up, the admin is never
// rationed, and nothing written is lost to the wait.
func TestWritesAreRationedPerPrincipal(t *testing.T) {
	const rate = 128 << 10
	set := fixtures.TestCerts(t, "bob", "mallory")
	c := fixtures.NewCell(t, 3, fixtures.Options{TLS: set, SessionLimits: master.Limits{WriteBytesPerSecond: rate}})
	ctx := ctxT(t, 2*time.Minute)
	c.WaitForMaster(30 * time.Second)
	admin := c.Client(t)
	// Each principal writes a file of its own in a directory whose ACL
	// lets them.
	const rwc = client.Read | client.Write | client.Create
	mustOpen(t, ctx, admin, c.Name("acl"), rwc|client.Directory).Close()
	mustOpen(t, ctx, admin, c.Name("acl/writers"), rwc, client.WithContents([]byte("bob\nmallory\n"))).Close()
	dir := c.Name("w")
	d := mustOpen(t, ctx, admin, dir, rwc|client.Directory)
	if _, err := d.SetACL(ctx, client.ACL{Read: "writers", Write: "writers"}); err != nil {
		t.Fatal(err)
	}

	writeN := func(cl *client.Client, who string, n int) (time.Duration, error) {
		h, err := cl.Open(ctx, dir+"/"+who, rwc)
		if err != nil {
			return 0, err
		}
		defer h.Close()
		start := time.Now()
		for i := range n {
			data := bytes.Repeat([]byte{byte('a' + i)}, 128<<10)
			if err := h.SetContents(ctx, data); err != nil {
				return 0, err
			}
			got, _, err := h.GetContentsAndStat(ctx)
			if err != nil {
				return 0, err
			}
			if !bytes.Equal(got, data) {
				t.Errorf("%s's write %d read back %d bytes of another", who, i, len(got))
			}
		}
		return time.Since(start), nil
	}

	mallory := c.ClientWith(t, c.ClientConfigAs("mallory"))
	bob := c.ClientWith(t, c.ClientConfigAs("bob"))
	type result struct {
		took time.Duration
		err  error
		at   time.Time
	}
	malDone := make(chan result, 1)
	go func() {
		// 640 KiB at 128 KiB/s: a full bucket lets the first write start,
		// each later one waits out the debt its predecessor left, about
		// 1 s each from the third on.
		took, err := writeN(mallory, "mallory", 5)
		malDone <- result{took, err, time.Now()}
	}()
	bobTook, err := writeN(bob, "bob", 1) // within his own ration
	if err != nil {
		t.Fatal(err)
	}
	bobAt := time.Now()
	if _, err := writeN(admin, "admin", 5); err != nil { // never rationed
		t.Fatal(err)
	}
	mal := <-malDone
	if mal.err != nil {
		t.Fatal(mal.err)
	}
	if mal.took < 2500*time.Millisecond {
		t.Fatalf("mallory wrote 640 KiB in %v at a write ration of %d KiB/s", mal.took, rate>>10)
	}
	if !bobAt.Before(mal.at) {
		t.Fatalf("bob's write (%v) waited for mallory's ration (%v)", bobTook, mal.took)
	}
	t.Logf("mallory's 5 writes took %v; bob's one %v", mal.took.Round(time.Millisecond), bobTook.Round(time.Millisecond))
}
