//go:build bug_readnoverify

package master

// bugReadNoVerify is a seeded bug (docs/testplan.md#seeded-bugs;
// build tag bug_readnoverify):
// reads ignore VerifyLeader's verdict (a deposed master serves
// them from its own state). fixtures/chaos's TestStaleReadProbe must fail
// with it.
const bugReadNoVerify = true
