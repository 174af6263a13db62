package master

import (
	"errors"
	"testing"
	"time"

	"lockcell/wire"
)

// The master refuses a TTL or container Open the state machine would
// refuse, with CodeBadRequest, before anything is proposed, and passes
// the TTL on in the state machine's unit.
func TestCheckLifetime(t *testing.T) {
	const rwc = wire.OpenRead | wire.OpenWrite | wire.OpenCreate
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	for _, c := range []struct {
		what  string
		flags uint32
		ttl   int64
		want  time.Duration // -1: refused
	}{
		{"plain", rwc, 0, 0},
		{"TTL file", rwc | wire.OpenTTL, 30_000, 30 * time.Second},
		{"TTL at the minimum", rwc | wire.OpenTTL, ms(wire.MinTTL), wire.MinTTL},
		{"TTL at the maximum", rwc | wire.OpenTTL, ms(wire.MaxTTL), wire.MaxTTL},
		{"container", rwc | wire.OpenDirectory | wire.OpenContainer, 0, 0},
		{"TTL without its flag", rwc, 30_000, -1},
		{"TTL flag without a TTL", rwc | wire.OpenTTL, 0, -1},
		{"TTL below the minimum", rwc | wire.OpenTTL, ms(wire.MinTTL) - 1, -1},
		{"TTL above the maximum", rwc | wire.OpenTTL, ms(wire.MaxTTL) + 1, -1},
		{"negative TTL", rwc | wire.OpenTTL, -1000, -1},
		{"TTL without create", wire.OpenRead | wire.OpenTTL, 30_000, -1},
		{"TTL directory", rwc | wire.OpenDirectory | wire.OpenTTL, 30_000, -1},
		{"ephemeral TTL", rwc | wire.OpenEphemeral | wire.OpenTTL, 30_000, -1},
		{"container file", rwc | wire.OpenContainer, 0, -1},
		{"ephemeral container", rwc | wire.OpenDirectory | wire.OpenEphemeral | wire.OpenContainer, 0, -1},
		{"container without create", wire.OpenRead | wire.OpenDirectory | wire.OpenContainer, 0, -1},
	} {
		got, err := checkLifetime(&wire.OpenRequest{Path: "/ls/c/x", Flags: c.flags, TTLMillis: c.ttl})
		var we *wire.Error
		switch {
		case c.want < 0 && (!errors.As(err, &we) || we.Code != wire.CodeBadRequest):
			t.Errorf("%s: %v, want CodeBadRequest", c.what, err)
		case c.want >= 0 && (err != nil || got != c.want):
			t.Errorf("%s: %v %v, want %v", c.what, got, err, c.want)
		}
	}
}
