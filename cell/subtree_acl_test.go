package cell_test

import (
	"context"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// subtreeWatchesShowOnlyReadable is TestACLMatrix's part for subtree
// watches: every principal watches shared (which all may read); the admin
// writes shared/s (readable by the readers only), creates shared/gone,
// names its readers and deletes it, then makes and deletes a marker all
// may read. Each watcher hears of shared/s only if it may read it, and of
// shared/gone's delete only if it could read shared/gone when it went (its
// name appears nowhere else in what it hears but the create, made while
// everyone could read it). It returns the checks made.
func subtreeWatchesShowOnlyReadable(t *testing.T, ctx context.Context, c *fixtures.Cell, clients map[string]*client.Client, nodes []matrixNode) int {
	t.Helper()
	var s matrixNode
	for _, n := range nodes {
		if n.name == "shared/s" {
			s = n
		}
	}
	watches := map[string]*client.SubtreeWatch{}
	for who, cl := range clients {
		h, err := cl.Open(ctx, c.Name("shared"), client.Read|client.Directory)
		if err != nil {
			t.Fatalf("%s opens shared: %v", who, err)
		}
		defer h.Close()
		w, err := h.WatchSubtree(ctx)
		if err != nil {
			t.Fatalf("%s watches shared: %v", who, err)
		}
		watches[who] = w
	}
	admin := clients["admin"]
	sh, err := admin.Open(ctx, c.Name("shared/s"), client.Read|client.Write)
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.SetContents(ctx, []byte("secret")); err != nil {
		t.Fatal(err)
	}
	sh.Close()
	gone, err := admin.Open(ctx, c.Name("shared/gone"), client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	goneRef := refNode{read: "readers", write: "everyone", creator: "admin"}
	if _, err := gone.SetACL(ctx, client.ACL{Read: goneRef.read, Write: goneRef.write}); err != nil {
		t.Fatal(err)
	}
	if err := gone.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	marker, err := admin.Open(ctx, c.Name("shared/marker"), client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	if err := marker.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for who, w := range watches {
		var sawS, sawGoneDeleted bool
		deadline := time.After(30 * time.Second)
	read:
		for {
			select {
			case ev, ok := <-w.Events():
				if !ok {
					t.Fatalf("%s's watch ended: %v", who, w.Err())
				}
				switch {
				case ev.Path == c.Name("shared/s"):
					sawS = true
				case ev.Path == c.Name("shared/gone") && ev.Kind == client.NodeDeleted:
					sawGoneDeleted = true
				case ev.Path == c.Name("shared/marker") && ev.Kind == client.NodeDeleted:
					break read
				}
			case <-deadline:
				t.Fatalf("%s never heard of the marker's delete", who)
			}
		}
		w.Stop()
		checked += 2
		if want := refAllowed(who, s.ref, refRead); sawS != want {
			t.Errorf("%s watching shared: heard of shared/s %v, want %v", who, sawS, want)
		}
		if want := refAllowed(who, goneRef, refRead); sawGoneDeleted != want {
			t.Errorf("%s watching shared: heard shared/gone deleted %v, want %v", who, sawGoneDeleted, want)
		}
	}
	return checked
}
