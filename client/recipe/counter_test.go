package recipe_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/client/recipe"
	"lockcell/fixtures"
)

// K clients adding concurrently through their own Counters reach exactly
// the sum: no Add is lost to a race, none applies twice.
func TestCounterConcurrentAddsReachTheSum(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := testCtx(t, 60*time.Second)
	name := c.Name("stats/hits")
	const adders, each = 4, 5
	var wg sync.WaitGroup
	for i := range adders {
		cl := c.Client(t)
		k, err := recipe.NewCounter(ctx, cl, name)
		if err != nil {
			t.Fatalf("NewCounter: %v", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if _, err := k.Add(ctx, int64(i+1)); err != nil {
					t.Errorf("adder %d: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	k, err := recipe.NewCounter(ctx, c.Client(t), name)
	if err != nil {
		t.Fatal(err)
	}
	got, err := k.Get(ctx)
	want := int64(each * adders * (adders + 1) / 2)
	if err != nil || got != want {
		t.Fatalf("Get = %d, %v; want %d", got, err, want)
	}
	if v, err := k.Add(ctx, -want); err != nil || v != 0 {
		t.Fatalf("Add(-%d) = %d, %v; want 0", want, v, err)
	}
}

// A file that holds no integer is refused with ErrNotCounter, not
// overwritten.
func TestCounterRefusesAForeignFile(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{})
	ctx := testCtx(t, 30*time.Second)
	cl := c.Client(t)
	name := c.Name("notes")
	h, err := cl.Open(ctx, name, client.Read|client.Write|client.Create, client.WithContents([]byte("hello")))
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	k, err := recipe.NewCounter(ctx, cl, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Add(ctx, 1); !errors.Is(err, recipe.ErrNotCounter) {
		t.Fatalf("Add on %q: %v, want ErrNotCounter", "hello", err)
	}
}
