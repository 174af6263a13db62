//go:build bug_aclskipsubop

package fsm

// bugACLSkipSubOp is a seeded bug (docs/testplan.md#seeded-bugs): the state
// machine forgets the write check on Acquire. The ACL matrix test must catch
// it.
const bugACLSkipSubOp = true
