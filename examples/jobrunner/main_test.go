package main

import (
	"os"
	"testing"

	"lockcell/fixtures"
)

// TestMain removes the binaries the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	fixtures.RemoveBuilds()
	os.Exit(code)
}
