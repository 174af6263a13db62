//go:build !bug_aclskipsubop

package fsm

// bugACLSkipSubOp is off in every real build; see bug_aclskipsubop_on.go.
const bugACLSkipSubOp = false
