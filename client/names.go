package client

import "strings"

// abs resolves a name given to a Client method: a name starting with "/"
// is used as it is; any other is relative to the cell's root, /ls/<cell>,
// as on the lockcell command line ("svc/leader" is /ls/<cell>/svc/leader,
// and "" is the root itself). Nothing else is rewritten: a relative name
// that is not valid once resolved (a trailing "/", "..") fails with
// ErrInvalidName like an absolute one, naming the resolved name.
func (c *Client) abs(name string) string {
	if strings.HasPrefix(name, "/") {
		return name
	}
	root := "/ls/" + c.cfg.Cell
	if name == "" {
		return root
	}
	return root + "/" + name
}
