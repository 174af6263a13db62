package mirror

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"lockcell/client"
)

// How a change is applied: read the source node as it is now, then make
// the destination match it with writes conditional on what was read of
// the destination (a create only where the name is missing, a write or a
// delete only at the content generation just read). A condition that
// fails means someone else changed the destination in between (another
// mirror process, an earlier try that did land): the step reads both
// again, a few times, so it never puts back something older than what
// it read from the source.

// casTries is how often one step re-reads after a failed condition
// before it reports the failure (and is retried later).
const casTries = 5

// errRaced is a step that lost every one of its tries to other writers.
var errRaced = errors.New("mirror: the destination kept changing under the step")

// nodeKind is what the source holds at a name.
type nodeKind uint8

const (
	kindMissing nodeKind = iota
	kindFile
	kindDir
)

// readSource returns what the source holds at src now.
func (m *Mirror) readSource(ctx context.Context, src string) (nodeKind, []byte, error) {
	c, err := m.cfg.Cells.Client(ctx, m.cfg.From)
	if err != nil {
		return 0, nil, err
	}
	h, err := c.Open(ctx, src, client.Read)
	if errors.Is(err, client.ErrNotFound) {
		return kindMissing, nil, nil
	}
	if err != nil {
		return 0, nil, err
	}
	defer h.Close()
	// One read tells a file's contents from a directory (ErrIsDir).
	data, st, err := h.GetContentsAndStat(ctx)
	switch {
	case errors.Is(err, client.ErrIsDir) || err == nil && st.Dir:
		return kindDir, nil, nil
	case errors.Is(err, client.ErrHandleInvalid) || errors.Is(err, client.ErrNotFound):
		return kindMissing, nil, nil
	case err != nil:
		return 0, nil, err
	}
	return kindFile, data, nil
}

// apply makes t's copy of src match the source.
func (m *Mirror) apply(ctx context.Context, t *target, src string) error {
	tc, err := m.cfg.Cells.Client(ctx, t.name)
	if err != nil {
		return err
	}
	kind, data, err := m.readSource(ctx, src)
	if err != nil {
		return fmt.Errorf("read %s: %w", src, err)
	}
	dst := m.dest(t, src)
	switch kind {
	case kindMissing:
		return removeTree(ctx, tc, dst)
	case kindDir:
		return ensureDir(ctx, tc, dst)
	default:
		return putFile(ctx, tc, dst, data)
	}
}

// putFile makes dst a file holding data.
func putFile(ctx context.Context, tc *client.Client, dst string, data []byte) error {
	for range casTries {
		h, err := tc.Open(ctx, dst, client.Read|client.Write)
		if errors.Is(err, client.ErrNotFound) {
			if err := tc.MkdirAll(ctx, parent(dst)); err != nil {
				return fmt.Errorf("make %s: %w", parent(dst), err)
			}
			_, err = tc.Txn(ctx).If(client.Missing(dst)).Then(client.OpCreate(dst, data)).Commit()
			var te *client.TxnError
			if errors.As(err, &te) && te.Check >= 0 {
				continue // created meanwhile: compare it
			}
			if err != nil {
				return fmt.Errorf("create %s: %w", dst, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("open %s: %w", dst, err)
		}
		cur, st, err := h.GetContentsAndStat(ctx)
		if errors.Is(err, client.ErrIsDir) || err == nil && st.Dir {
			h.Close()
			if err := removeTree(ctx, tc, dst); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			h.Close()
			if errors.Is(err, client.ErrHandleInvalid) {
				continue // deleted meanwhile
			}
			return fmt.Errorf("read %s: %w", dst, err)
		}
		if bytes.Equal(cur, data) {
			h.Close()
			return nil
		}
		err = h.SetContents(ctx, data, client.IfGeneration(st.ContentGen))
		h.Close()
		if errors.Is(err, client.ErrGenerationMismatch) || errors.Is(err, client.ErrHandleInvalid) {
			continue
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", dst, err)
		}
		return nil
	}
	return fmt.Errorf("write %s: %w", dst, errRaced)
}

// ensureDir makes dst a directory (a file in its place is deleted).
func ensureDir(ctx context.Context, tc *client.Client, dst string) error {
	for range casTries {
		err := tc.MkdirAll(ctx, dst)
		if err == nil {
			return nil
		}
		if !errors.Is(err, client.ErrNotDir) {
			return fmt.Errorf("make %s: %w", dst, err)
		}
		// A file where a directory goes (dst, or an ancestor in the copy).
		if err := removeFileAlong(ctx, tc, dst); err != nil {
			return err
		}
	}
	return fmt.Errorf("make %s: %w", dst, errRaced)
}

// removeFileAlong deletes the first file among dst and its ancestors.
func removeFileAlong(ctx context.Context, tc *client.Client, dst string) error {
	parts := strings.Split(strings.TrimPrefix(dst, "/"), "/")
	for i := 3; i <= len(parts); i++ { // from /ls/<cell>/<first>
		name := "/" + strings.Join(parts[:i], "/")
		h, err := tc.Open(ctx, name, client.Read)
		if errors.Is(err, client.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("open %s: %w", name, err)
		}
		st, err := h.GetStat(ctx)
		h.Close()
		if err != nil {
			return fmt.Errorf("stat %s: %w", name, err)
		}
		if !st.Dir {
			return removeTree(ctx, tc, name)
		}
	}
	return nil
}

// removeTree deletes dst and everything below it, a file only at the
// generation it was read at.
func removeTree(ctx context.Context, tc *client.Client, dst string) error {
	for range casTries {
		h, err := tc.Open(ctx, dst, client.Read)
		if errors.Is(err, client.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("open %s: %w", dst, err)
		}
		st, err := h.GetStat(ctx)
		if err != nil {
			h.Close()
			if errors.Is(err, client.ErrHandleInvalid) {
				continue
			}
			return fmt.Errorf("stat %s: %w", dst, err)
		}
		if st.Dir {
			err = removeChildren(ctx, tc, h, dst)
			h.Close()
			if err != nil {
				return err
			}
			_, err = tc.Txn(ctx).If(client.Exists(dst)).Then(client.OpDelete(dst)).Commit()
		} else {
			h.Close()
			_, err = tc.Txn(ctx).If(client.GenerationIs(dst, st.ContentGen)).Then(client.OpDelete(dst)).Commit()
		}
		var te *client.TxnError
		switch {
		case err == nil:
			return nil
		case errors.Is(err, client.ErrNotEmpty) || errors.As(err, &te) && te.Check >= 0 || errors.Is(err, client.ErrNotFound):
			continue // written or filled meanwhile, or gone: look again
		default:
			return fmt.Errorf("delete %s: %w", dst, err)
		}
	}
	return fmt.Errorf("delete %s: %w", dst, errRaced)
}

// removeChildren deletes everything below the directory h (at dir), a
// page at a time.
func removeChildren(ctx context.Context, tc *client.Client, h *client.Handle, dir string) error {
	after := ""
	for {
		ents, more, err := h.ReadDirPage(ctx, after, WalkPage)
		if err != nil {
			return fmt.Errorf("list %s: %w", dir, err)
		}
		for _, e := range ents {
			if err := removeTree(ctx, tc, dir+"/"+e.Name); err != nil {
				return err
			}
		}
		if !more || len(ents) == 0 {
			return nil
		}
		after = ents[len(ents)-1].Name
	}
}

// parent is the directory holding name.
func parent(name string) string { return name[:strings.LastIndexByte(name, '/')] }

// resync copies the whole source subtree to t and deletes from t's copy
// what the source lacks.
func (m *Mirror) resync(ctx context.Context, t *target) error {
	tc, err := m.cfg.Cells.Client(ctx, t.name)
	if err != nil {
		return err
	}
	sc, err := m.cfg.Cells.Client(ctx, m.cfg.From)
	if err != nil {
		return err
	}
	kind, _, err := m.readSource(ctx, m.cfg.Subtree)
	switch {
	case err != nil:
		return fmt.Errorf("read %s: %w", m.cfg.Subtree, err)
	case kind != kindDir:
		// Never taken as "delete every copy": a missing source is more
		// likely a mistake (or a permission) than the intent.
		return fmt.Errorf("the source subtree %s is not a directory the mirror can read", m.cfg.Subtree)
	}
	m.log.Info("mirror: full re-sync", "target", t.name)
	return m.mergeDir(ctx, sc, tc, t, m.cfg.Subtree)
}

// mergeDir makes t's copy of the source directory src match it: both
// listings are read in name order, a page at a time, and merged.
func (m *Mirror) mergeDir(ctx context.Context, sc, tc *client.Client, t *target, src string) error {
	dst := m.dest(t, src)
	if err := ensureDir(ctx, tc, dst); err != nil {
		return err
	}
	sh, err := sc.Open(ctx, src, client.Read)
	if errors.Is(err, client.ErrNotFound) {
		return removeTree(ctx, tc, dst) // gone meanwhile
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", src, err)
	}
	defer sh.Close()
	th, err := tc.Open(ctx, dst, client.Read)
	if err != nil {
		return fmt.Errorf("open %s: %w", dst, err)
	}
	defer th.Close()
	sl, tl := &lister{h: sh, name: src}, &lister{h: th, name: dst}
	for {
		se, err := sl.peek(ctx)
		if err != nil {
			return err
		}
		te, err := tl.peek(ctx)
		if err != nil {
			return err
		}
		switch {
		case se == nil && te == nil:
			return nil
		case se == nil || te != nil && te.Name < se.Name:
			// Only in the copy: the source has no such name.
			if err := removeTree(ctx, tc, dst+"/"+te.Name); err != nil {
				return err
			}
			tl.i++
			continue
		case te != nil && te.Name == se.Name:
			tl.i++
		}
		child := src + "/" + se.Name
		if se.Dir {
			err = m.mergeDir(ctx, sc, tc, t, child)
		} else {
			err = m.apply(ctx, t, child)
		}
		if err != nil {
			return err
		}
		sl.i++
	}
}

// lister reads a directory's listing a page at a time.
type lister struct {
	h     *client.Handle
	name  string
	page  []client.DirEntry
	i     int
	more  bool
	begun bool
}

// peek returns the next entry, or nil after the last.
func (l *lister) peek(ctx context.Context) (*client.DirEntry, error) {
	for l.i >= len(l.page) {
		if l.begun && !l.more {
			return nil, nil
		}
		after := ""
		if len(l.page) > 0 {
			after = l.page[len(l.page)-1].Name
		}
		ents, more, err := l.h.ReadDirPage(ctx, after, WalkPage)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", l.name, err)
		}
		l.page, l.i, l.more, l.begun = ents, 0, more, true
		if len(ents) == 0 {
			l.more = false
		}
	}
	return &l.page[l.i], nil
}
