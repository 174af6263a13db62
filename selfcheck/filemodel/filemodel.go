// Package filemodel is the sequential specification of a lockcell file as
// a Porcupine model: a register with content generations,
// compare-and-swap, create and delete. The prober (selfcheck) and the
// fault campaign (fixtures/chaos) check their histories against this one
// model, so a rule of the file is written once and a bug in it is caught
// by both. It depends on no lockcell package: each user turns its own
// records into Calls.
//
// Generations are Raft indexes the model cannot predict: a write whose
// generation the history does not show (its outcome is unknown, or a
// create) leaves the generation unknown until a read tells it, and every
// later write's generation must be above the highest one known so far.
package filemodel

import (
	"fmt"
	"maps"
	"slices"

	"github.com/anishathalye/porcupine"
)

// Kind is what a Call did to its file. The values are the operation
// names of the test fixtures' histories, so a recorded call needs no
// translation; any other kind is never legal.
type Kind string

// Kinds of calls.
const (
	Get  Kind = "get"  // GetContentsAndStat: Value and Gen read
	Stat Kind = "stat" // GetStat: Gen read
	// Set is SetContents on a file the history created: Value written,
	// Gen the new generation. On an absent file it is a violation.
	Set Kind = "set"
	// Put is SetContents on a file created outside the history (selfcheck
	// creates its files before it records): legal whether or not the
	// model has seen the file, which the first Put makes present. Until
	// then nothing can read it.
	Put    Kind = "put"
	CAS    Kind = "cas"    // SetContents with IfGeneration(IfGen): Gen the new generation, or Mismatch
	Create Kind = "create" // an exclusive create with contents Value: OK, or Exists
	Delete Kind = "delete" // OK, or NotFound
)

// Result is a definite outcome of a Call, named as in the fixtures'
// histories; any other is a failure no state explains.
type Result string

// Results.
const (
	OK       Result = ""
	NotFound Result = "notfound" // the file does not exist
	Exists   Result = "exists"   // create of an existing file
	Mismatch Result = "mismatch" // compare-and-swap on another generation: nothing written
	// NoEffect and Denied are definite failures that changed nothing and
	// say nothing of the file (a handle gone twice; a refused
	// permission): placed anywhere in their interval they are legal, and
	// a later read of their value has no write to explain it.
	NoEffect Result = "noeffect"
	Denied   Result = "denied"
)

// Call is one operation on one file and its outcome, as the model reads
// it.
type Call struct {
	Object string // the file; Model partitions a history by it
	Kind   Kind
	// Value is what a write wrote (Set, Put, CAS, Create) or what a Get
	// returned.
	Value   string
	IfGen   uint64 // CAS: the generation expected
	Gen     uint64 // the generation read or written (0: not known)
	Result  Result
	Unknown bool // the call may or may not have taken effect (it returns at +infinity)
}

// State is the model's file.
type State struct {
	Exists bool
	Value  string
	// Gen is the file's content generation, 0 while the history has not
	// shown it; Floor is the highest generation known of any write placed
	// so far.
	Gen   uint64
	Floor uint64
}

// genMay reports whether the file's generation may be g.
func (s State) genMay(g uint64) bool {
	if s.Gen != 0 {
		return s.Gen == g
	}
	return g > s.Floor
}

func (s State) written(v string, g uint64) State {
	s.Exists, s.Value, s.Gen = true, v, g
	s.Floor = max(s.Floor, g)
	return s
}

// String describes the state for people: the contents and generation
// ("?" while unknown), or "absent" with the floor a re-create's
// generation must exceed.
func (s State) String() string {
	if !s.Exists {
		return fmt.Sprintf("absent (floor %d)", s.Floor)
	}
	if s.Gen == 0 {
		return fmt.Sprintf("%q gen ?", s.Value)
	}
	return fmt.Sprintf("%q gen %d", s.Value, s.Gen)
}

// Step is the sequential specification: whether c can take effect on s
// (be linearized here), and the state after it.
func Step(s State, c *Call) (bool, State) {
	if c.Result == NoEffect || c.Result == Denied {
		return true, s
	}
	if c.Unknown {
		// Linearized here, the call took effect when it could (it may
		// also be linearized after everything else, where it is never
		// seen).
		switch c.Kind {
		case Set:
			if s.Exists {
				return true, s.written(c.Value, 0)
			}
		case Put:
			return true, s.written(c.Value, 0)
		case CAS:
			if s.Exists && s.genMay(c.IfGen) {
				return true, s.written(c.Value, 0)
			}
		case Create:
			if !s.Exists {
				return true, s.written(c.Value, 0)
			}
		case Delete:
			if s.Exists {
				return true, State{Floor: s.Floor}
			}
		}
		return true, s
	}
	if c.Result == NotFound {
		return !s.Exists, s
	}
	switch c.Kind {
	case Get:
		if !s.Exists || c.Result != OK || s.Value != c.Value || !s.genMay(c.Gen) {
			return false, s
		}
		return true, s.written(s.Value, c.Gen)
	case Stat:
		if !s.Exists || c.Result != OK || !s.genMay(c.Gen) {
			return false, s
		}
		return true, s.written(s.Value, c.Gen)
	case Set, Put:
		if (c.Kind == Set && !s.Exists) || c.Result != OK || c.Gen <= s.Floor || (s.Gen != 0 && c.Gen <= s.Gen) {
			return false, s
		}
		return true, s.written(c.Value, c.Gen)
	case CAS:
		if !s.Exists {
			return false, s
		}
		if c.Result == Mismatch {
			return s.Gen == 0 || s.Gen != c.IfGen, s
		}
		if c.Result != OK || !s.genMay(c.IfGen) || c.Gen <= s.Floor || c.Gen <= c.IfGen {
			return false, s
		}
		return true, s.written(c.Value, c.Gen)
	case Create:
		if c.Result == Exists {
			return s.Exists, s
		}
		if s.Exists || c.Result != OK {
			return false, s
		}
		return true, s.written(c.Value, 0)
	case Delete:
		if !s.Exists || c.Result != OK {
			return false, s
		}
		return true, State{Floor: s.Floor}
	}
	return false, s
}

// Model is the Porcupine model of lockcell files: an Operation's Input is
// a *Call, partitioned by Object; its Output is the user's own record of
// the call, which describes it (a fmt.Stringer) and is otherwise unread.
var Model = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		for _, op := range h {
			f := op.Input.(*Call).Object
			by[f] = append(by[f], op)
		}
		out := make([][]porcupine.Operation, 0, len(by))
		for _, f := range slices.Sorted(maps.Keys(by)) {
			out = append(out, by[f])
		}
		return out
	},
	Init:              func() any { return State{} },
	Step:              func(state, input, _ any) (bool, any) { return Step(state.(State), input.(*Call)) },
	Equal:             func(a, b any) bool { return a.(State) == b.(State) },
	DescribeOperation: func(_, output any) string { return fmt.Sprint(output) },
	DescribeState:     func(state any) string { return state.(State).String() },
}
