//go:build bug_noinval

package master

// bugNoInval is a seeded bug (docs/testplan.md#seeded-bugs;
// build tag bug_noinval):
// writes do not wait for cache invalidations to be acknowledged
// (or for the cacher's lease to run out). fixtures/chaos's
// TestCacheNeverStale must fail with it.
const bugNoInval = true
