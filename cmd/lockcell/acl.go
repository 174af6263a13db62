package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"lockcell/client"
)

// aclCommand shows and changes a node's ACL names (docs/spec.md#acls).
func aclCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "acl",
		Usage: "show or change a node's ACL files",
		Description: "Every node names three ACL files in /ls/<cell>/acl/ — read, write and change-ACL — each " +
			"listing principals one a line. An empty name means the default: anyone may read, only the " +
			"node's creator may write or change ACLs; the cell admin may always do everything." +
			"\n\nExample: lockcell acl get /ls/local/jobs",
		Subcommands: []*cli.Command{
			{
				Name:      "get",
				Usage:     "print a node's ACL names and, where readable, who each file lists",
				ArgsUsage: "NAME",
				Description: `With --json prints {"name", "read", "write", "change_acl"}, each {"file", "principals", "error"}.` +
					"\n\nExample: lockcell acl get /ls/local/jobs",
				Action: func(c *cli.Context) error {
					if err := wantArgs(c, 1, 1); err != nil {
						return err
					}
					name, err := e.name("acl get", c.Args().First())
					if err != nil {
						return err
					}
					return e.aclGet(name)
				},
			},
			{
				Name:      "set",
				Usage:     "change a node's ACL names (flags not given keep their value; an empty value restores the default)",
				ArgsUsage: "NAME",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "read", Usage: "ACL file `NAME` whose principals may read"},
					&cli.StringFlag{Name: "write", Usage: "ACL file `NAME` whose principals may write and lock"},
					&cli.StringFlag{Name: "admin", Usage: "ACL file `NAME` whose principals may change these ACL names"},
					&cli.Uint64Flag{Name: "if-generation", Usage: "change the names only if the node's ACL generation is still `N`"},
				},
				Description: "Needs the change-ACL permission on the node. Each value names a file in " +
					"/ls/<cell>/acl/, which must exist (the cell refuses a missing one, which would deny everyone " +
					"but the admin: create it first); \"\" restores the default. A value is a file, not a " +
					"principal: to let everyone in, name a file holding the line * " +
					"(lockcell put /ls/<cell>/acl/everyone '*'). With --json prints the new names and ACL generation. " +
					"With --if-generation N the change is a compare-and-swap: it happens only if the node's ACL " +
					"generation (acl_generation in stat --json) is still N, and otherwise fails with " +
					"generation_mismatch, changing nothing." +
					"\n\nExamples: lockcell acl set /ls/local/jobs --read staff --write ops --admin ops; " +
					"lockcell acl set --if-generation 42 /ls/local/jobs --write ops",
				Action: func(c *cli.Context) error {
					if c.NArg() < 1 {
						return wantArgs(c, 1, 1)
					}
					set, err := aclSetFlags(c)
					if err != nil {
						return err
					}
					var opts []client.SetOption
					if g, ok := set["if-generation"]; ok {
						delete(set, "if-generation")
						gen, perr := strconv.ParseUint(g, 10, 64)
						if perr != nil {
							return usageErrorf(c, "--if-generation %q is not a generation (a whole number)", g)
						}
						opts = append(opts, client.IfGeneration(gen))
					}
					if len(set) == 0 {
						return usageErrorf(c, "give at least one of --read, --write, --admin")
					}
					name, err := e.name("acl set", c.Args().First())
					if err != nil {
						return err
					}
					return e.aclSet(name, set, opts)
				},
			},
		},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usageErrorf(c, "unknown acl verb %q (want get or set)", c.Args().First())
			}
			return usageErrorf(c, "want acl get NAME or acl set NAME --read A --write B --admin C")
		},
	}
}

// aclFileJSON is one of a node's ACL names and what its file says.
type aclFileJSON struct {
	File       string   `json:"file"`
	Principals []string `json:"principals"`
	Error      string   `json:"error,omitempty"`
}

func (e *env) aclGet(name string) error {
	cl, err := e.client()
	if err != nil {
		return err
	}
	h, err := cl.Open(e.ctx, name, client.Read)
	if err != nil {
		return fail("acl get", name, err)
	}
	defer h.Close()
	a, err := h.GetACL(e.ctx)
	if err != nil {
		return fail("acl get", name, err)
	}
	files := []struct {
		label string
		file  string
	}{{"read", a.Read}, {"write", a.Write}, {"change-acl", a.ChangeACL}}
	out := make([]aclFileJSON, len(files))
	for i, f := range files {
		out[i] = e.aclFile(cl, f.file)
	}
	if e.json {
		return e.printJSON(struct {
			Name      string      `json:"name"`
			Read      aclFileJSON `json:"read"`
			Write     aclFileJSON `json:"write"`
			ChangeACL aclFileJSON `json:"change_acl"`
		}{name, out[0], out[1], out[2]})
	}
	for i, f := range files {
		switch o := out[i]; {
		case o.File == "" && f.label == "read":
			fmt.Fprintf(e.stdout, "%-11s (default: every principal)\n", f.label)
		case o.File == "":
			fmt.Fprintf(e.stdout, "%-11s (default: the node's creator)\n", f.label)
		case o.Error != "":
			fmt.Fprintf(e.stdout, "%-11s %s (%s)\n", f.label, o.File, o.Error)
		default:
			fmt.Fprintf(e.stdout, "%-11s %s: %s\n", f.label, o.File, strings.Join(o.Principals, " "))
		}
	}
	return nil
}

// aclFile reads an ACL file's principals, if the caller may.
func (e *env) aclFile(cl *client.Client, file string) aclFileJSON {
	out := aclFileJSON{File: file, Principals: []string{}}
	if file == "" {
		return out
	}
	data, _, err := e.readWith(cl, cl.ACLDir()+"/"+file)
	switch {
	case errors.Is(err, client.ErrNotFound):
		out.Error = "missing: denies all but the admin"
	case err != nil:
		out.Error = err.Error()
	default:
		for _, line := range strings.Split(string(data), "\n") {
			if p := strings.TrimSpace(line); p != "" && !strings.HasPrefix(p, "#") {
				out.Principals = append(out.Principals, p)
			}
		}
	}
	return out
}

func (e *env) readWith(cl *client.Client, name string) ([]byte, client.Stat, error) {
	h, err := cl.Open(e.ctx, name, client.Read)
	if err != nil {
		return nil, client.Stat{}, err
	}
	defer h.Close()
	return h.GetContentsAndStat(e.ctx)
}

// aclSetFlags collects --read/--write/--admin/--if-generation given
// before NAME (parsed by cli) or after it, as in "acl set NAME --read A",
// which cli leaves as arguments.
func aclSetFlags(c *cli.Context) (map[string]string, error) {
	set := map[string]string{}
	for _, f := range []string{"read", "write", "admin"} {
		if c.IsSet(f) {
			set[f] = c.String(f)
		}
	}
	if c.IsSet("if-generation") {
		set["if-generation"] = strconv.FormatUint(c.Uint64("if-generation"), 10)
	}
	rest := c.Args().Tail()
	for i := 0; i < len(rest); i++ {
		arg := strings.TrimLeft(rest[i], "-")
		if !strings.HasPrefix(rest[i], "-") {
			return nil, usageErrorf(c, "want exactly 1 argument (NAME), got %q too", rest[i])
		}
		key, val, hasVal := strings.Cut(arg, "=")
		if key != "read" && key != "write" && key != "admin" && key != "if-generation" {
			return nil, usageErrorf(c, "unknown flag %q (want --read, --write, --admin or --if-generation)", rest[i])
		}
		if !hasVal {
			if i+1 >= len(rest) {
				return nil, usageErrorf(c, "flag --%s needs a value (\"\" restores the default)", key)
			}
			i++
			val = rest[i]
		}
		set[key] = val
	}
	return set, nil
}

// aclSet changes the names set says, keeping the others as the node has
// them; opts carries --if-generation to SetACL.
func (e *env) aclSet(name string, set map[string]string, opts []client.SetOption) error {
	cl, err := e.client()
	if err != nil {
		return err
	}
	h, err := cl.Open(e.ctx, name, client.Read)
	if err != nil {
		return fail("acl set", name, err)
	}
	defer h.Close()
	a, err := h.GetACL(e.ctx)
	if err != nil {
		return fail("acl set", name, err)
	}
	if v, ok := set["read"]; ok {
		a.Read = v
	}
	if v, ok := set["write"]; ok {
		a.Write = v
	}
	if v, ok := set["admin"]; ok {
		a.ChangeACL = v
	}
	st, err := h.SetACL(e.ctx, a, opts...)
	if err != nil {
		return fail("acl set", name, err)
	}
	if e.json {
		return e.printJSON(struct {
			Name      string `json:"name"`
			Read      string `json:"read"`
			Write     string `json:"write"`
			ChangeACL string `json:"change_acl"`
			ACLGen    uint64 `json:"acl_generation"`
		}{name, st.ReadACL, st.WriteACL, st.ChangeACL, st.ACLGen})
	}
	return nil
}
