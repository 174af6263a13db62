package master

// The master's lock order, stated here once; every other mention in the
// master's code and docs points here. A lock may be taken while holding
// only locks above it:
//
//  1. invalidator.mu (invalidate.go). The invalidator calls the sessions
//     part (sessionLink) holding it; so no code holding Server.mu, the
//     reservations' or the sessions' mutex calls the invalidator (the
//     observer forgets an ended session's registrations after releasing
//     them).
//  2. Server.mu (server.go): the term of service.
//  3. reservations.mu (limits.go): sessions and handles being created.
//  4. sessions.mu (sessions.go): the lease table. Holding it the sessions
//     part calls nothing of the master's, only the state's Read and Raft's
//     IsLeader (through sessions.known: adopt, movedSince), the
//     leadership proof's stale signal, the stats' atomics, the clock's
//     timers and the idle sessions' calls (a leaf: markIdle checks a
//     session is still idle as it starts its drain, idle.go); it never
//     runs a parked call's reply callback holding it.
//  5. the leaves, which call nothing holding their mutex: acquire waits
//     (waits.go), lock-delay timers (lockdelay.go), stats, backups, audit,
//     read and write rations (rations.go), release asks, the leadership proof, the fan-out's
//     backlog, the idle sessions' calls (idle.go), the subtree watch
//     calls in progress (subtree.go).
//  6. the state's read lock (FSM.Read) last. The state
//     never calls into the master holding it: its observer runs after the
//     apply has unlocked. sessions.overflowMu guards one set and calls
//     nothing; it is the one master lock also taken under the state's
//     read lock (by the fan-out), and under sessions.mu.
//
// The membership semaphore (membership.go) is not a mutex: it serialises
// membership changes and is held across Raft calls, never under any lock
// above.
