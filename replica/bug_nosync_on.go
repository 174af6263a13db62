//go:build bug_nosync

package replica

// bugNoSync is a seeded bug (docs/testplan.md#seeded-bugs; build tag
// bug_nosync): the badger store is opened without SyncWrites, so nothing is
// fsync'd. fixtures/safety's TestDurability and TestStoreSyncsBeforeReturn
// must fail with it.
const bugNoSync = true
