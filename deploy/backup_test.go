package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// backupArgs checks the arguments of a scheduled `lockcell backup`: a
// folder (--dir) and a retention (--keep N, N >= 1), and returns the
// folder.
func backupArgs(t *testing.T, where string, args []string) string {
	t.Helper()
	i := slices.Index(args, "backup")
	if i < 0 {
		t.Fatalf("%s: %v runs no `lockcell backup`", where, args)
	}
	dir, keep := "", 0
	for j := i + 1; j < len(args); j++ {
		a := args[j]
		switch {
		case strings.HasPrefix(a, "--dir="):
			dir = strings.TrimPrefix(a, "--dir=")
		case a == "--dir" && j+1 < len(args):
			dir = args[j+1]
		case strings.HasPrefix(a, "--keep="):
			keep, _ = strconv.Atoi(strings.TrimPrefix(a, "--keep="))
		case a == "--keep" && j+1 < len(args):
			keep, _ = strconv.Atoi(args[j+1])
		}
	}
	if dir == "" || keep < 1 {
		t.Errorf("%s: backup %v needs --dir and --keep N >= 1 (got dir %q, keep %d): scheduled backups are pruned", where, args[i:], dir, keep)
	}
	return dir
}

// TestSystemdBackupTimer checks the scheduled backup for systemd: the
// timer starts the service daily and catches up missed runs; the service
// runs `lockcell backup --dir D --keep N` into its own state folder with
// the admin's settings from an environment file whose keys the CLI reads;
// every flag exists (checked against the built CLI) and both units pass
// systemd-analyze verify.
func TestSystemdBackupTimer(t *testing.T) {
	svc, err := os.ReadFile("systemd/lockcell-backup.service")
	if err != nil {
		t.Fatal(err)
	}
	tmr, err := os.ReadFile("systemd/lockcell-backup.timer")
	if err != nil {
		t.Fatal(err)
	}
	s, tm := string(svc), string(tmr)
	for _, want := range []string{"Type=oneshot", "User=lockcell", "EnvironmentFile=/etc/lockcell/backup.env",
		"StateDirectory=lockcell-backups", "ProtectSystem=strict", "ReadWritePaths=/var/lib/lockcell-backups", "NoNewPrivileges=yes"} {
		if !strings.Contains(s, want) {
			t.Errorf("lockcell-backup.service lacks %q", want)
		}
	}
	for _, want := range []string{"OnCalendar=", "Persistent=true", "Unit=lockcell-backup.service", "WantedBy=timers.target"} {
		if !strings.Contains(tm, want) {
			t.Errorf("lockcell-backup.timer lacks %q", want)
		}
	}
	m := regexp.MustCompile(`(?m)^ExecStart=(\S+) (.*)$`).FindStringSubmatch(s)
	if m == nil || m[1] != "/usr/local/bin/lockcell" {
		t.Fatalf("lockcell-backup.service: ExecStart %v does not run /usr/local/bin/lockcell", m)
	}
	if dir := backupArgs(t, "lockcell-backup.service", shellWords(m[2])); dir != "/var/lib/lockcell-backups" {
		t.Errorf("lockcell-backup.service writes to %s, not its StateDirectory /var/lib/lockcell-backups", dir)
	}

	daemon, cli := binaries(t)
	lines := docCommandLines(t, "systemd/lockcell-backup.service")
	if len(lines) == 0 {
		t.Fatal("no lockcell command line found in lockcell-backup.service")
	}
	for _, p := range checkCommandLines(t, daemon, cli, lines) {
		t.Error(p)
	}
	// The environment file sets only variables the CLI reads.
	help, _ := exec.Command(cli, "--help").CombinedOutput()
	env, err := os.ReadFile("systemd/lockcell-backup.env")
	if err != nil {
		t.Fatal(err)
	}
	set := 0
	for _, l := range strings.Split(string(env), "\n") {
		k, _, ok := strings.Cut(l, "=")
		if l == "" || strings.HasPrefix(l, "#") || !ok {
			continue
		}
		set++
		if !strings.Contains(string(help), "$"+k) {
			t.Errorf("lockcell-backup.env sets %s, which lockcell does not read", k)
		}
	}
	if set < 5 {
		t.Errorf("lockcell-backup.env sets %d variables: want the cell, the replicas and the admin's cert, key and CA", set)
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed: the units are not verified")
	}
	dir := t.TempDir()
	for name, text := range map[string]string{"lockcell-backup.service": strings.ReplaceAll(s, "/usr/local/bin/lockcell", cli),
		"lockcell-backup.timer": tm} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(analyze, "verify", filepath.Join(dir, "lockcell-backup.service"), filepath.Join(dir, "lockcell-backup.timer")).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestKubernetesBackupCronJob checks deploy/kubernetes/backup: only API
// fields; one run at a time; `lockcell backup --dir D --keep N` into the
// mounted claim the folder defines, through the client Service, with the
// admin certificate from the mounted Secret, in a pod the NetworkPolicy
// admits to the client port; flags that exist; and a kustomization that
// lists both files (and builds, where kubectl is installed).
func TestKubernetesBackupCronJob(t *testing.T) {
	files, _ := filepath.Glob("kubernetes/backup/*.yaml")
	objs := map[string]map[string]any{}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range checkManifest(f, src) {
			t.Error(p)
		}
		for _, d := range docs(t, f) {
			objs[str(d, "kind")+"/"+str(d, "metadata", "name")] = d
		}
	}
	cj, pvc := objs["CronJob/lockcell-backup"], objs["PersistentVolumeClaim/lockcell-backups"]
	if cj == nil || pvc == nil {
		t.Fatalf("kubernetes/backup lacks the CronJob lockcell-backup or the claim lockcell-backups: %v", objs)
	}
	for k, o := range objs {
		if str(o, "metadata", "namespace") != "lockcell" {
			t.Errorf("%s is not in namespace lockcell", k)
		}
	}
	if str(cj, "apiVersion") != "batch/v1" || str(cj, "spec", "concurrencyPolicy") != "Forbid" || str(cj, "spec", "schedule") == "" {
		t.Errorf("CronJob: apiVersion %s, schedule %q, concurrencyPolicy %q: want batch/v1, a schedule, Forbid",
			str(cj, "apiVersion"), str(cj, "spec", "schedule"), str(cj, "spec", "concurrencyPolicy"))
	}
	pod := get(cj, "spec", "jobTemplate", "spec", "template")
	if str(pod, "metadata", "labels", "lockcell.io/client") != "true" {
		t.Error("the backup pod lacks the label lockcell.io/client: \"true\": the NetworkPolicy would drop its calls")
	}
	if str(pod, "metadata", "labels", "app.kubernetes.io/component") == "replica" {
		t.Error("the backup pod is labelled a replica: the Services and the budget would count it")
	}
	ctr := get(pod, "spec", "containers", 0)
	cmd := strs(ctr, "command")
	if len(cmd) != 1 || filepath.Base(cmd[0]) != "lockcell" {
		t.Fatalf("the backup container runs %v, not lockcell", cmd)
	}
	args := strs(ctr, "args")
	dir := backupArgs(t, "kubernetes/backup/cronjob.yaml", args)
	mounts := map[string]string{}
	for i := range len(strs(ctr, "volumeMounts")) {
		mounts[str(ctr, "volumeMounts", i, "mountPath")] = str(ctr, "volumeMounts", i, "name")
	}
	vols := map[string]any{}
	for i := range len(strs(pod, "spec", "volumes")) {
		vols[str(pod, "spec", "volumes", i, "name")] = get(pod, "spec", "volumes", i)
	}
	if str(vols[mounts[dir]], "persistentVolumeClaim", "claimName") != "lockcell-backups" {
		t.Errorf("--dir=%s is not the mounted claim lockcell-backups (mounts %v)", dir, mounts)
	}
	flag := func(name string) string {
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
				return v
			}
		}
		return ""
	}
	for _, f := range []string{"cert", "key", "ca"} {
		if str(vols[mounts[filepath.Dir(flag(f))]], "secret", "secretName") == "" {
			t.Errorf("--%s=%s is not in a mounted Secret", f, flag(f))
		}
	}
	if flag("replicas") != "lockcell.lockcell.svc.cluster.local:7001" {
		t.Errorf("--replicas=%s is not the client Service", flag("replicas"))
	}
	daemon, cli := binaries(t)
	for _, p := range checkCommandLines(t, daemon, cli, []commandLine{{where: "kubernetes/backup/cronjob.yaml", bin: "lockcell", args: args}}) {
		t.Error(p)
	}
	kust := docs(t, "kubernetes/backup/kustomization.yaml")[0]
	for _, f := range []string{"cronjob.yaml", "pvc.yaml"} {
		if !slices.Contains(strs(kust, "resources"), f) {
			t.Errorf("kubernetes/backup/kustomization.yaml does not list %s", f)
		}
	}
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		if out, err := exec.Command(kubectl, "kustomize", "kubernetes/backup").CombinedOutput(); err != nil {
			t.Errorf("kubectl kustomize kubernetes/backup: %v\n%s", err, out)
		}
	}
}
