// Package recipe holds the coordination primitives programs build on a
// lockcell cell, each on package client's public API alone (as etcd's
// clientv3/concurrency is on clientv3, and Curator's recipes on
// ZooKeeper): leader election (Campaign, Leader, Observe, Lead), group
// membership (Join, Members, WatchGroup), a barrier and a double barrier
// (Barrier, DoubleBarrier), a FIFO work queue (Queue), a shared counter
// (Counter) and a re-entrant lock (Mutex). Each type's comment says what
// it guarantees and what happens when a session is in jeopardy or
// expires.
//
// The recipes lean on four features of the cell: ephemeral files die with
// their session, so a member or a waiter that dies leaves (groups, double
// barriers); sequential names sort in creation order (queues); a
// transaction checks and writes in one step, so a compare-and-swap never
// loses a race (counters, a queue's take); and a directory's ChildAdded
// and ChildRemoved events, with Overflow and Reannounce when some were
// lost, wake a waiter that re-reads the listing, so it never sleeps
// through a change (every blocking call also re-reads at least every
// QueueRecheck, a safety net).
//
// Campaign blocks until the caller leads the election on a file and
// returns the handle whose lock is the leadership: its LockContext ends
// the moment leadership may be lost, its GetSequencer fences the leader's
// writes, and Close resigns. Leader tells anyone who leads (ErrNoLeader
// when nobody does), and Observe streams the changes.
//
// Lead is the loop a program that leads for as long as it runs wants: it
// campaigns, calls the program's function with a leader context while it
// leads, keeps its leadership through a jeopardy the session survives
// (the cell confirms the lock at the same generation, so nobody led in
// between), campaigns again when the lock is lost, and resigns when its
// context ends or the function gives up.
//
// The election's file is a permanent file whose lock is taken
// exclusively and whose contents name the leader. When a leader's session
// fails, its lock-delay (client.WithLockDelay) keeps every other
// candidate out for that long after the session expired, which is the
// time a deposed leader that still runs has to stop; a permanent file
// keeps its lock-delay where an ephemeral one would take it along when it
// dies with the session.
package recipe
