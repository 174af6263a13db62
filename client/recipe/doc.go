// Package recipe is leader election on a lockcell cell, built on package
// client's public API alone (as etcd's clientv3/concurrency is on
// clientv3).
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
