package deploy_test

import (
	"context"
	"os/exec"
	"testing"
	"time"
)

// TestAlertRulesPromtool checks the alert rules as Prometheus would load
// them (promtool check rules: syntax, PromQL, templates) and runs their
// unit tests (prometheus/alerts_test.yaml: the quota, certificate and
// follower alerts fire, and stay quiet, as their series say). promtool
// comes with Debian's prometheus package (make prometheus-deps).
func TestAlertRulesPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed: `make prometheus-deps` installs it (Debian's prometheus package, as root with apt-get)")
	}
	for _, args := range [][]string{
		{"check", "rules", "alerts.yaml"},
		{"test", "rules", "alerts_test.yaml"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, promtool, args...)
		cmd.Dir = "prometheus"
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
