package buildinfo

import (
	"runtime"
	"testing"
)

// The one-line form names every part the binary knows and says
// "unknown" rather than inventing a commit it does not have.
func TestString(t *testing.T) {
	for _, tc := range []struct {
		b    BuildInfo
		want string
	}{
		{BuildInfo{Version: "v1.2.3", Commit: "abc", Go: "go1.26.8"}, "v1.2.3 commit abc go1.26.8"},
		{BuildInfo{Version: "v1.2.3", Commit: "abc", Modified: true, Go: "go1.26.8"}, "v1.2.3 commit abc (modified) go1.26.8"},
		{BuildInfo{Version: "(devel)", Modified: true, Go: "go1.26.8"}, "(devel) commit unknown go1.26.8"},
		{BuildInfo{}, "(unknown) commit unknown"},
	} {
		if got := tc.b.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.b, got, tc.want)
		}
	}
	if got := Read().Go; got != runtime.Version() {
		t.Errorf("Read().Go = %q, want %q", got, runtime.Version())
	}
}
