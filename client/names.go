package client

import "strings"

// ResolveName returns the full name that name stands for in cell, as every
// Client method that takes a name resolves it: a name starting with "/"
// is used as it is; any other is relative to the cell's root, /ls/<cell>,
// as on the lockcell command line ("svc/leader" is /ls/<cell>/svc/leader).
// "" stays "", which is no name: a call given it fails with
// ErrInvalidName rather than open the cell's root because a variable was
// left unset. Nothing else is rewritten or checked: a
// relative name that is not valid once resolved (a trailing "/", "..")
// fails the call with ErrInvalidName like an absolute one, naming the
// resolved name.
func ResolveName(cell, name string) string {
	if strings.HasPrefix(name, "/") {
		return name
	}
	if name == "" {
		return ""
	}
	return "/ls/" + cell + "/" + name
}

// abs is ResolveName in the client's cell.
func (c *Client) abs(name string) string { return ResolveName(c.cfg.Cell, name) }
