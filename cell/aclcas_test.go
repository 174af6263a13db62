package cell_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// TestSetACLIfGeneration: SetACL with IfGeneration is a compare-and-swap
// on the node's ACL generation, through a real cell. Two clients read the
// same ACL generation; the first change wins, the second, now stale,
// fails with ErrGenerationMismatch and changes nothing (names and
// generation as the winner left them); the content generation is not
// what is compared; without IfGeneration SetACL still replaces at once.
func TestSetACLIfGeneration(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, b := c.Client(t), c.Client(t)
	if err := a.MkdirAll(ctx, a.ACLDir()); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ops", "staff"} {
		h, err := a.Open(ctx, c.Name("acl/"+f), client.Write|client.Create)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.SetContents(ctx, []byte("alice\n")); err != nil {
			t.Fatal(err)
		}
		h.Close()
	}
	ha, err := a.Open(ctx, c.Name("jobs"), client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	if err := ha.SetContents(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	hb, err := b.Open(ctx, c.Name("jobs"), client.Read)
	if err != nil {
		t.Fatal(err)
	}
	read, err := hb.GetStat(ctx)
	if err != nil {
		t.Fatal(err)
	}

	won, err := ha.SetACL(ctx, client.ACL{Write: "ops"}, client.IfGeneration(read.ACLGen))
	if err != nil {
		t.Fatalf("SetACL with the current ACL generation %d: %v", read.ACLGen, err)
	}
	if won.ACLGen <= read.ACLGen || won.WriteACL != "ops" {
		t.Fatalf("after the winning SetACL: %+v (was ACL generation %d)", won, read.ACLGen)
	}
	// The loser read the same generation; its change would undo "ops".
	_, err = hb.SetACL(ctx, client.ACL{Read: "staff"}, client.IfGeneration(read.ACLGen))
	if !errors.Is(err, client.ErrGenerationMismatch) {
		t.Fatalf("SetACL with a stale ACL generation: %v, want ErrGenerationMismatch", err)
	}
	st, err := hb.GetStat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.ACLGen != won.ACLGen || st.WriteACL != "ops" || st.ReadACL != "" {
		t.Fatalf("a refused SetACL changed the node: %+v, want the winner's %+v", st, won)
	}
	// The content generation is another number: comparing it fails.
	if st.ContentGen != st.ACLGen {
		if _, err := ha.SetACL(ctx, client.ACL{Write: "ops", Read: "staff"}, client.IfGeneration(st.ContentGen)); !errors.Is(err, client.ErrGenerationMismatch) {
			t.Fatalf("SetACL compared against the content generation: %v, want ErrGenerationMismatch", err)
		}
	}
	// Unconditional, as before.
	if st, err = hb.SetACL(ctx, client.ACL{Read: "staff", Write: "ops"}); err != nil || st.ReadACL != "staff" || st.ACLGen <= won.ACLGen {
		t.Fatalf("SetACL without a generation: %+v, %v", st, err)
	}
}
