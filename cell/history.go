package cell

import "lockcell/fsm"

// setHistoryLimits bounds the replica's change history as the
// configuration says (zero: fsm's defaults).
func (c *Config) setHistoryLimits(state *fsm.FSM) {
	n, b := c.HistoryChanges, c.HistoryBytes
	if n == 0 {
		n = fsm.DefaultHistoryChanges
	}
	if b == 0 {
		b = fsm.DefaultHistoryBytes
	}
	state.SetHistoryLimits(n, b)
}
