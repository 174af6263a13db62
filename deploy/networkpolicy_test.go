package deploy_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// networkPolicyProblems checks who the Kubernetes manifests let reach the
// replicas: a NetworkPolicy selects the replica pods for ingress; the Raft
// port admits the cell's own pods only; the HTTP port admits only peers a
// selector names, never every pod or address; clients can reach the client
// port. And as the cell runs with TLS, so does its HTTP port: the probes
// and the Prometheus annotation say https.
func networkPolicyProblems(objs map[string]map[string]any) []string {
	var out []string
	sts := objs["StatefulSet/lockcell"]
	labels := get(sts, "spec", "template", "metadata", "labels")
	ctr := get(sts, "spec", "template", "spec", "containers", 0)
	ports := map[string]string{} // name and number of each container port -> its name
	for i := range len(strs(ctr, "ports")) {
		name := str(ctr, "ports", i, "name")
		ports[name], ports[str(ctr, "ports", i, "containerPort")] = name, name
	}
	own := func(peer any) bool {
		return get(peer, "namespaceSelector") == nil && get(peer, "ipBlock") == nil &&
			subset(get(peer, "podSelector", "matchLabels"), labels)
	}
	wide := func(peer any) bool {
		ns, pod := get(peer, "namespaceSelector"), get(peer, "podSelector")
		nsAll := ns != nil && len(asMap(get(ns, "matchLabels"))) == 0 && get(ns, "matchExpressions") == nil
		podAll := pod == nil || len(asMap(get(pod, "matchLabels"))) == 0 && get(pod, "matchExpressions") == nil
		cidr := str(peer, "ipBlock", "cidr")
		return nsAll && podAll || cidr == "0.0.0.0/0" || cidr == "::/0" || ns == nil && pod == nil && cidr == ""
	}
	allowed := map[string][]any{} // container port name -> peers admitted ("*": from anywhere)
	policies := 0
	for key, o := range objs {
		if str(o, "kind") != "NetworkPolicy" || !subset(get(o, "spec", "podSelector", "matchLabels"), labels) {
			continue
		}
		policies++
		if str(o, "metadata", "namespace") != "lockcell" {
			out = append(out, key+": not in the replicas' namespace")
		}
		if !slices.Contains(strs(o, "spec", "policyTypes"), "Ingress") {
			out = append(out, key+": policyTypes lacks Ingress: it restricts no incoming connection")
		}
		for i := range len(strs(o, "spec", "ingress")) {
			rule := get(o, "spec", "ingress", i)
			from, _ := get(rule, "from").([]any)
			if len(from) == 0 {
				from = []any{"*"}
			}
			rulePorts := strs(rule, "ports")
			var names []string
			for j := range len(rulePorts) {
				p := str(rule, "ports", j, "port")
				name, ok := ports[p]
				if !ok {
					out = append(out, fmt.Sprintf("%s: ingress rule %d names port %q, which the replicas do not have", key, i, p))
				}
				names = append(names, name)
			}
			if len(rulePorts) == 0 {
				names = []string{"client", "raft", "http"}
			}
			for _, n := range names {
				allowed[n] = append(allowed[n], from...)
			}
		}
	}
	if policies == 0 {
		return append(out, "no NetworkPolicy selects the replica pods: every pod in the cluster reaches their Raft and HTTP ports")
	}
	for _, peer := range allowed["raft"] {
		if peer == "*" || !own(peer) {
			out = append(out, fmt.Sprintf("the Raft port admits %v, not only the cell's own pods", peer))
		}
	}
	if len(allowed["raft"]) == 0 {
		out = append(out, "the Raft port admits nobody: the replicas cannot elect a master")
	}
	for _, peer := range allowed["http"] {
		if peer == "*" || wide(peer) {
			out = append(out, fmt.Sprintf("the HTTP port admits %v: every pod or address", peer))
		}
	}
	if len(allowed["http"]) == 0 {
		out = append(out, "the HTTP port admits nobody: Prometheus cannot scrape it")
	}
	if !slices.ContainsFunc(allowed["client"], func(p any) bool { return p == "*" || !own(p) }) {
		out = append(out, "the client port admits only the replicas: no client can reach the cell")
	}
	if slices.ContainsFunc(strs(ctr, "args"), func(a string) bool { return strings.HasPrefix(a, "--cert=") }) {
		for _, probe := range []string{"startupProbe", "livenessProbe", "readinessProbe"} {
			if get(ctr, probe) != nil && str(ctr, probe, "httpGet", "scheme") != "HTTPS" {
				out = append(out, probe+": the cell runs with TLS, so its HTTP port speaks TLS: the probe needs scheme HTTPS")
			}
		}
		if s := str(sts, "spec", "template", "metadata", "annotations", "prometheus.io/scheme"); s != "https" {
			out = append(out, fmt.Sprintf("annotation prometheus.io/scheme is %q: the HTTP port of a TLS cell speaks https", s))
		}
	}
	return out
}

func asMap(v any) map[string]any { m, _ := v.(map[string]any); return m }

// The manifests ship a NetworkPolicy that keeps the Raft port to the cell
// and the HTTP port to monitoring, with TLS probes; and the check catches
// a missing policy, a wide-open rule and a plain-HTTP probe.
func TestKubernetesNetworkPolicy(t *testing.T) {
	for _, p := range networkPolicyProblems(k8sObjects(t)) {
		t.Error(p)
	}
	if t.Failed() {
		return // the cases below break sound manifests
	}
	for _, c := range []struct {
		name    string
		breakIt func(map[string]map[string]any)
	}{
		{"no NetworkPolicy", func(o map[string]map[string]any) { delete(o, "NetworkPolicy/lockcell") }},
		{"Raft port from everywhere", func(o map[string]map[string]any) {
			rules := get(o["NetworkPolicy/lockcell"], "spec", "ingress").([]any)
			asMap(get(o["NetworkPolicy/lockcell"], "spec"))["ingress"] = append(rules,
				map[string]any{"ports": []any{map[string]any{"port": "raft"}}})
		}},
		{"HTTP port from every namespace", func(o map[string]map[string]any) {
			for _, r := range get(o["NetworkPolicy/lockcell"], "spec", "ingress").([]any) {
				if str(r, "ports", 0, "port") == "http" {
					asMap(r)["from"] = []any{map[string]any{"namespaceSelector": map[string]any{}}}
				}
			}
		}},
		{"a plain-HTTP probe", func(o map[string]map[string]any) {
			delete(asMap(get(o["StatefulSet/lockcell"], "spec", "template", "spec", "containers", 0, "readinessProbe", "httpGet")), "scheme")
		}},
	} {
		objs := k8sObjects(t)
		c.breakIt(objs)
		if p := networkPolicyProblems(objs); len(p) == 0 {
			t.Errorf("%s went unnoticed", c.name)
		} else {
			t.Logf("%s: %s", c.name, p[0])
		}
	}
	// The schema check knows the NetworkPolicy's fields.
	src, err := os.ReadFile("kubernetes/networkpolicy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, typo := range [][2]string{{"policyTypes:", "policyType:"}, {"namespaceSelector:", "namespaceSelecter:"}} {
		bad := strings.Replace(string(src), typo[0], typo[1], 1)
		if bad == string(src) {
			t.Fatalf("%q not in networkpolicy.yaml", typo[0])
		}
		if p := checkManifest("networkpolicy.yaml", []byte(bad)); len(p) == 0 {
			t.Errorf("the typo %s -> %s went unnoticed", typo[0], typo[1])
		}
	}
}
