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

// Kind is what a Call did to its file.
type Kind uint8

// Kinds of calls.
const (
	// Read is GetContentsAndStat: Value and Gen read.
	Read Kind = iota
	// Stat is GetStat: Gen read.
	Stat
	// Set is SetContents on a file the history created: Value written,
	// Gen the new generation. On an absent file it is a violation.
	Set
	// Put is SetContents on a file created outside the history (selfcheck
	// creates its files before it records): legal whether or not the
	// model has seen the file, which the first Put makes present. Until
	// then nothing can read it.
	Put
	// CAS is SetContents with IfGeneration(IfGen): Gen the new generation,
	// or Mismatch.
	CAS
	// Create is an exclusive create with contents Value: ok, or Exists.
	Create
	// Delete is a delete: ok, or NotFound.
	Delete
)

// Result is a definite outcome of a Call.
type Result uint8

// Results.
const (
	OK       Result = iota
	NotFound        // the file does not exist
	Exists          // create of an existing file
	Mismatch        // compare-and-swap on another generation: nothing written
	// NoEffect is a definite failure that changed nothing and says nothing
	// of the file (a refused permission, a handle gone): placed anywhere
	// in its interval it is legal, and a later read of its value has no
	// write to explain it.
	NoEffect
	// Failed is any other definite failure: no state of the file explains
	// it.
	Failed
)

// Call is one operation on one file and its outcome, as the model reads
// it.
type Call struct {
	Object string // the file; Model partitions a history by it
	Kind   Kind
	// Value is what a write wrote (Set, Put, CAS, Create) or what a Read
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
	if c.Result == NoEffect {
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
	case Read:
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
	Init:  func() any { return State{} },
	Step:  func(state, input, _ any) (bool, any) { return Step(state.(State), input.(*Call)) },
	Equal: func(a, b any) bool { return a.(State) == b.(State) },
	Hash: func(state any) uint64 {
		// FNV-1a over the fields, without fmt: the checker hashes every
		// state it caches.
		s := state.(State)
		h := uint64(14695981039346656037)
		mix := func(b byte) { h = (h ^ uint64(b)) * 1099511628211 }
		if s.Exists {
			mix(1)
		}
		for i := 0; i < len(s.Value); i++ {
			mix(s.Value[i])
		}
		for _, g := range [2]uint64{s.Gen, s.Floor} {
			for i := range 8 {
				mix(byte(g >> (8 * i)))
			}
		}
		return h
	},
	DescribeOperation: func(_, output any) string { return fmt.Sprint(output) },
	DescribeState:     func(state any) string { return state.(State).String() },
}
