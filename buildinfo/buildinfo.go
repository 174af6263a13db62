// Package buildinfo reports what a lockcell binary knows of its own build
// (module version, VCS commit, Go version) for both binaries' --version
// and the replicas' lockcell_build_info metric.
// It is a leaf: the CLI may use it without reaching server packages.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// BuildInfo is what a binary knows of its own build, from the information
// the Go toolchain embeds in it (runtime/debug.ReadBuildInfo).
type BuildInfo struct {
	// Module is the main module's path ("lockcell").
	Module string
	// Version is the main module's version: a release tag, a
	// pseudo-version derived from the commit, or "(devel)" when the
	// toolchain knew neither.
	Version string
	// Commit is the VCS revision the binary was built from, empty when
	// it was built outside a checkout or with -buildvcs=false.
	Commit string
	// CommitTime is the revision's commit time (RFC 3339), when known.
	CommitTime string
	// Modified is set when the checkout had uncommitted changes: the
	// binary is then not exactly Commit.
	Modified bool
	// Go is the toolchain version that built the binary.
	Go string
}

// Read returns the running binary's build information. Fields the
// binary does not carry are empty, never guessed.
func Read() BuildInfo {
	b := BuildInfo{Go: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.Module, b.Version, b.Go = info.Main.Path, info.Main.Version, info.GoVersion
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.time":
			b.CommitTime = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// String is the build on one line, e.g.
// "v0.0.0-20261203161904-8ca34a7b1c2d commit 8ca34a7b1c2d... (modified) go1.26.8".
func (b BuildInfo) String() string {
	v := b.Version
	if v == "" {
		v = "(unknown)"
	}
	parts := []string{v}
	if b.Commit != "" {
		parts = append(parts, "commit "+b.Commit)
		if b.Modified {
			parts = append(parts, "(modified)")
		}
	} else {
		parts = append(parts, "commit unknown")
	}
	if b.Go != "" {
		parts = append(parts, b.Go)
	}
	return strings.Join(parts, " ")
}

// Version is Read().String(): what `--version` prints after the
// binary's name.
func Version() string { return Read().String() }
