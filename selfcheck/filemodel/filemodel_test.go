package filemodel

import "testing"

// The one rule the two users differ in: a Put (selfcheck's write, to a
// file created before the history) is legal on a file the model has not
// seen and makes it present, a Set (the campaign's, which records every
// create) is not; before either, nothing reads the file.
func TestPutNeedsNoCreate(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Call
		ok   bool
	}{
		{"put", Call{Kind: Put, Value: "a", Gen: 5}, true},
		{"unknown put", Call{Kind: Put, Value: "a", Unknown: true}, true},
		{"set", Call{Kind: Set, Value: "a", Gen: 5}, false},
		{"get", Call{Kind: Get, Value: "", Gen: 5}, false},
		{"cas", Call{Kind: CAS, Value: "a", IfGen: 1, Gen: 5}, false},
	} {
		ok, s := Step(State{}, &tc.c)
		if ok != tc.ok {
			t.Errorf("%s on an absent file: legal %v, want %v", tc.name, ok, tc.ok)
		}
		if ok && tc.c.Kind == Put && (!s.Exists || s.Value != "a" || s.Gen != tc.c.Gen) {
			t.Errorf("%s: state after %v", tc.name, s)
		}
	}
	// An unknown Set on an absent file is placed as taking no effect.
	if ok, s := Step(State{}, &Call{Kind: Set, Value: "a", Unknown: true}); !ok || s.Exists {
		t.Errorf("unknown set on an absent file: %v %v", ok, s)
	}
}
