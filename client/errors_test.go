package client_test

import (
	"errors"
	"fmt"
	"testing"

	"lockcell/client"
	"lockcell/wire"
)

// client's typed errors are its own values, yet every error of a kind the
// cell returns matches client's error of that kind and no other, client's
// errors match the wire's, and the CLI's JSON code names still come out.
func TestTypedErrorsMatchTheCells(t *testing.T) {
	kinds := []struct {
		err  error
		code wire.Code
		name string
	}{
		{client.ErrNotFound, wire.CodeNotFound, "not_found"},
		{client.ErrExists, wire.CodeExists, "exists"},
		{client.ErrPermission, wire.CodePermission, "permission"},
		{client.ErrEpochChanged, wire.CodeBadEpoch, "bad_epoch"},
		{client.ErrTooMany, wire.CodeTooMany, "too_many"},
		{client.ErrQuotaExceeded, wire.CodeQuotaExceeded, "quota_exceeded"},
		{client.ErrStaleSequencer, wire.CodeStaleSequencer, "stale_sequencer"},
	}
	for _, k := range kinds {
		if k.code.Name() != k.name {
			t.Fatalf("code %d is named %q, the test expects %q", k.code, k.code.Name(), k.name)
		}
		fromCell := fmt.Errorf("open /ls/c/x: %w", wire.Errorf(k.code, "detail"))
		for _, o := range kinds {
			if got := errors.Is(fromCell, o.err); got != (o.code == k.code) {
				t.Errorf("errors.Is(the cell's %s, client's %s) = %v", k.name, o.name, got)
			}
			if got := errors.Is(k.err, o.err); got != (o.code == k.code) {
				t.Errorf("errors.Is(client's %s, client's %s) = %v", k.name, o.name, got)
			}
		}
		if !errors.Is(k.err, &wire.Error{Code: k.code}) {
			t.Errorf("client's %s does not match the wire's", k.name)
		}
		wrapped := &client.OpError{Op: "write", Path: "/ls/c/x", Err: k.err}
		if got := wire.CodeOf(wrapped).Name(); got != k.name || !errors.Is(wrapped, k.err) {
			t.Errorf("an OpError of client's %s: code %q, errors.Is %v", k.name, got, errors.Is(wrapped, k.err))
		}
		if k.err.Error() != "lockcell: "+k.code.String() {
			t.Errorf("client's %s reads %q", k.name, k.err.Error())
		}
	}
	if errors.Is(errors.New("lockcell: not found"), client.ErrNotFound) {
		t.Error("an untyped error with the same text matches ErrNotFound")
	}
}
