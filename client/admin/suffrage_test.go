package admin

import (
	"testing"

	"lockcell/wire"
)

// The suffrage values admin reports are the ones the master sends.
func TestSuffrageIsTheWires(t *testing.T) {
	if SuffrageVoter != wire.SuffrageVoter || SuffrageNonvoter != wire.SuffrageNonvoter {
		t.Fatalf("admin's suffrages %q %q, the wire's %q %q", SuffrageVoter, SuffrageNonvoter, wire.SuffrageVoter, wire.SuffrageNonvoter)
	}
}
