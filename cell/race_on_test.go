//go:build race

package cell_test

// raceEnabled: the race detector is on (its shadow memory swamps RSS figures).
const raceEnabled = true
