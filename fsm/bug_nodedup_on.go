//go:build bug_nodedup

package fsm

// bugNoDedup is a seeded bug (docs/testplan.md#seeded-bugs; build tag
// bug_nodedup): the state machine ignores its request de-duplication table,
// so a retried request is applied again. fixtures/safety's
// TestAtMostOnceRetries must fail with it.
const bugNoDedup = true
