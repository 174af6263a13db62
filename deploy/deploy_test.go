package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"lockcell/cell"
	"lockcell/fixtures"
)

// TestMain removes the binaries the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	fixtures.RemoveBuilds()
	os.Exit(code)
}

// binaries returns the binaries the deploy files run, cmd/lockcelld and
// cmd/lockcell, built as the Dockerfile builds them (CGO_ENABLED=0,
// -trimpath, none of the test binary's build tags), once for the package.
func binaries(t *testing.T) (daemon, cli string) {
	t.Helper()
	build := func(pkg string) string {
		return fixtures.Binary{Pkg: pkg, Flags: []string{"-trimpath"}, Env: []string{"CGO_ENABLED=0"}, Release: true}.Build(t)
	}
	return build("./cmd/lockcelld"), build("./cmd/lockcell")
}

// yamlFiles returns every YAML file under deploy/.
func yamlFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("no YAML files under deploy/")
	}
	return out
}

// docs decodes every YAML document of a file.
func docs(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var out []map[string]any
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", path, len(out)+1, err)
		}
		if m != nil {
			out = append(out, m)
		}
	}
}

// get walks a decoded YAML tree by keys (strings) and indexes (ints).
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any, path ...any) string {
	switch x := get(v, path...).(type) {
	case string:
		return x
	case int:
		return strconv.Itoa(x)
	case nil:
		return ""
	default:
		return fmt.Sprint(x)
	}
}

func strs(v any, path ...any) []string {
	l, _ := get(v, path...).([]any)
	out := make([]string, 0, len(l))
	for _, x := range l {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

// settings reads a lockcelld --config file as lockcelld does.
func settings(t *testing.T, path string) map[string]string {
	t.Helper()
	ss, err := cell.ReadSettings(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range ss {
		out[s.Key] = s.Value
	}
	return out
}

func TestEveryYAMLFileParses(t *testing.T) {
	for _, p := range yamlFiles(t) {
		if n := len(docs(t, p)); n == 0 {
			t.Errorf("%s: no YAML document", p)
		}
	}
}

// composeReplica is one replica service of deploy/compose.yaml with the
// configuration file it mounts.
type composeReplica struct {
	service    string
	svc        map[string]any
	configPath string // inside the container
	hostConfig string // the file in this repository
	settings   map[string]string
}

func composeReplicas(t *testing.T) (map[string]any, []composeReplica) {
	t.Helper()
	ds := docs(t, "compose.yaml")
	if len(ds) != 1 {
		t.Fatalf("compose.yaml: %d documents, want 1", len(ds))
	}
	services, _ := ds[0]["services"].(map[string]any)
	var out []composeReplica
	for name, v := range services {
		svc := v.(map[string]any)
		cmd := strs(svc, "command")
		if len(cmd) == 0 || cmd[0] != "serve" {
			continue
		}
		r := composeReplica{service: name, svc: svc}
		for i, a := range cmd {
			if a == "--config" && i+1 < len(cmd) {
				r.configPath = cmd[i+1]
			} else if v, ok := strings.CutPrefix(a, "--config="); ok {
				r.configPath = v
			}
		}
		if r.configPath == "" {
			t.Fatalf("compose service %s: serve without --config", name)
		}
		for _, m := range strs(svc, "volumes") {
			parts := strings.Split(m, ":")
			if len(parts) >= 2 && parts[1] == r.configPath {
				r.hostConfig = parts[0]
			}
		}
		if r.hostConfig == "" {
			t.Fatalf("compose service %s: no volume mounts its --config %s", name, r.configPath)
		}
		r.settings = settings(t, r.hostConfig)
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b composeReplica) int { return strings.Compare(a.service, b.service) })
	return ds[0], out
}

func TestComposeHasFiveDistinctReplicasWithTLS(t *testing.T) {
	top, reps := composeReplicas(t)
	if len(reps) != 5 {
		t.Fatalf("compose.yaml: %d replica services, want 5", len(reps))
	}
	declared, _ := top["volumes"].(map[string]any)
	seen := map[string]map[string]string{"id": {}, "listen": {}, "raft": {}, "metrics": {}, "data volume": {}, "host port": {}}
	distinct := func(kind, v, who string) {
		if v == "" {
			t.Errorf("%s: no %s", who, kind)
			return
		}
		if prev, dup := seen[kind][v]; dup {
			t.Errorf("%s and %s share %s %s", prev, who, kind, v)
		}
		seen[kind][v] = who
	}
	var peers0 string
	for _, r := range reps {
		s := r.settings
		distinct("id", s["id"], r.service)
		distinct("listen", s["listen"], r.service)
		distinct("raft", s["raft"], r.service)
		distinct("metrics", s["metrics"], r.service)
		if peers0 == "" {
			peers0 = s["peers"]
		} else if s["peers"] != peers0 {
			t.Errorf("%s: peers differ from the other replicas'", r.service)
		}
		peers, err := cell.ParsePeers(s["peers"])
		if err != nil {
			t.Fatalf("%s: %v", r.service, err)
		}
		if len(peers) != 5 {
			t.Errorf("%s: %d peers, want 5", r.service, len(peers))
		}
		i := slices.IndexFunc(peers, func(p cell.Peer) bool { return p.ID == s["id"] })
		if i < 0 {
			t.Fatalf("%s: id %s is not in peers", r.service, s["id"])
		}
		if peers[i].ClientAddr != s["listen"] || peers[i].RaftAddr != s["raft"] {
			t.Errorf("%s: listen/raft %s/%s differ from its peers entry %s/%s", r.service, s["listen"], s["raft"], peers[i].ClientAddr, peers[i].RaftAddr)
		}
		// The service is reachable under the host name its peers entry uses.
		host := strings.Split(s["listen"], ":")[0]
		if str(r.svc, "hostname") != host && r.service != host {
			t.Errorf("%s: listens as %s, which is neither its service name nor its hostname", r.service, host)
		}
		// Mutual TLS with its own certificate.
		for _, k := range []string{"cert", "key", "ca"} {
			if s[k] == "" {
				t.Errorf("%s: no %s: the compose cell must run with mutual TLS", r.service, k)
			}
		}
		if !strings.HasSuffix(s["cert"], "/replica-"+s["id"]+".crt") || !strings.HasSuffix(s["key"], "/replica-"+s["id"]+".key") {
			t.Errorf("%s: cert/key %s, %s are not replica %s's", r.service, s["cert"], s["key"], s["id"])
		}
		// Its own data volume, mounted where the config keeps data.
		dataVol := ""
		for _, m := range strs(r.svc, "volumes") {
			parts := strings.Split(m, ":")
			if len(parts) >= 2 && parts[1] == s["data"] {
				dataVol = parts[0]
			}
		}
		if _, ok := declared[dataVol]; !ok {
			t.Errorf("%s: data %s is not on a declared named volume (mount source %q)", r.service, s["data"], dataVol)
		}
		distinct("data volume", dataVol, r.service)
		// Published ports: the client port and the HTTP port, distinct.
		_, clientPort, _ := strings.Cut(s["listen"], ":")
		_, httpPort, _ := strings.Cut(s["metrics"], ":")
		ports := strs(r.svc, "ports")
		for _, want := range []string{clientPort, httpPort} {
			if !slices.ContainsFunc(ports, func(p string) bool { return strings.HasSuffix(p, ":"+want+":"+want) }) {
				t.Errorf("%s: port %s is not published as itself (ports %v)", r.service, want, ports)
			}
		}
		for _, p := range ports {
			distinct("host port", strings.Join(strings.Split(p, ":")[:len(strings.Split(p, ":"))-1], ":"), r.service)
		}
		// The health check asks this replica, with the probe certificate.
		hc := strs(r.svc, "healthcheck", "test")
		if len(hc) < 3 || hc[0] != "CMD" || !strings.HasSuffix(hc[1], "/lockcell") || hc[2] != "status" {
			t.Errorf("%s: health check %v is not `lockcell status`", r.service, hc)
		} else if j := slices.Index(hc, "--replicas"); j < 0 || j+1 >= len(hc) || hc[j+1] != s["listen"] {
			t.Errorf("%s: health check %v does not ask this replica (%s)", r.service, hc, s["listen"])
		} else if j := slices.Index(hc, "--cell"); j < 0 || hc[j+1] != s["cell"] {
			t.Errorf("%s: health check %v names another cell than %q", r.service, hc, s["cell"])
		}
		if str(r.svc, "depends_on", "certs", "condition") != "service_completed_successfully" {
			t.Errorf("%s: does not wait for the certs service to succeed", r.service)
		}
	}
	// The certs service issues certificates for every replica host.
	certsCmd := strs(top, "services", "certs", "command")
	if len(certsCmd) == 0 || certsCmd[0] != "certs" {
		t.Fatalf("no certs service running `lockcelld certs`: %v", certsCmd)
	}
	hosts := ""
	if j := slices.Index(certsCmd, "--hosts"); j >= 0 && j+1 < len(certsCmd) {
		hosts = "," + certsCmd[j+1] + ","
	}
	peers, _ := cell.ParsePeers(peers0)
	for _, p := range peers {
		h := strings.Split(p.ClientAddr, ":")[0]
		if !strings.Contains(hosts, ","+h+",") {
			t.Errorf("the certs service's --hosts %q lacks replica host %s: clients dialling it would refuse its certificate", hosts, h)
		}
	}
}

// k8sObjects returns every object of deploy/kubernetes by kind and name.
func k8sObjects(t *testing.T) map[string]map[string]any {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in kubernetes/: %v", err)
	}
	out := map[string]map[string]any{}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		for _, d := range docs(t, f) {
			key := str(d, "kind") + "/" + str(d, "metadata", "name")
			if str(d, "apiVersion") == "" || str(d, "kind") == "" || str(d, "metadata", "name") == "" {
				t.Errorf("%s: an object without apiVersion, kind or name: %v", f, d)
			}
			if _, dup := out[key]; dup {
				t.Errorf("%s: %s defined twice", f, key)
			}
			out[key] = d
		}
	}
	return out
}

// subset reports whether every label of sel is in labels.
func subset(sel, labels any) bool {
	s, _ := sel.(map[string]any)
	l, _ := labels.(map[string]any)
	if len(s) == 0 {
		return false
	}
	for k, v := range s {
		if l[k] != v {
			return false
		}
	}
	return true
}

func TestKubernetesManifests(t *testing.T) {
	objs := k8sObjects(t)
	sts := objs["StatefulSet/lockcell"]
	headless := objs["Service/lockcell-peers"]
	clientSvc := objs["Service/lockcell"]
	pdb := objs["PodDisruptionBudget/lockcell"]
	cm := objs["ConfigMap/lockcell-config"]
	for name, o := range map[string]map[string]any{"StatefulSet/lockcell": sts, "Service/lockcell-peers": headless,
		"Service/lockcell": clientSvc, "PodDisruptionBudget/lockcell": pdb, "ConfigMap/lockcell-config": cm, "Namespace/lockcell": objs["Namespace/lockcell"]} {
		if o == nil {
			t.Fatalf("deploy/kubernetes has no %s", name)
		}
	}
	ns := "lockcell"
	for key, o := range objs {
		if got := str(o, "metadata", "namespace"); o["kind"] != "Namespace" && got != ns {
			t.Errorf("%s: namespace %q, want %q", key, got, ns)
		}
	}
	if str(sts, "apiVersion") != "apps/v1" || str(pdb, "apiVersion") != "policy/v1" {
		t.Errorf("apiVersions: StatefulSet %s, PodDisruptionBudget %s", str(sts, "apiVersion"), str(pdb, "apiVersion"))
	}
	if n, _ := get(sts, "spec", "replicas").(int); n != 5 {
		t.Errorf("StatefulSet replicas %v, want 5", get(sts, "spec", "replicas"))
	}
	// Replicas must all start: readiness needs a quorum.
	if p := str(sts, "spec", "podManagementPolicy"); p != "Parallel" {
		t.Errorf("podManagementPolicy %q: OrderedReady would wait for lockcell-0 to be ready, which needs a quorum", p)
	}
	tmplLabels := get(sts, "spec", "template", "metadata", "labels")
	if !subset(get(sts, "spec", "selector", "matchLabels"), tmplLabels) {
		t.Error("the StatefulSet's selector does not match its pod labels")
	}
	for key, o := range map[string]map[string]any{"Service/lockcell-peers": headless, "Service/lockcell": clientSvc} {
		if !subset(get(o, "spec", "selector"), tmplLabels) {
			t.Errorf("%s: selector does not match the replicas' labels", key)
		}
	}
	if !subset(get(pdb, "spec", "selector", "matchLabels"), tmplLabels) {
		t.Error("the PodDisruptionBudget's selector does not match the replicas' labels")
	}
	if n, _ := get(pdb, "spec", "maxUnavailable").(int); n != 1 {
		t.Errorf("PodDisruptionBudget maxUnavailable %v, want 1", get(pdb, "spec", "maxUnavailable"))
	}
	if str(sts, "spec", "serviceName") != "lockcell-peers" || str(headless, "spec", "clusterIP") != "None" {
		t.Error("the StatefulSet's serviceName must be the headless Service lockcell-peers (clusterIP: None)")
	}
	if b, _ := get(headless, "spec", "publishNotReadyAddresses").(bool); !b {
		t.Error("the headless Service must publish not-ready pods: replicas find each other before any is ready")
	}
	if str(sts, "spec", "template", "spec", "affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution", 0, "topologyKey") != "kubernetes.io/hostname" {
		t.Error("no required anti-affinity across nodes")
	}
	if str(sts, "spec", "volumeClaimTemplates", 0, "metadata", "name") == "" {
		t.Error("no volumeClaimTemplates: each replica needs its own persistent volume")
	}

	ctr := get(sts, "spec", "template", "spec", "containers", 0)
	args := strs(ctr, "args")
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("container args %v do not run `lockcelld serve`", args)
	}
	flag := func(name string) string {
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
				return v
			}
		}
		return ""
	}
	// The pod's id is its ordinal.
	if flag("id") != "$(POD_INDEX)" || str(ctr, "env", 0, "name") != "POD_INDEX" ||
		str(ctr, "env", 0, "valueFrom", "fieldRef", "fieldPath") != "metadata.labels['apps.kubernetes.io/pod-index']" {
		t.Errorf("the replica id is not the pod's ordinal: --id=%q, env %v", flag("id"), get(ctr, "env"))
	}
	// The --config file is the ConfigMap's, mounted.
	mounts := map[string]string{}
	for i := range len(strs(ctr, "volumeMounts")) {
		mounts[str(ctr, "volumeMounts", i, "name")] = str(ctr, "volumeMounts", i, "mountPath")
	}
	vols := map[string]any{}
	for i := range len(strs(sts, "spec", "template", "spec", "volumes")) {
		vols[str(sts, "spec", "template", "spec", "volumes", i, "name")] = get(sts, "spec", "template", "spec", "volumes", i)
	}
	cfgPath := flag("config")
	cfgVol := ""
	for name, mp := range mounts {
		if filepath.Dir(cfgPath) == mp {
			cfgVol = name
		}
	}
	if str(vols[cfgVol], "configMap", "name") != "lockcell-config" {
		t.Fatalf("--config=%s is not in the mounted ConfigMap lockcell-config (mounts %v)", cfgPath, mounts)
	}
	conf, ok := get(cm, "data", filepath.Base(cfgPath)).(string)
	if !ok {
		t.Fatalf("ConfigMap lockcell-config has no %s", filepath.Base(cfgPath))
	}
	f := filepath.Join(t.TempDir(), "lockcelld.yaml")
	if err := os.WriteFile(f, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	s := settings(t, f)
	if mounts["data"] != s["data"] || str(sts, "spec", "volumeClaimTemplates", 0, "metadata", "name") != "data" {
		t.Errorf("data %s is not the persistent volume's mount (%s)", s["data"], mounts["data"])
	}
	if str(vols["tls"], "secret", "secretName") == "" || !strings.HasPrefix(flag("cert"), mounts["tls"]+"/") ||
		!strings.HasPrefix(s["ca"], mounts["tls"]+"/") {
		t.Errorf("certificates (--cert=%s, ca %s) are not in the mounted Secret (%s)", flag("cert"), s["ca"], mounts["tls"])
	}
	// Every peer is pod lockcell-<id> under the headless Service.
	peers, err := cell.ParsePeers(s["peers"])
	if err != nil {
		t.Fatal(err)
	}
	if len(peers) != 5 {
		t.Errorf("%d peers, want 5", len(peers))
	}
	ports := map[string]int{}
	for i := range len(strs(ctr, "ports")) {
		n, _ := get(ctr, "ports", i, "containerPort").(int)
		ports[str(ctr, "ports", i, "name")] = n
	}
	for i, p := range peers {
		host := fmt.Sprintf("lockcell-%d.lockcell-peers.%s.svc.cluster.local", i, ns)
		if p.ID != strconv.Itoa(i) || p.ClientAddr != fmt.Sprintf("%s:%d", host, ports["client"]) || p.RaftAddr != fmt.Sprintf("%s:%d", host, ports["raft"]) {
			t.Errorf("peer %d is %s=%s/%s, want %d=%s:%d/%s:%d", i, p.ID, p.ClientAddr, p.RaftAddr, i, host, ports["client"], host, ports["raft"])
		}
	}
	if !strings.HasSuffix(s["metrics"], fmt.Sprintf(":%d", ports["http"])) {
		t.Errorf("metrics %s is not the container's http port %d", s["metrics"], ports["http"])
	}
	// Probes: readiness on /readyz, liveness on /healthz, on the HTTP port.
	for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
		if str(ctr, probe, "httpGet", "path") != path || str(ctr, probe, "httpGet", "port") != "http" {
			t.Errorf("%s: %v, want GET %s on port http", probe, get(ctr, probe), path)
		}
	}
	// Services route the ports by name to the container's.
	for key, o := range map[string]map[string]any{"Service/lockcell-peers": headless, "Service/lockcell": clientSvc} {
		for i := range len(strs(o, "spec", "ports")) {
			if tp := str(o, "spec", "ports", i, "targetPort"); ports[tp] == 0 {
				t.Errorf("%s: targetPort %q is no container port", key, tp)
			}
		}
	}
	// The kustomization lists every manifest.
	kust := docs(t, "kubernetes/kustomization.yaml")[0]
	files, _ := filepath.Glob("kubernetes/*.yaml")
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" && !slices.Contains(strs(kust, "resources"), b) {
			t.Errorf("kustomization.yaml does not list %s", b)
		}
	}
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		out, err := exec.Command(kubectl, "kustomize", "kubernetes").CombinedOutput()
		if err != nil {
			t.Errorf("kubectl kustomize: %v\n%s", err, out)
		}
	} else {
		t.Log("kubectl not installed: kustomize build not run")
	}
}
