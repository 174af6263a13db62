package client

import (
	"context"
	"fmt"
	"net"
	"strings"
)

// connectTo is one rule of a dialer that reaches replicas at other
// addresses than the ones the cell names, as curl's --connect-to does:
// a replica the cell knows as Host:Port is dialled at ToHost:ToPort. An
// empty Host or Port matches any; an empty ToHost or ToPort keeps the
// original. The cell's name for the replica stays what the client uses
// everywhere else, the TLS check of the replica's certificate included.
//
// It serves a client outside a container network, such as the host of a
// compose cell whose replicas call each other replica-1 .. replica-5 and
// publish their ports on 127.0.0.1: the rule "::127.0.0.1:" dials every
// replica at 127.0.0.1 on its own port, with no /etc/hosts entries.
type connectTo struct {
	Host, Port, ToHost, ToPort string
}

// parseConnectTo parses comma-separated rules HOST:PORT:TOHOST:TOPORT
// (IPv6 hosts in brackets). The first rule that matches an address wins.
func parseConnectTo(s string) ([]connectTo, error) {
	var out []connectTo
	for _, r := range strings.Split(s, ",") {
		if r = strings.TrimSpace(r); r == "" {
			continue
		}
		f, err := splitConnectTo(r)
		if err != nil {
			return nil, fmt.Errorf("connect-to rule %q: %w (want HOST:PORT:TOHOST:TOPORT, any part empty)", r, err)
		}
		out = append(out, connectTo{Host: f[0], Port: f[1], ToHost: f[2], ToPort: f[3]})
	}
	return out, nil
}

// splitConnectTo splits a rule into its four fields, a bracketed host
// keeping its colons.
func splitConnectTo(r string) ([4]string, error) {
	var f [4]string
	for i := range f {
		if strings.HasPrefix(r, "[") {
			end := strings.Index(r, "]")
			if end < 0 {
				return f, fmt.Errorf("unclosed [")
			}
			f[i], r = r[1:end], r[end+1:]
		} else if j := strings.IndexByte(r, ':'); j >= 0 && i < 3 {
			f[i], r = r[:j], r[j:]
		} else {
			if strings.ContainsRune(r, ':') {
				return f, fmt.Errorf("more than 4 fields")
			}
			f[i], r = r, ""
		}
		if i < 3 {
			if !strings.HasPrefix(r, ":") {
				return f, fmt.Errorf("%d fields, want 4", i+1)
			}
			r = r[1:]
		}
	}
	if r != "" {
		return f, fmt.Errorf("more than 4 fields")
	}
	return f, nil
}

// connectTarget returns the address rules send addr to (addr when none matches).
func connectTarget(rules []connectTo, addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	for _, r := range rules {
		if (r.Host == "" || r.Host == host) && (r.Port == "" || r.Port == port) {
			h, p := host, port
			if r.ToHost != "" {
				h = r.ToHost
			}
			if r.ToPort != "" {
				p = r.ToPort
			}
			return net.JoinHostPort(h, p)
		}
	}
	return addr
}

// connectToDialer returns a Config.Dialer that dials each address where
// rules send it, through next (nil: net.Dialer).
func connectToDialer(rules []connectTo, next func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if next == nil {
		next = (&net.Dialer{}).DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, connectTarget(rules, addr))
	}
}
