package client

import "strings"

// ResolveName returns the full name that name stands for in cell, as every
// Client method that takes a name resolves it: a name starting with "/"
// is used as it is; any other is relative to the cell's root, /ls/<cell>,
// as on the lockcell command line ("svc/leader" is /ls/<cell>/svc/leader,
// and "" is the root itself). Nothing else is rewritten or checked: a
// relative name that is not valid once resolved (a trailing "/", "..")
// fails the call with ErrInvalidName like an absolute one, naming the
// resolved name.
func ResolveName(cell, name string) string {
	if strings.HasPrefix(name, "/") {
		return name
	}
	root := "/ls/" + cell
	if name == "" {
		return root
	}
	return root + "/" + name
}

// abs is ResolveName in the client's cell.
func (c *Client) abs(name string) string { return ResolveName(c.cfg.Cell, name) }
