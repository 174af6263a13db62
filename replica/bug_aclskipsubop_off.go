//go:build !bug_aclskipsubop

package replica

// bugACLSkipSubOp is off in every real build; see bug_aclskipsubop_on.go.
const bugACLSkipSubOp = false
