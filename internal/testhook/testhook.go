// Package testhook holds what the tests of lockcell's packages read from
// inside the client library, which its public API does not offer
// applications. Package client sets these variables in an init function,
// so they are set in any test that links the client.
package testhook

var (
	// CallsSent returns how many calls this process's clients have put on
	// the wire so far (a cached read puts none; a retried call counts
	// each try).
	CallsSent func() uint64

	// PooledHandles reports how many idle handles the client c (a
	// *client.Client) keeps open for reuse.
	PooledHandles func(c any) int

	// ConnectTarget parses rules as client.EnvConnectTo's value and
	// returns the address they send addr to (addr when none matches).
	ConnectTarget func(rules, addr string) (string, error)
)
