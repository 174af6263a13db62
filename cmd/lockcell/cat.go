package main

import (
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"lockcell/client"
)

// catCommand prints a file's contents.
func catCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "cat",
		Usage:     "print a file's contents",
		ArgsUsage: "NAME",
		Description: "Prints the contents raw, with nothing added. With --json prints " +
			`{"name", "contents" (when valid UTF-8), "contents_base64", "stat"}` + ", and with --max-staleness " +
			`"read": {"replica", "index", "age_ms", "follower"}, who answered.` + staleHelp +
			"\n\nExample: lockcell cat /ls/local/cfg/flag\n         lockcell cat --max-staleness 2s cfg/flag",
		Flags: []cli.Flag{staleFlag()},
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 1, 1); err != nil {
				return err
			}
			name, err := e.name("cat", c.Args().First())
			if err != nil {
				return err
			}
			var info client.ReadInfo
			data, st, err := e.read(name, staleOpts(c, &info)...)
			if err != nil {
				return fail("cat", name, err)
			}
			if e.json {
				out := struct {
					Name     string    `json:"name"`
					Contents *string   `json:"contents,omitempty"`
					Base64   []byte    `json:"contents_base64"`
					Stat     statJSON  `json:"stat"`
					Read     *readJSON `json:"read,omitempty"`
				}{Name: name, Base64: data, Stat: toStatJSON(name, st), Read: readInfoJSON(c, info)}
				if out.Base64 == nil {
					out.Base64 = []byte{} // "" rather than null
				}
				// Text is what people and jq want; base64 is always there
				// for contents that are not text.
				if utf8.Valid(data) {
					s := string(data)
					out.Contents = &s
				}
				return e.printJSON(out)
			}
			_, err = e.stdout.Write(data)
			return err
		},
	}
}

// read returns a file's contents and metadata.
func (e *env) read(name string, opts ...client.ReadOption) ([]byte, client.Stat, error) {
	cl, err := e.client()
	if err != nil {
		return nil, client.Stat{}, err
	}
	h, err := cl.Open(e.ctx, name, client.Read)
	if err != nil {
		return nil, client.Stat{}, err
	}
	defer h.Close()
	return h.GetContentsAndStat(e.ctx, opts...)
}
