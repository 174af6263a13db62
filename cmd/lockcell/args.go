package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// arrangeArgs returns a command line (without the program name) with its
// options where urfave/cli looks for them, so that people can type them
// anywhere before "--", as with GNU tools: the global options go before
// the verb, and each verb's (or sub-verb's) options go before its
// arguments. "lockcell ls /ls/local --json -l" becomes
// "lockcell --json ls -l /ls/local".
//
// An option is a word that names a flag of the verb or a global flag
// (-name, --name, -name=value, --name=value; a flag that takes a value
// takes the next word unless given with =). A verb's own flag wins over a
// global flag of the same name. Any other word, including "-", negative
// numbers and unknown -words, stays an argument in its place, so values
// such as put's "-5" keep working; "--" ends the options, and it and
// every word after it (lock's command line) are left as they are.
func arrangeArgs(app *cli.App, args []string) []string {
	globals := append([]cli.Flag{}, app.Flags...)
	if app.Version != "" && !app.HideVersion && cli.VersionFlag != nil {
		globals = append(globals, cli.VersionFlag)
	}
	var global []string
	i := 0
	// The options already before the verb stay there.
	for i < len(args) && isOptionWord(args[i]) {
		n := optionWords(globals, args, i)
		if n == 0 {
			n = 1 // unknown: the parser reports it
		}
		global = append(global, args[i:min(i+n, len(args))]...)
		i += n
	}
	if i >= len(args) {
		return args
	}
	cmd := app.Command(args[i])
	if cmd == nil {
		return args
	}
	head := []string{args[i]} // the verb, sub-verbs and their options
	i++
	var pos []string
	for {
		own := []string{}
		pos = pos[:0]
		descended := false
		for i < len(args) && args[i] != "--" {
			a := args[i]
			if isOptionWord(a) {
				verbFlags := append(append([]cli.Flag{}, cmd.Flags...), cli.HelpFlag)
				if n := optionWords(verbFlags, args, i); n > 0 {
					own = append(own, args[i:min(i+n, len(args))]...)
					i += n
					continue
				}
				if n := optionWords(globals, args, i); n > 0 {
					global = append(global, args[i:min(i+n, len(args))]...)
					i += n
					continue
				}
			}
			if len(cmd.Subcommands) > 0 && len(pos) == 0 {
				if sub := cmd.Command(a); sub != nil {
					head = append(append(head, own...), a)
					cmd = sub
					i++
					descended = true
					break
				}
			}
			pos = append(pos, a)
			i++
		}
		if descended {
			continue
		}
		out := append(append(global, head...), own...)
		out = append(out, pos...)
		return append(out, args[i:]...)
	}
}

// isOptionWord reports whether w looks like an option: one or two dashes
// and a name.
func isOptionWord(w string) bool {
	return len(w) > 1 && w[0] == '-' && w != "--" && !strings.HasPrefix(w, "---")
}

// optionWords returns how many words the option at args[i] spans when it
// names one of flags (1, or 2 with its value), or 0 when it names none.
func optionWords(flags []cli.Flag, args []string, i int) int {
	name, _, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
	for _, f := range flags {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			if tv, ok := f.(cli.DocGenerationFlag); ok && tv.TakesValue() && !hasValue {
				return 2
			}
			return 1
		}
	}
	return 0
}
