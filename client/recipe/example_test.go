package recipe_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"lockcell/client"
	"lockcell/client/recipe"
	"lockcell/fixtures"
	"lockcell/sequencer"
)

// A leader that fences its writes: Lead calls the function while this
// program leads, and every write carries the leadership's sequencer, so
// the resource (here a store behind a sequencer.Guard, which asks the cell
// about sequencers it has not seen) refuses the writes of a leader that
// was deposed, however late they arrive. The function returns when its
// work is done (or when leaderCtx ends: leadership may be lost, so it
// stops at once); returning nil while it leads resigns.
func ExampleLead() {
	cfg, stop := fixtures.ExampleCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer c.Close()

	// The resource server's side: a guard in front of its store.
	guard := sequencer.NewGuard(sequencer.GuardConfig{Checker: c, Cell: c.Cell()})
	var store []string
	put := func(ctx context.Context, seq []byte, job string) error {
		_, err := guard.Do(ctx, seq, func(s sequencer.Sequencer) error {
			store = append(store, job)
			return nil
		})
		return err
	}

	err = recipe.Lead(ctx, c, "scheduler-leader", []byte("host-a:8080"),
		func(leaderCtx context.Context) error {
			seq, _ := recipe.SequencerFrom(leaderCtx)
			who, err := recipe.Leader(leaderCtx, c, "scheduler-leader")
			fmt.Printf("leading as %s (%v), lock %s\n", who, err, seq.Path())
			for _, job := range []string{"job-1", "job-2"} {
				if err := put(leaderCtx, seq, job); err != nil {
					// A refused or unfinished write: if leaderCtx ended,
					// Lead finds out whether leadership survived.
					return err
				}
			}
			return nil // the work is done: resign
		},
		recipe.WithOpenOptions(client.WithLockDelay(10*time.Second))) // how long others wait if this leader dies
	fmt.Println("lead:", err, "store:", store)
	_, err = recipe.Leader(ctx, c, "scheduler-leader")
	fmt.Println("after resigning:", errors.Is(err, recipe.ErrNoLeader))
	// Output:
	// leading as host-a:8080 (<nil>), lock /ls/example/scheduler-leader
	// lead: <nil> store: [job-1 job-2]
	// after resigning: true
}

// Campaign blocks until this candidate leads the election on a file;
// Leader tells anyone who leads. Closing the leader's handle resigns.
func ExampleCampaign() {
	cfg, stop := fixtures.ExampleCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer c.Close()

	lead, err := recipe.Campaign(ctx, c, "/ls/example/scheduler-leader", []byte("host-a:8080"),
		client.WithLockDelay(10*time.Second)) // how long others wait if this leader dies
	if err != nil {
		fmt.Println("campaign:", err)
		return
	}
	who, err := recipe.Leader(ctx, c, "/ls/example/scheduler-leader")
	fmt.Printf("leader %s, %v\n", who, err)

	lead.Close() // resign: the next candidate leads at once
	_, err = recipe.Leader(ctx, c, "/ls/example/scheduler-leader")
	fmt.Println("after resigning:", errors.Is(err, recipe.ErrNoLeader))
	// Output:
	// leader host-a:8080, <nil>
	// after resigning: true
}

// Observe follows an election from the outside: who leads, and when
// nobody does. Values are coalesced, so a slow reader gets the latest
// state rather than a backlog.
func ExampleObserve() {
	cfg, stop := fixtures.ExampleCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	watcher, err := client.Dial(ctx, cfg)
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer watcher.Close()
	changes := recipe.Observe(ctx, watcher, "/ls/example/api-leader")

	candidate, err := client.Dial(ctx, cfg)
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer candidate.Close()
	lead, err := recipe.Campaign(ctx, candidate, "/ls/example/api-leader", []byte("host-b:9090"))
	if err != nil {
		fmt.Println("campaign:", err)
		return
	}
	for v := range changes {
		if !v.NoLeader {
			fmt.Printf("leader %s\n", v.Leader)
			break
		}
	}
	lead.Close() // resign
	for v := range changes {
		if v.NoLeader {
			fmt.Println("no leader")
			break
		}
	}
	// Output:
	// leader host-b:9090
	// no leader
}

// A shared counter: every Add is a compare-and-swap transaction, retried
// when another client's Add got in first, so no update is lost.
func ExampleCounter() {
	cfg, stop := fixtures.ExampleCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer c.Close()

	hits, err := recipe.NewCounter(ctx, c, "stats/hits")
	if err != nil {
		fmt.Println("counter:", err)
		return
	}
	hits.Add(ctx, 5)
	v, err := hits.Add(ctx, -2)
	fmt.Println(v, err)
	v, err = hits.Get(ctx)
	fmt.Println(v, err)
	// Output:
	// 3 <nil>
	// 3 <nil>
}

// A FIFO work queue: Put appends an item under a sequential name, Take
// blocks until there is one and removes the oldest, exactly once however
// many consumers race for it.
func ExampleQueue() {
	cfg, stop := fixtures.ExampleCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer c.Close()

	q, err := recipe.NewQueue(ctx, c, "jobs/resize")
	if err != nil {
		fmt.Println("queue:", err)
		return
	}
	for _, job := range []string{"img-1.png", "img-2.png"} {
		if _, err := q.Put(ctx, []byte(job)); err != nil {
			fmt.Println("put:", err)
			return
		}
	}
	for range 2 {
		job, err := q.Take(ctx)
		fmt.Printf("took %s %v\n", job, err)
	}
	// Output:
	// took img-1.png <nil>
	// took img-2.png <nil>
}

// Group membership: each process joins under its own name with its
// address; anyone lists the group or watches it change. A member leaves
// on Close, or when its session ends.
func ExampleJoin() {
	cfg, stop := fixtures.ExampleCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer c.Close()

	changes := recipe.WatchGroup(ctx, c, "svc/web/members")
	show := func(want int) {
		for v := range changes {
			if len(v.Members) == want {
				for _, m := range v.Members {
					fmt.Printf("%s at %s; ", m.Name, m.Data)
				}
				fmt.Println(len(v.Members), "members")
				return
			}
		}
	}
	show(0)
	me, err := recipe.Join(ctx, c, "svc/web/members", "web-1", []byte("10.0.0.1:8080"))
	if err != nil {
		fmt.Println("join:", err)
		return
	}
	show(1)
	me.Close() // leave
	show(0)
	// Output:
	// 0 members
	// web-1 at 10.0.0.1:8080; 1 members
	// 0 members
}

// A barrier: Set shuts it, Wait blocks while it is shut, Remove opens it
// for every waiter at once.
func ExampleBarrier() {
	cfg, stop := fixtures.ExampleCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer c.Close()

	gate := recipe.NewBarrier(c, "deploy/gate")
	if err := gate.Set(ctx); err != nil {
		fmt.Println("set:", err)
		return
	}
	passed := make(chan error)
	go func() { passed <- gate.Wait(ctx) }()
	// ... the migration the workers must not start before ...
	if err := gate.Remove(ctx); err != nil {
		fmt.Println("remove:", err)
		return
	}
	fmt.Println("worker passed:", <-passed)
	// Output:
	// worker passed: <nil>
}

// A double barrier for two: each member's Enter returns once both have
// entered, each Leave once both have left.
func ExampleDoubleBarrier() {
	cfg, stop := fixtures.ExampleCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer c.Close()

	done := make(chan string, 2)
	for _, name := range []string{"w1", "w2"} {
		go func() {
			b := recipe.NewDoubleBarrier(c, "jobs/round", name, 2)
			if err := b.Enter(ctx); err != nil {
				done <- "enter: " + err.Error()
				return
			}
			// ... the computation both run together ...
			if err := b.Leave(ctx); err != nil {
				done <- "leave: " + err.Error()
				return
			}
			done <- "ok"
		}()
	}
	fmt.Println(<-done, <-done)
	// Output:
	// ok ok
}

// A re-entrant lock: code that holds it may call code that takes it
// again through the same Mutex value; the cell's lock is released by the
// outermost Release.
func ExampleMutex() {
	cfg, stop := fixtures.ExampleCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer c.Close()

	m := recipe.NewMutex(c, "locks/db-migrate", client.WithLockDelay(10*time.Second))
	migrateTable := func(ctx context.Context) error {
		if err := m.Acquire(ctx); err != nil { // nested: counts only
			return err
		}
		defer m.Release(ctx)
		fmt.Println("migrating, depth", m.Depth())
		return nil
	}
	if err := m.Acquire(ctx); err != nil {
		fmt.Println("acquire:", err)
		return
	}
	err = migrateTable(m.Handle().LockContext())
	fmt.Println("migrated:", err, "depth", m.Depth())
	m.Release(ctx)
	fmt.Println("released, depth", m.Depth())
	// Output:
	// migrating, depth 2
	// migrated: <nil> depth 1
	// released, depth 0
}
