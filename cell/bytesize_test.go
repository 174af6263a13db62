package cell

import "testing"

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"16MiB": 16 << 20, "64 MiB": 64 << 20, "1GiB": 1 << 30, "512KiB": 512 << 10, "1000": 1000, "7B": 7} {
		got, err := ParseBytes(in)
		if err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
		if back, err := ParseBytes(FormatBytes(want)); err != nil || back != want {
			t.Errorf("FormatBytes(%d) = %q does not parse back", want, FormatBytes(want))
		}
	}
	for _, bad := range []string{"", "MiB", "-1MiB", "1.5MiB", "16MB", "99999999999GiB"} {
		if _, err := ParseBytes(bad); err == nil {
			t.Errorf("ParseBytes(%q) accepted", bad)
		}
	}
}
