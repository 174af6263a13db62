package cell_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// seqNumber is the number a sequential name ends in (its last ten digits).
func seqNumber(t testing.TB, name string) uint64 {
	t.Helper()
	if len(name) < 10 {
		t.Fatalf("%q is no sequential name", name)
	}
	n, err := strconv.ParseUint(name[len(name)-10:], 10, 64)
	if err != nil {
		t.Fatalf("%q is no sequential name: %v", name, err)
	}
	return n
}

// Sequential creates from several sessions at once get distinct names
// whose numbers are exactly 0..n-1 (none lost, none twice), increasing in
// the order each caller made them; after the master is stopped the
// numbers go on above the old ones; a name made by hand where the counter
// goes is skipped; and the handle names the node made.
func TestSequentialNamesAcrossSessionsAndFailover(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: 3 * time.Second})
	ctx := ctxT(t, 2*time.Minute)
	const sessions, workers, each = 3, 4, 6
	clients := make([]*client.Client, sessions)
	for i := range clients {
		clients[i] = c.Client(t)
	}
	mustOpen(t, ctx, clients[0], c.Name("q"), client.Read|client.Create|client.Directory).Close()
	seqMode := client.Read | client.Write | client.Create | client.Sequential

	// round makes sessions*workers*each names, each worker in order, and
	// returns them all; it fails the test on any error.
	round := func() []string {
		var mu sync.Mutex
		var all []string
		var wg sync.WaitGroup
		for s := range sessions {
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					last := int64(-1)
					for range each {
						h, err := clients[s].Open(ctx, c.Name("q/job-"), seqMode, client.WithContents([]byte(fmt.Sprintf("s%dw%d", s, w))))
						if err != nil {
							t.Errorf("session %d: sequential create: %v", s, err)
							return
						}
						name := h.Name()
						if !strings.HasPrefix(name, c.Name("q/job-")) {
							t.Errorf("made %q", name)
						}
						if n := int64(seqNumber(t, name)); n <= last {
							t.Errorf("session %d worker %d made %s after number %d", s, w, name, last)
						} else {
							last = n
						}
						if st, err := h.GetStat(ctx); err != nil || st.Size != uint64(len(fmt.Sprintf("s%dw%d", s, w))) {
							t.Errorf("%s: stat %+v, %v", name, st, err)
						}
						h.Close()
						mu.Lock()
						all = append(all, name)
						mu.Unlock()
					}
				}()
			}
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		return all
	}
	numbers := func(names []string) []uint64 {
		out := make([]uint64, len(names))
		for i, n := range names {
			out[i] = seqNumber(t, n)
		}
		slices.Sort(out)
		return out
	}
	const perRound = sessions * workers * each
	first := numbers(round())
	for i, n := range first {
		if n != uint64(i) {
			t.Fatalf("the numbers made are %v, want 0..%d each once", first, perRound-1)
		}
	}

	// Delete the newest, stop the master: nothing is handed out twice.
	h := mustOpen(t, ctx, clients[0], c.Name(fmt.Sprintf("q/job-%010d", perRound-1)), client.Write)
	if err := h.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	h.Close()
	old := c.StopMaster()
	second := numbers(round())
	for i, n := range second {
		if n != uint64(perRound+i) {
			t.Fatalf("after the fail-over the numbers made are %v, want %d..%d each once", second, perRound, 2*perRound-1)
		}
	}
	if m := c.WaitForMaster(30 * time.Second); m == old {
		t.Fatal("the master did not change")
	}
	c.Start(old)

	// A name made by hand where the counter goes is skipped.
	next := 2 * perRound
	mustOpen(t, ctx, clients[1], c.Name(fmt.Sprintf("q/job-%010d", next)), client.Write|client.Create|client.Excl).Close()
	h = mustOpen(t, ctx, clients[2], c.Name("q/job-"), seqMode|client.Ephemeral)
	if want := c.Name(fmt.Sprintf("q/job-%010d", next+1)); h.Name() != want {
		t.Fatalf("made %s, want %s (the hand-made name skipped)", h.Name(), want)
	}
	// An ephemeral one goes with its last handle; its number stays used.
	h.Close()
	h = mustOpen(t, ctx, clients[2], c.Name("q/job-"), seqMode)
	if want := c.Name(fmt.Sprintf("q/job-%010d", next+2)); h.Name() != want {
		t.Fatalf("made %s, want %s", h.Name(), want)
	}
	h.Close()

	// Bad input is refused early with a typed error.
	if _, err := clients[0].Open(ctx, c.Name("q/job-"), client.Write|client.Sequential); !errors.Is(err, client.ErrBadRequest) {
		t.Errorf("sequential without create: %v, want ErrBadRequest", err)
	}
	if _, err := clients[0].Open(ctx, c.Name("q/"+strings.Repeat("x", 250)), seqMode); !errors.Is(err, client.ErrInvalidName) {
		t.Errorf("a prefix with no room for the number: %v, want ErrInvalidName", err)
	}
}

// seqQueueItems is how many items the queue test moves: a few thousand in
// make test, the full ten thousand under make torture.
func seqQueueItems() int {
	if os.Getenv("LOCKCELL_CHAOS_TORTURE") == "1" {
		return 10000
	}
	return 2000
}

// A queue on sequential names: producers in several sessions add items
// (each create carrying its payload), two competing consumers take them
// in name order (read, then delete: only the consumer whose delete
// succeeds has the item), and the master is stopped half way. Every item
// produced is consumed exactly once, no name is made twice, and each
// producer's names increase in the order it made them.
func TestSequentialQueueAcrossMasterStop(t *testing.T) {
	items := seqQueueItems()
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: 3 * time.Second})
	ctx := ctxT(t, 5*time.Minute)
	start := time.Now()
	const producers, producerWorkers = 3, 8
	const consumers, consumerWorkers = 2, 8
	pc := make([]*client.Client, producers)
	for i := range pc {
		pc[i] = c.Client(t)
	}
	mustOpen(t, ctx, pc[0], c.Name("queue"), client.Read|client.Create|client.Directory).Close()

	var mu sync.Mutex
	made := map[string]string{}     // name -> payload
	consumed := map[string]string{} // payload -> name
	var failure error
	fail := func(err error) {
		mu.Lock()
		if failure == nil {
			failure = err
		}
		mu.Unlock()
	}

	// Producers: each worker makes its share in order.
	var produced sync.WaitGroup
	var halfway sync.Once
	halfwayC := make(chan struct{})
	count := 0
	for p := range producers {
		for w := range producerWorkers {
			produced.Add(1)
			go func() {
				defer produced.Done()
				last := int64(-1)
				for i := p*producerWorkers + w; i < items; i += producers * producerWorkers {
					payload := fmt.Sprintf("item-%d", i)
					h, err := pc[p].Open(ctx, c.Name("queue/item-"), client.Write|client.Create|client.Sequential, client.WithContents([]byte(payload)))
					if err != nil {
						fail(fmt.Errorf("produce %s: %w", payload, err))
						return
					}
					name := h.Name()
					h.Close()
					if n := int64(seqNumber(t, name)); n <= last {
						fail(fmt.Errorf("producer %d/%d made %s after number %d", p, w, name, last))
						return
					} else {
						last = n
					}
					mu.Lock()
					if prev, dup := made[name]; dup {
						mu.Unlock()
						fail(fmt.Errorf("%s made twice (%s and %s)", name, prev, payload))
						return
					}
					made[name] = payload
					count++
					if count == items/2 {
						halfway.Do(func() { close(halfwayC) })
					}
					mu.Unlock()
				}
			}()
		}
	}
	producersDone := make(chan struct{})
	go func() { produced.Wait(); close(producersDone) }()

	// Consumers: each lists the queue and its workers take the first
	// items in name order; both consumers race for the same items.
	var consumersWG sync.WaitGroup
	for k := range consumers {
		cl := c.Client(t)
		consumersWG.Add(1)
		go func() {
			defer consumersWG.Done()
			dir, err := cl.Open(ctx, c.Name("queue"), client.Read|client.Directory)
			if err != nil {
				fail(fmt.Errorf("consumer %d: %w", k, err))
				return
			}
			defer dir.Close()
			for {
				mu.Lock()
				done := failure != nil || len(consumed) == items
				mu.Unlock()
				if done || ctx.Err() != nil {
					return
				}
				entries, err := dir.ReadDir(ctx)
				if err != nil {
					fail(fmt.Errorf("consumer %d: list: %w", k, err))
					return
				}
				if len(entries) == 0 {
					select {
					case <-time.After(5 * time.Millisecond): // the producers are behind: poll again
					case <-ctx.Done():
					}
					continue
				}
				batch := entries[:min(len(entries), 4*consumerWorkers)]
				work := make(chan string)
				var wg sync.WaitGroup
				for range consumerWorkers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for name := range work {
							if err := take(ctx, cl, name, &mu, consumed); err != nil {
								fail(fmt.Errorf("consumer %d: %w", k, err))
							}
						}
					}()
				}
				for _, e := range batch { // in name order
					work <- c.Name("queue/" + e.Name)
				}
				close(work)
				wg.Wait()
			}
		}()
	}

	select {
	case <-halfwayC:
	case <-producersDone:
	case <-ctx.Done():
	}
	old := c.StopMaster()
	stopped := time.Now()
	<-producersDone
	consumersWG.Wait()
	if failure != nil {
		t.Fatal(failure)
	}
	if m := c.WaitForMaster(30 * time.Second); m == old {
		t.Fatal("the master did not change")
	}
	if len(made) != items || len(consumed) != items {
		t.Fatalf("%d items made, %d consumed, want %d", len(made), len(consumed), items)
	}
	for name, payload := range made {
		if consumed[payload] != name {
			t.Fatalf("%s (%s) consumed as %q", payload, name, consumed[payload])
		}
	}
	t.Logf("%d items through the queue in %v (master stopped after %v), names up to %d", items,
		time.Since(start).Round(time.Millisecond), stopped.Sub(start).Round(time.Millisecond), maxSeq(t, made))
}

// take consumes one queue item: it reads the payload, then deletes the
// item; only a successful delete makes the item this consumer's (a
// competitor that deleted it first leaves it missing or the handle
// invalid).
func take(ctx context.Context, cl *client.Client, name string, mu *sync.Mutex, consumed map[string]string) error {
	h, err := cl.Open(ctx, name, client.Read|client.Write)
	if errors.Is(err, client.ErrNotFound) {
		return nil // taken by the other consumer
	}
	if err != nil {
		return err
	}
	defer h.Close()
	data, _, err := h.GetContentsAndStat(ctx)
	if errors.Is(err, client.ErrHandleInvalid) {
		return nil
	}
	if err != nil {
		return err
	}
	err = h.Delete(ctx)
	if errors.Is(err, client.ErrHandleInvalid) {
		return nil
	}
	if err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	if prev, dup := consumed[string(data)]; dup {
		return fmt.Errorf("%s consumed twice: as %s and %s", data, prev, name)
	}
	consumed[string(data)] = name
	return nil
}

func maxSeq(t *testing.T, made map[string]string) uint64 {
	var m uint64
	for name := range made {
		m = max(m, seqNumber(t, name))
	}
	return m
}
