//go:build bug_aclskipsubop

package replica

// bugACLSkipSubOp is a seeded bug (TESTPLAN 16): the state machine forgets
// the write check on Acquire. The ACL matrix test must catch it.
const bugACLSkipSubOp = true
