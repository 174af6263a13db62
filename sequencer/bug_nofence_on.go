//go:build bug_nofence

package sequencer

// bugNoFence is a seeded bug (docs/testplan.md#seeded-bugs; build tag
// bug_nofence): the guard accepts sequencers older than one it has
// already accepted. fixtures/safety's TestMutualExclusionFencing must
// fail with it.
const bugNoFence = true
