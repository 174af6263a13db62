package recipe_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/client/recipe"
	"lockcell/fixtures"
)

// N producers and M consumers, each on its own client: every item put is
// taken exactly once, and each consumer sees any one producer's items in
// the order that producer put them. The consumers start first, on an
// empty queue, so Take's blocking and wake-up is exercised too.
func TestQueueEveryItemTakenOnceInOrder(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := testCtx(t, 60*time.Second)
	dir := c.Name("jobs/queue")
	const producers, consumers, each = 3, 3, 8
	total := producers * each

	var mu sync.Mutex
	taken := map[string]int{}
	order := make([][]string, consumers)
	var cwg sync.WaitGroup
	remaining := make(chan struct{}, total)
	for range total {
		remaining <- struct{}{}
	}
	for ci := range consumers {
		q, err := recipe.NewQueue(ctx, c.Client(t), dir)
		if err != nil {
			t.Fatalf("NewQueue: %v", err)
		}
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			for {
				select {
				case <-remaining:
				default:
					return
				}
				data, err := q.Take(ctx)
				if err != nil {
					t.Errorf("consumer %d: Take: %v", ci, err)
					return
				}
				mu.Lock()
				taken[string(data)]++
				order[ci] = append(order[ci], string(data))
				mu.Unlock()
			}
		}()
	}
	var pwg sync.WaitGroup
	for pi := range producers {
		q, err := recipe.NewQueue(ctx, c.Client(t), dir)
		if err != nil {
			t.Fatalf("NewQueue: %v", err)
		}
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for i := range each {
				if _, err := q.Put(ctx, []byte(fmt.Sprintf("p%d-%02d", pi, i))); err != nil {
					t.Errorf("producer %d: Put: %v", pi, err)
					return
				}
			}
		}()
	}
	pwg.Wait()
	cwg.Wait()
	if t.Failed() {
		return
	}
	if len(taken) != total {
		t.Fatalf("%d distinct items taken, want %d: %v", len(taken), total, taken)
	}
	for item, n := range taken {
		if n != 1 {
			t.Errorf("item %s taken %d times", item, n)
		}
	}
	for ci, items := range order {
		last := map[byte]string{}
		for _, it := range items {
			p := it[1]
			if prev, ok := last[p]; ok && prev >= it {
				t.Errorf("consumer %d took %s after %s: not FIFO per producer (%v)", ci, it, prev, items)
			}
			last[p] = it
		}
	}
	// Nothing is left behind.
	rest, err := c.Client(t).Open(ctx, dir, client.Read|client.Directory)
	if err != nil {
		t.Fatal(err)
	}
	defer rest.Close()
	if es, err := rest.ReadDir(ctx); err != nil || len(es) != 0 {
		t.Fatalf("after every take the queue holds %v (%v)", es, err)
	}
}
