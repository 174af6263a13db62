//go:build bug_nolockdelay

package fsm

// bugNoLockDelay is a seeded bug (docs/testplan.md#seeded-bugs; build tag
// bug_nolockdelay): an expired session's locks are free at once: no
// lock-delay is recorded. fixtures/safety's TestLockDelay must fail with it.
const bugNoLockDelay = true
