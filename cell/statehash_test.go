package cell_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// Every replica reports the same state hash at the same applied index; a
// write changes it. The chaos tests rely on this to compare replicas after
// healing.
func TestReplicasAgreeOnStateHash(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := c.Client(t)
	h, err := cl.Open(ctx, c.Name("f"), client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.SetContents(ctx, []byte("one")); err != nil {
		t.Fatal(err)
	}
	agree := func() []byte {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			var idx []uint64
			var sums [][]byte
			for _, a := range c.Addrs() {
				i, sum, err := client.StateHash(ctx, c.ClientConfig(), a)
				if err != nil {
					t.Fatalf("state hash of %s: %v", a, err)
				}
				idx, sums = append(idx, i), append(sums, sum)
			}
			if idx[0] == idx[1] && idx[1] == idx[2] {
				if !bytes.Equal(sums[0], sums[1]) || !bytes.Equal(sums[1], sums[2]) {
					t.Fatalf("replicas at index %d disagree: %x %x %x", idx[0], sums[0], sums[1], sums[2])
				}
				return sums[0]
			}
			if time.Now().After(deadline) {
				t.Fatalf("replicas never reached one index: %v", idx)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	before := agree()
	if len(before) != 32 {
		t.Fatalf("hash of %d bytes", len(before))
	}
	if err := h.SetContents(ctx, []byte("two")); err != nil {
		t.Fatal(err)
	}
	if after := agree(); bytes.Equal(before, after) {
		t.Fatal("a write left the state hash unchanged")
	}
}
