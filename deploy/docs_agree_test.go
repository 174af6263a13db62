package deploy_test

import (
	"os"
	"strings"
	"testing"
)

// TestKubernetesReadmeAgreesWithOperationsGuide keeps the Kubernetes
// README's word on membership the operations guide's: membership changes
// exist (the README once said they did not), the lost-volume shortcut
// carries the guide's precondition, and the sections it points to exist.
func TestKubernetesReadmeAgreesWithOperationsGuide(t *testing.T) {
	k8s, err := os.ReadFile("kubernetes/README.md")
	if err != nil {
		t.Fatal(err)
	}
	ops, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	readme, guide := string(k8s), string(ops)
	for _, no := range []string{"not yet available", "Membership changes are not"} {
		if strings.Contains(readme, no) {
			t.Errorf("kubernetes/README.md says %q, but docs/operations.md documents membership changes", no)
		}
	}
	for _, want := range []string{"lockcell replica list|add|remove|transfer-leadership", "--join",
		"still the five pods", `"Replacing a replica"`, `"A lost disk at the same address"`} {
		if !strings.Contains(readme, want) {
			t.Errorf("kubernetes/README.md lacks %q", want)
		}
	}
	for _, section := range []string{"## Replacing a replica", "### A lost disk at the same address", "### Moving the master",
		"lockcell replica add", "lockcell replica remove", "lockcell replica transfer-leadership"} {
		if !strings.Contains(guide, section) {
			t.Errorf("docs/operations.md lacks %q, which kubernetes/README.md relies on", section)
		}
	}
	// The guide's precondition for the shortcut is the README's.
	if !strings.Contains(strings.Join(strings.Fields(guide), " "), "cell whose members are still the ones it was bootstrapped with") {
		t.Error("docs/operations.md no longer states the lost-disk shortcut's precondition")
	}
}
