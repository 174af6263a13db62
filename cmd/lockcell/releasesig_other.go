//go:build !unix

package main

import "os"

// releaseSignals are the signals lock --on-release-request may pass on to
// its command: without Unix signals, an interrupt alone.
var releaseSignals = map[string]os.Signal{"INT": os.Interrupt}
