package client

import (
	"context"
	"errors"

	"lockcell/wire"
)

// WithParents makes an Open with Create first create the missing parent
// directories of the name, as MkdirAll does, when the parent is missing.
// The Open is tried first, so when the parents exist it costs nothing
// more. A parent that cannot be created fails the Open with MkdirAll's
// error: an *OpError whose Op is "mkdir" and whose Path is that parent.
// Without Create the Open fails with ErrBadRequest: only a create needs
// parents.
func WithParents() OpenOption {
	return func(o *openOptions) { o.parents = true }
}

// MkdirAll creates the directory name and every missing directory above
// it, like os.MkdirAll. A directory that exists already is success, also
// when another client creates it at the same time, so concurrent callers
// creating the same tree all succeed. It fails with an error matching
// ErrNotDir when a component of name is a file, ErrPermission when the
// caller may not create a missing directory, and ErrExists when a
// component is a node the caller may neither read nor write (the cell
// tells such a caller no more than that the name is taken); the error is
// an *OpError whose Path is the component that failed.
//
// Existing directories cost one call at most: MkdirAll tries name first
// and climbs only past missing ones; each directory it creates costs one
// call more. Its directories are made as Open with Create|Directory makes
// them: they take their parent's ACL names. A relative name is resolved
// as ResolveName says.
func (c *Client) MkdirAll(ctx context.Context, name string) error {
	name = c.abs(name)
	if err := wire.ValidateName(c.cfg.Cell, name); err != nil {
		return opErr("mkdir", name, err)
	}
	root := "/ls/" + c.cfg.Cell
	// Climb to the nearest directory that exists (or could be made), then
	// make the rest downwards: a missing parent is the only not-found
	// answer a create gives.
	var missing []string
	for dir := name; ; dir = wire.Parent(dir) {
		err := c.mkdir(ctx, dir)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNotFound) || dir == root {
			return err
		}
		missing = append(missing, dir)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := c.mkdir(ctx, missing[i]); err != nil {
			return err
		}
	}
	return nil
}

// mkdir creates one directory, or opens the one that exists: without
// Excl the cell answers an existing directory with success, which is
// what makes a race between creators harmless. Neither Read nor Write is
// asked for, so an existing directory the caller may only traverse
// (write but not read, or read but not write) is no obstacle.
func (c *Client) mkdir(ctx context.Context, dir string) error {
	h, err := c.Open(ctx, dir, Create|Directory)
	if err == nil {
		h.Close()
		return nil
	}
	if !errors.Is(err, ErrExists) {
		return reop("mkdir", dir, err)
	}
	// Create without Excl fails on a node of the other kind, or on one
	// the caller may not see. Opening it as a directory tells them apart.
	if h, err2 := c.Open(ctx, dir, Directory); err2 == nil {
		h.Close() // a directory after all: it was replaced meanwhile
		return nil
	} else if errors.Is(err2, ErrNotDir) {
		return reop("mkdir", dir, err2)
	}
	return reop("mkdir", dir, err)
}

// reop renames the operation of an *OpError from Open, so the caller sees
// which of its own operations failed, not the Open inside it.
func reop(op, path string, err error) error {
	var oe *OpError
	if errors.As(err, &oe) {
		return &OpError{Op: op, Path: path, Err: oe.Err}
	}
	return opErr(op, path, err)
}

// openParents is Open's retry after creating the missing parents of name.
func (c *Client) openParents(ctx context.Context, name string, err error) error {
	if !errors.Is(err, ErrNotFound) {
		return err
	}
	// MkdirAll's own *OpError, so its Path names the parent that failed
	// and callers can tell it from a failure of name itself.
	return c.MkdirAll(ctx, wire.Parent(name))
}
