package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"lockcell/client"
)

// requestReleaseCommand asks the holders of a lock to let it go.
func requestReleaseCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "request-release",
		Usage:     "ask the holders of a lock to let it go, saying why (they decide; nothing is freed)",
		ArgsUsage: "NAME",
		Description: "Sends every holder of the lock on NAME a release request naming you (your session and " +
			"principal) and --reason. A program holding the lock hears it on its handle " +
			"(Handle.ReleaseRequested); `lockcell lock --on-release-request SIGNAL` passes it on to its " +
			"command as that signal. Nothing is freed: each holder decides, and a waiter gets the lock " +
			"when the holders let go. Needs the write permission on NAME (the one taking its lock needs), " +
			"or the cell's admin principal. One session may ask the holders of one lock once a second; the " +
			"master writes an audit line with --reason and the sessions asked. A request is not " +
			"replicated: one a holder had not yet fetched when the master failed over is lost (ask again). " +
			"Prints how many holders were asked (0 when nobody else holds the lock).\n\n" +
			"Example: lockcell request-release jobs/etl --reason \"deploy 4.2 needs the etl lock\"",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "reason",
				Usage: fmt.Sprintf("why you want the lock (required, at most %d bytes): told to the holders and written to the audit log", client.MaxReleaseReason)},
		},
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 1, 1); err != nil {
				return err
			}
			reason := c.String("reason")
			if strings.TrimSpace(reason) == "" || len(reason) > client.MaxReleaseReason {
				return usageErrorf(c, "--reason must say why, in at most %d bytes", client.MaxReleaseReason)
			}
			name, err := e.name("request-release", c.Args().First())
			if err != nil {
				return err
			}
			cl, err := e.client()
			if err != nil {
				return fail("request-release", name, err)
			}
			h, err := cl.Open(e.ctx, name, client.Write)
			if err != nil {
				return fail("request-release", name, err)
			}
			defer h.Close()
			n, err := h.RequestRelease(e.ctx, reason)
			if err != nil {
				return fail("request-release", name, err)
			}
			if e.json {
				return e.printJSON(requestReleaseJSON{Name: name, Reason: reason, Asked: n})
			}
			switch n {
			case 0:
				_, err = fmt.Fprintf(e.stdout, "nobody holds %s: nobody was asked\n", name)
			case 1:
				_, err = fmt.Fprintf(e.stdout, "asked the holder of %s to release it\n", name)
			default:
				_, err = fmt.Fprintf(e.stdout, "asked %d holders of %s to release it\n", n, name)
			}
			return err
		},
	}
}

// requestReleaseJSON is request-release's output for scripts.
type requestReleaseJSON struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
	Asked  int    `json:"asked"`
}

// parseReleaseSignal reads lock's --on-release-request: a signal name,
// with or without its SIG prefix, in any case.
func parseReleaseSignal(s string) (os.Signal, error) {
	name := strings.TrimPrefix(strings.ToUpper(s), "SIG")
	if sig, ok := releaseSignals[name]; ok {
		return sig, nil
	}
	names := make([]string, 0, len(releaseSignals))
	for n := range releaseSignals {
		names = append(names, n)
	}
	slices.Sort(names)
	return nil, fmt.Errorf("--on-release-request %q: want one of %s", s, strings.Join(names, ", "))
}

// askedToRelease tells the user of lock who asked for the lock and why,
// and passes the request on to the command as sig, if set.
func (l *locker) askedToRelease(rr client.ReleaseRequest, sig os.Signal, ch *child) {
	who := fmt.Sprintf("session %d", rr.Session)
	if rr.Principal != "" {
		who += " (" + rr.Principal + ")"
	}
	if sig == nil {
		l.warnf("%s asks for %s: %q", who, l.name, rr.Reason)
		return
	}
	l.warnf("%s asks for %s: %q; sending the command %s", who, l.name, rr.Reason, releaseSignalName(sig))
	ch.signal(sig)
}

// releaseSignalName is sig's name as --on-release-request takes it.
func releaseSignalName(sig os.Signal) string {
	for name, s := range releaseSignals {
		if s == sig {
			return "SIG" + name
		}
	}
	return sig.String()
}
