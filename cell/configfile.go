package cell

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Setting is one entry of a replica's configuration file: a flag's name
// and its value spelled as on the command line.
type Setting struct {
	// Key is the flag's name without dashes, e.g. "max-conns-per-ip".
	Key string
	// Value is the flag's value as text, e.g. "128", "4MiB" or "2s"; a
	// list in the file is joined with commas (as --peers takes it).
	Value string
	// Line is the key's line in the file, for error messages.
	Line int
}

// ErrConfigFile is wrapped by every error ReadSettings returns about a
// file's contents (as opposed to reading it).
var ErrConfigFile = errors.New("bad configuration file")

// ReadSettings reads a replica's configuration file: a YAML mapping from
// flag names (without dashes) to values, one file per replica, e.g.
//
//	id: "1"
//	peers:
//	  - 1=10.0.0.1:7001/10.0.0.1:7101
//	  - 2=10.0.0.2:7001/10.0.0.2:7101
//	max-conns-per-ip: 128
//	max-conn-buffer: 8MiB
//
// Values must be scalars or lists of scalars; a list becomes one value
// joined with commas. A key given twice is an error, so that a file never
// says two things. Which keys exist is the caller's business (the flags of
// the command that reads the file): ReadSettings keeps them in file order.
func ReadSettings(path string) ([]Setting, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	bad := func(line int, format string, args ...any) error {
		return fmt.Errorf("%w %s line %d: %s", ErrConfigFile, path, line, fmt.Sprintf(format, args...))
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrConfigFile, path, err)
	}
	if doc.Kind == 0 { // an empty file sets nothing
		return nil, nil
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, bad(root.Line, "the file must be a mapping of flag names to values (key: value lines)")
	}
	var out []Setting
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Value == "" {
			return nil, bad(k.Line, "a key must be a flag name")
		}
		key := strings.TrimLeft(k.Value, "-")
		if prev, dup := seen[key]; dup {
			return nil, bad(k.Line, "%q is set twice (first on line %d)", key, prev)
		}
		seen[key] = k.Line
		var val string
		switch v.Kind {
		case yaml.ScalarNode:
			if v.Tag == "!!null" {
				return nil, bad(v.Line, "%q has no value", key)
			}
			val = v.Value
		case yaml.SequenceNode:
			items := make([]string, 0, len(v.Content))
			for _, it := range v.Content {
				if it.Kind != yaml.ScalarNode {
					return nil, bad(it.Line, "%q: a list holds plain values only", key)
				}
				items = append(items, it.Value)
			}
			val = strings.Join(items, ",")
		default:
			return nil, bad(v.Line, "%q: the value must be a plain value or a list of them", key)
		}
		out = append(out, Setting{Key: key, Value: val, Line: k.Line})
	}
	return out, nil
}
