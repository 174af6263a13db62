package selfcheck

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"

	"lockcell/selfcheck/filemodel"
)

// Verdict is the outcome of a check.
type Verdict string

// Verdicts.
const (
	Linearizable Verdict = "linearizable"
	Violation    Verdict = "violation"
	// Undecided: the checker ran out of time before it could decide.
	Undecided Verdict = "undecided"
)

// Failure is one object whose history is not linearizable: the point where
// every attempt to order its operations got stuck.
type Failure struct {
	Object string `json:"object"`
	// Linearized is the end of the longest linearizable prefix Porcupine
	// found (at most its last five operations), each with the object's
	// state after it.
	Linearized []Step `json:"linearized"`
	// Stuck is the first operation (by return time) that no order after
	// that prefix can place.
	Stuck Op `json:"stuck"`
	// Witnesses are operations that show why, when the checker can name
	// them: for a read, the newest write that completed before the read
	// began; for the lock, the other session's grant it overlaps.
	Witnesses []Op `json:"witnesses,omitempty"`
	// Reason says it in words.
	Reason string `json:"reason"`
}

// Step is an operation in a linearization and the state after it.
type Step struct {
	Op    Op     `json:"op"`
	State string `json:"state"`
}

// Report is what Check found.
type Report struct {
	Verdict  Verdict   `json:"verdict"`
	Ops      int       `json:"operations"`       // operations checked
	Unknown  int       `json:"unknown_outcomes"` // of them with an unknown outcome
	Failures []Failure `json:"failures,omitempty"`
	// LockCheckedUntil, when set, is the invocation of the first lock
	// operation with an unknown outcome: the lock's history is checked up
	// to it (a withdrawn wait may have held the lock for a moment the
	// history cannot show).
	LockCheckedUntil time.Duration `json:"lock_checked_until_ns,omitempty"`
	CheckTime        time.Duration `json:"check_ns"`
}

// Check checks a history for linearizability, each object on its own (a
// file is a register with content generations and compare-and-swap; the
// lock's file is an exclusive lock with lock generations), giving up after
// timeout (Undecided).
func Check(ops []Op, timeout time.Duration) Report {
	start := time.Now()
	objects := map[string][]porcupine.Operation{}
	var rep Report
	// A withdrawn wait (an Acquire whose outcome is unknown) may have been
	// granted and undone at once: a moment of holding no operation
	// records. Lock operations invoked after it are left out.
	cut := time.Duration(math.MaxInt64)
	for _, o := range ops {
		if o.Kind == KindAcquire && o.Unknown && o.Call < cut {
			cut = o.Call
		}
	}
	if cut != math.MaxInt64 {
		rep.LockCheckedUntil = cut
	}
	for i := range ops {
		o := &ops[i]
		if o.Unknown && (o.Kind == KindRead || o.Kind == KindHolder) {
			continue // changes nothing and says nothing
		}
		if isLock(o.Kind) && o.Call > cut {
			continue
		}
		ret := int64(o.Return)
		if o.Unknown {
			ret = math.MaxInt64
			rep.Unknown++
		}
		objects[o.Object] = append(objects[o.Object], porcupine.Operation{
			ClientId: o.Session, Input: o, Output: o, Call: int64(o.Call), Return: ret})
		rep.Ops++
	}
	rep.Verdict = Linearizable
	for _, name := range slices.Sorted(maps.Keys(objects)) {
		part := objects[name]
		model := lockModel
		if !isLock(part[0].Output.(*Op).Kind) {
			// The file model's input is its Call; the Op stays the output.
			model = fileModel
			calls := make([]filemodel.Call, len(part)) // one allocation for the object's calls
			for i := range part {
				calls[i] = fileCall(part[i].Output.(*Op))
				part[i].Input = &calls[i]
			}
		}
		left := timeout - time.Since(start)
		if left <= 0 {
			rep.Verdict = Undecided
			break
		}
		res, info := porcupine.CheckOperationsVerbose(model, part, left)
		switch res {
		case porcupine.Illegal:
			rep.Verdict = Violation
			rep.Failures = append(rep.Failures, explain(model, name, part, info))
		case porcupine.Unknown:
			if rep.Verdict == Linearizable {
				rep.Verdict = Undecided
			}
		}
	}
	rep.CheckTime = time.Since(start)
	return rep
}

func isLock(k Kind) bool { return k == KindAcquire || k == KindRelease || k == KindHolder }

// explain turns Porcupine's partial linearizations of a failed object into
// a Failure: the longest prefix, the first operation it cannot place, and
// witnesses.
func explain(model porcupine.Model, name string, part []porcupine.Operation, info porcupine.LinearizationInfo) Failure {
	f := Failure{Object: name}
	var longest []porcupine.Operation
	for _, p := range info.PartialLinearizationsOperations() {
		for _, l := range p {
			if len(l) > len(longest) {
				longest = l
			}
		}
	}
	placed := map[*Op]bool{}
	state := model.Init()
	var steps []Step
	for _, op := range longest {
		o := op.Output.(*Op)
		placed[o] = true
		_, state = model.Step(state, op.Input, o)
		steps = append(steps, Step{Op: *o, State: model.DescribeState(state)})
	}
	f.Linearized = steps[max(0, len(steps)-5):]
	var stuck *Op
	for _, op := range part {
		o := op.Output.(*Op)
		if placed[o] || o.Unknown {
			continue
		}
		if stuck == nil || o.Return < stuck.Return {
			stuck = o
		}
	}
	if stuck == nil {
		f.Reason = "the checker found no linearization, but every operation is in its longest prefix"
		return f
	}
	f.Stuck = *stuck
	f.Reason = fmt.Sprintf("no order of the operations places %s after %q", stuck, model.DescribeState(state))
	switch stuck.Kind {
	case KindRead:
		// The newest write that completed before the read began.
		var newest *Op
		for _, op := range part {
			o := op.Output.(*Op)
			if (o.Kind == KindWrite || o.Kind == KindCAS) && !o.Unknown && o.Err == "" && o.Return < stuck.Call &&
				(newest == nil || o.Gen > newest.Gen) {
				newest = o
			}
		}
		var wrote *Op
		for _, op := range part {
			o := op.Output.(*Op)
			if (o.Kind == KindWrite || o.Kind == KindCAS) && o.Err == "" && o.Value == stuck.Value {
				wrote = o
			}
		}
		switch {
		case wrote == nil:
			f.Reason = fmt.Sprintf("the read returned %q, which no write wrote", stuck.Value)
		case newest != nil && newest.Gen > stuck.Gen:
			f.Witnesses = append(f.Witnesses, *newest, *wrote)
			f.Reason = fmt.Sprintf("stale read: it returned generation %d, but a write of generation %d completed %s before the read began",
				stuck.Gen, newest.Gen, stuck.Call-newest.Return)
		case wrote.Call > stuck.Return:
			f.Witnesses = append(f.Witnesses, *wrote)
			f.Reason = "the read returned a value written by a call invoked after the read returned"
		}
	case KindAcquire, KindHolder:
		// Another session's grant that overlaps: granted before this
		// operation returned, with no release of it invoked before then.
		for _, op := range part {
			o := op.Output.(*Op)
			if o.Kind != KindAcquire || o.Session == stuck.Session || o.Unknown || o.Return > stuck.Return {
				continue
			}
			released := false
			for _, op2 := range part {
				r := op2.Output.(*Op)
				if r.Kind == KindRelease && r.Session == o.Session && r.Err == "" &&
					r.Call > o.Return && r.Call < stuck.Return {
					released = true
					break
				}
			}
			if !released {
				f.Witnesses = append(f.Witnesses, *o)
			}
		}
		if len(f.Witnesses) > 0 && stuck.Kind == KindAcquire {
			f.Reason = fmt.Sprintf("two holders: session %d was granted the lock while session %d held it", stuck.Session, f.Witnesses[0].Session)
		}
	}
	return f
}

// fileModel is the model of a file, shared with the fault campaign
// (filemodel); only its words for a file the history has not written yet
// are the prober's: its files exist, created before the history begins.
var fileModel = func() porcupine.Model {
	m := filemodel.Model
	m.Partition = nil // Check partitions by object itself
	m.DescribeState = func(state any) string {
		if s := state.(filemodel.State); s.Exists {
			return s.String()
		}
		return "not written yet"
	}
	return m
}()

// fileKinds maps the file operations onto the model's: a write is a Put
// (the file exists before the history begins, created by Run's setup).
var fileKinds = map[Kind]filemodel.Kind{KindRead: filemodel.Get, KindWrite: filemodel.Put, KindCAS: filemodel.CAS}

// fileCall is the model's view of a file operation.
func fileCall(o *Op) filemodel.Call {
	// A kind the model does not know ("") is never legal, nor is a
	// failure it does not know.
	c := filemodel.Call{Object: o.Object, Kind: fileKinds[o.Kind], Value: o.Value, IfGen: o.IfGen, Gen: o.Gen, Unknown: o.Unknown}
	switch o.Err {
	case "":
	case ErrMismatch:
		c.Result = filemodel.Mismatch
	default:
		c.Result = "selfcheck: " + filemodel.Result(o.Err)
	}
	return c
}

// lockState is the lock as the model sees it: its holder (a session index
// or HolderNone), the current grant's lock generation (0 until a holder
// read shows it) and the highest generation seen, which every later grant
// exceeds.
type lockState struct {
	Holder int
	Gen    uint64
	Floor  uint64
}

func stepLock(s lockState, o *Op) (bool, lockState) {
	if o.Unknown {
		switch {
		case o.Kind == KindAcquire && s.Holder == HolderNone:
			return true, lockState{Holder: o.Session, Floor: s.Floor}
		case o.Kind == KindRelease && s.Holder == o.Session:
			return true, lockState{Holder: HolderNone, Floor: max(s.Floor, s.Gen)}
		}
		return true, s
	}
	switch o.Kind {
	case KindAcquire:
		if s.Holder != HolderNone {
			return false, s
		}
		return true, lockState{Holder: o.Session, Floor: s.Floor}
	case KindRelease:
		if o.Err == ErrNotHeld {
			return s.Holder != o.Session, s
		}
		if o.Err != "" || s.Holder != o.Session {
			return false, s
		}
		return true, lockState{Holder: HolderNone, Floor: max(s.Floor, s.Gen)}
	case KindHolder:
		if o.Holder == HolderNone {
			return s.Holder == HolderNone, s
		}
		if o.Holder < 0 || o.Holder != s.Holder {
			return false, s
		}
		if s.Gen != 0 {
			return s.Gen == o.Gen, s
		}
		if o.Gen <= s.Floor {
			return false, s
		}
		return true, lockState{Holder: s.Holder, Gen: o.Gen, Floor: o.Gen}
	}
	return false, s
}

var lockModel = porcupine.Model{
	Init:              func() any { return lockState{Holder: HolderNone} },
	Step:              func(state, input, _ any) (bool, any) { return stepLock(state.(lockState), input.(*Op)) },
	Equal:             func(a, b any) bool { return a.(lockState) == b.(lockState) },
	DescribeOperation: func(input, _ any) string { return input.(*Op).String() },
	DescribeState: func(state any) string {
		s := state.(lockState)
		if s.Holder == HolderNone {
			return "free"
		}
		g := "?"
		if s.Gen != 0 {
			g = fmt.Sprint(s.Gen)
		}
		return fmt.Sprintf("held by session %d, lock gen %s", s.Holder, g)
	},
}

// sortOps orders a history by invocation, for output.
func sortOps(ops []Op) {
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
}
