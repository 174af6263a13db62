package client_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// MkdirAll makes every missing directory of a path and accepts existing
// ones, also when another client makes them at the same moment; a file on
// the path is ErrNotDir, and a directory the caller may not create is
// ErrPermission naming that directory. Open WithParents does the same for
// the parents of the node it creates.
func TestMkdirAll(t *testing.T) {
	certs := fixtures.TestCerts(t, "admin", "bob")
	c := fixtures.NewCell(t, 1, fixtures.Options{TLS: certs, Admin: "admin"})
	ctx := testCtx(t, time.Minute)
	admin := c.ClientWith(t, c.ClientConfigAs("admin"))
	bob := c.ClientWith(t, c.ClientConfigAs("bob"))

	if err := admin.MkdirAll(ctx, c.Name("a/b/c")); err != nil {
		t.Fatalf("MkdirAll a/b/c: %v", err)
	}
	if st, err := open(t, ctx, admin, c.Name("a/b/c"), client.Read).GetStat(ctx); err != nil || !st.Dir {
		t.Fatalf("a/b/c after MkdirAll: dir=%v, %v", st.Dir, err)
	}
	if err := admin.MkdirAll(ctx, "a/b/rel"); err != nil { // relative to the cell's root, as Open
		t.Fatalf("MkdirAll of a relative name: %v", err)
	}
	if st, err := open(t, ctx, admin, c.Name("a/b/rel"), client.Read).GetStat(ctx); err != nil || !st.Dir {
		t.Fatalf("a/b/rel after MkdirAll: dir=%v, %v", st.Dir, err)
	}
	// Existing directories are success, even to bob, who may not write
	// them (by default only their creator, the admin, may).
	if err := bob.MkdirAll(ctx, c.Name("a/b/c")); err != nil {
		t.Fatalf("MkdirAll of an existing tree: %v", err)
	}

	// Concurrent creators of the same parents both succeed.
	for i, path := range []string{"r1/x/y", "r2/x/y", "r3/x/y"} {
		start := make(chan struct{})
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for j, cl := range []*client.Client{admin, c.ClientWith(t, c.ClientConfigAs("admin"))} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[j] = cl.MkdirAll(ctx, c.Name(path))
			}()
		}
		close(start)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("round %d: concurrent MkdirAll %s: %v", i, path, err)
		}
	}

	open(t, ctx, admin, c.Name("a/f"), rwc)
	for _, rel := range []string{"a/f", "a/f/sub/dir"} {
		err := admin.MkdirAll(ctx, c.Name(rel))
		var oe *client.OpError
		if !errors.Is(err, client.ErrNotDir) || !errors.As(err, &oe) || oe.Path != c.Name("a/f") && oe.Path != c.Name("a/f/sub") {
			t.Fatalf("MkdirAll %s through the file a/f: %v, want ErrNotDir naming it", rel, err)
		}
	}

	// bob may not create in a/b: the error names the first directory he
	// would have had to create, from MkdirAll and from Open WithParents.
	want := c.Name("a/b/bob")
	for what, try := range map[string]func() error{
		"MkdirAll": func() error { return bob.MkdirAll(ctx, c.Name("a/b/bob/d")) },
		"Open WithParents": func() error {
			_, err := bob.Open(ctx, c.Name("a/b/bob/d/f"), rwc, client.WithParents())
			return err
		},
	} {
		err := try()
		var oe *client.OpError
		if !errors.Is(err, client.ErrPermission) || !errors.As(err, &oe) || oe.Path != want {
			t.Fatalf("%s below a/b as bob: %v, want ErrPermission naming %s", what, err, want)
		}
	}

	h := open(t, ctx, admin, c.Name("wp/x/f"), rwc, client.WithParents(), client.WithContents([]byte("v")))
	if data, _, err := h.GetContentsAndStat(ctx); err != nil || string(data) != "v" {
		t.Fatalf("file created WithParents reads %q, %v", data, err)
	}
	if _, err := admin.Open(ctx, c.Name("wp/y/f"), client.Read, client.WithParents()); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("WithParents without Create: %v, want ErrBadRequest", err)
	}
}
