package fleet

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	appsv1 "k8s.io/api/apps/v1"
)

// The fleet on this machine: the image built from contrib/container, three
// pods played by podman from contrib/kubernetes/shared-pool.yaml (rendered:
// podman plays Pods, not StatefulSets), HAProxy with
// contrib/haproxy/haproxy.cfg in front, the Python client through it over
// TLS with a token. Everything listens on 127.0.0.1.
//
// go test -short runs affinity and metrics (make test, when podman is
// here); the full run (make test-fleet) adds drain, a killed pod and the
// throughput figures with 1, 2 and 3 pods.

const image = "localhost/aleph-sandbox:fleet"

type pod struct {
	name          string
	container     string // the serve container's name in podman
	port, metrics int
}

type fleet struct {
	t       *testing.T
	root    string // the checkout
	state   string // private podman state, certificates, configs
	pods    []pod
	router  int
	token   string
	haproxy *exec.Cmd
}

// testContext ends a minute before go test's -timeout would: a test that
// hangs then fails with its cleanup run (pods, HAProxy, podman's state, the
// pods' cgroups), where the timeout's panic would skip every t.Cleanup.
func testContext(t *testing.T, max time.Duration) (context.Context, context.CancelFunc) {
	d := time.Now().Add(max)
	if td, ok := t.Deadline(); ok && td.Add(-time.Minute).Before(d) {
		d = td.Add(-time.Minute)
	}
	return context.WithDeadline(context.Background(), d)
}

// skipUnlessFleet skips, naming what is missing, when this machine cannot
// run the fleet: podman, runc, haproxy, openssl, python3, busybox, bwrap
// and the built binaries are needed, and podman must start a container
// here (the control: a container that prints a word).
func skipUnlessFleet(t *testing.T, f *fleet) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("the fleet test plays pods with podman as root (privileged containers run bwrap); not root here")
	}
	for _, tool := range []string{"podman", "runc", "haproxy", "openssl", "python3", "busybox", "bwrap"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (scripts/setup-fleet.sh installs it): %v", tool, err)
		}
	}
	for _, b := range []string{"aleph-sandbox", "aleph-driver-bwrap", "aleph-sandbox-init"} {
		if _, err := os.Stat(filepath.Join(f.root, "bin", b)); err != nil {
			t.Skipf("bin/%s is missing: run make build first", b)
		}
	}
}

func newFleet(t *testing.T) *fleet {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t, root: root}
	skipUnlessFleet(t, f)
	// A run killed before its cleanup (SIGKILL, a machine's OOM killer)
	// left its pods running and its state behind: swept first.
	for _, d := range sweepStale(context.Background(), os.TempDir(), f.root) {
		t.Logf("swept what an earlier run left: %s", d)
	}
	// Not t.TempDir: podman's storage holds files a test's cleanup cannot
	// remove before podman itself has (it is removed by the cleanup below).
	f.state, err = os.MkdirTemp("", statePrefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeOwner(f.state); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.cleanup)
	return f
}

// statePrefix names the state directories of the fleet's runs (in the
// temporary directory): the sweep touches no other.
const statePrefix = "aleph-fleet-"

// A run's state directory names its owner, the test process, in the file
// "owner": its pid and its start time (field 22 of /proc/PID/stat), so that
// a pid reused by another process is not taken for a live run.
func writeOwner(dir string) error {
	start, err := procStart(os.Getpid())
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "owner"), []byte(fmt.Sprintf("%d %s\n", os.Getpid(), start)), 0o600)
}

func procStart(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields are counted after its closing one.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 20 {
		return "", fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(fields))
	}
	return fields[19], nil
}

// ownerAlive reports whether dir's run is still going: its owner file
// names a process that runs with the same start time. A directory with
// no owner file is taken as live while young (a run between making it and
// writing the file).
func ownerAlive(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "owner"))
	if err != nil {
		st, serr := os.Stat(dir)
		return serr == nil && time.Since(st.ModTime()) < 10*time.Minute
	}
	var pid int
	var start string
	if _, err := fmt.Sscan(string(b), &pid, &start); err != nil || pid <= 0 {
		return false
	}
	now, err := procStart(pid)
	return err == nil && now == start
}

// sweepStale removes what runs killed before their cleanup left in
// parent: for each directory named statePrefix* whose owner is gone, the
// HAProxy it started (only if that process still has the directory in its
// environment: a reused pid is left alone), its pods and their cgroups
// (through podman with that run's private state), then the directory.
// Live runs' directories are not touched. It returns the directories
// removed.
func sweepStale(ctx context.Context, parent, root string) []string {
	dirs, _ := filepath.Glob(filepath.Join(parent, statePrefix+"*"))
	var swept []string
	for _, d := range dirs {
		if st, err := os.Lstat(d); err != nil || !st.IsDir() || ownerAlive(d) {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(d, "haproxy.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
				if strings.Contains("\x00"+string(env), "\x00ALEPH_ROUTER_STATE="+d+"\x00") {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if _, err := os.Stat(filepath.Join(d, "storage")); err == nil {
			pm := func(args ...string) string {
				cmd := exec.CommandContext(ctx, "bash", append([]string{"-c", `. "$0" && exec podman "$@"`, filepath.Join(root, "contrib", "fleet", "podman-env.sh")}, args...)...)
				cmd.Env = append(os.Environ(), "FLEET_STATE="+d)
				out, _ := cmd.Output()
				return string(out)
			}
			ids := pm("pod", "ps", "-q", "--no-trunc")
			pm("pod", "rm", "-a", "-f", "-t", "0")
			removePodCgroups(strings.Fields(ids))
			pm("system", "reset", "-f")
		}
		if err := os.RemoveAll(d); err == nil {
			swept = append(swept, d)
		}
	}
	return swept
}

// podman runs podman with the private configuration of podman-env.sh.
func (f *fleet) podman(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", append([]string{"-c", `. "$0" && exec podman "$@"`, filepath.Join(f.root, "contrib", "fleet", "podman-env.sh")}, args...)...)
	cmd.Env = append(os.Environ(), "FLEET_STATE="+f.state)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("podman %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (f *fleet) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if f.haproxy != nil && f.haproxy.Process != nil {
		_ = f.haproxy.Process.Kill()
		_ = f.haproxy.Wait()
	}
	ids, _ := f.podman(ctx, "pod", "ps", "-q", "--no-trunc")
	for _, p := range f.pods {
		_, _ = f.podman(ctx, "pod", "rm", "-f", "-t", "0", p.name)
	}
	removePodCgroups(strings.Fields(ids))
	// The image and its storage live under the private state; reset
	// removes them with the containers' mounts.
	_, _ = f.podman(ctx, "system", "reset", "-f")
	_ = os.RemoveAll(f.state)
}

// removePodCgroups removes the cgroups podman's cgroupfs manager made for
// the pods (libpod_parent/POD in every hierarchy), which podman 4.3 leaves
// behind in the named and v2 hierarchies; only empty ones, deepest first.
func removePodCgroups(ids []string) {
	for _, id := range ids {
		if len(id) != 64 || strings.Trim(id, "0123456789abcdef") != "" {
			continue
		}
		dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", "libpod_parent", id))
		for _, d := range dirs {
			var all []string
			_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
				if err == nil && e.IsDir() {
					all = append(all, p)
				}
				return nil
			})
			for i := len(all) - 1; i >= 0; i-- {
				_ = os.Remove(all[i])
			}
		}
	}
	// conmon's cgroup (the control container's) and the parent: removed
	// only when empty, so another podman's containers keep theirs.
	for _, pat := range []string{"*/libpod_parent/conmon", "*/libpod_parent"} {
		dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", pat))
		for _, d := range dirs {
			_ = os.Remove(d)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func run(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// certs makes a CA, the pods' serving certificate, the router's serving
// certificate and the router's client certificate, and the tokens file.
func (f *fleet) certs() {
	t := f.t
	d := filepath.Join(f.state, "secret")
	if err := os.MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
	ossl := func(args ...string) { run(t, d, "openssl", args...) }
	ossl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1", "-subj", "/CN=fleet test CA", "-keyout", "ca.key", "-out", "ca.crt")
	leaf := func(name, san, usage string) {
		ossl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN="+name, "-keyout", name+".key", "-out", name+".csr")
		ext := filepath.Join(d, name+".ext")
		if err := os.WriteFile(ext, []byte("subjectAltName="+san+"\nextendedKeyUsage="+usage+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		ossl("x509", "-req", "-in", name+".csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "1", "-extfile", ext, "-out", name+".crt")
	}
	leaf("pod", "IP:127.0.0.1,DNS:localhost", "serverAuth")
	leaf("router", "IP:127.0.0.1,DNS:localhost", "serverAuth")
	leaf("router-client", "DNS:aleph-sandbox-router", "clientAuth")
	cat := func(out string, in ...string) {
		var b []byte
		for _, p := range in {
			c, err := os.ReadFile(filepath.Join(d, p))
			if err != nil {
				t.Fatal(err)
			}
			b = append(b, c...)
		}
		if err := os.WriteFile(filepath.Join(d, out), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cat("router.pem", "router.crt", "router.key")
	cat("router-client.pem", "router-client.crt", "router-client.key")
	// The pods' Secret, as contrib/kubernetes names its keys.
	s := filepath.Join(f.state, "pod-secret")
	if err := os.MkdirAll(s, 0o700); err != nil {
		t.Fatal(err)
	}
	f.token = "fleet-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-token"
	for name, src := range map[string]string{"tls.crt": "pod.crt", "tls.key": "pod.key", "client-ca.crt": "ca.crt"} {
		b, err := os.ReadFile(filepath.Join(d, src))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s, name), b, 0o400); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(s, "tokens"), []byte(f.token+"\n"), 0o400); err != nil {
		t.Fatal(err)
	}
}

// buildImage prepares the context from bin/ and builds the image.
func (f *fleet) buildImage(ctx context.Context) {
	ctxDir := filepath.Join(f.state, "context")
	run(f.t, f.root, filepath.Join(f.root, "contrib", "container", "prepare-context.sh"), filepath.Join(f.root, "bin"), ctxDir)
	if out, err := f.podman(ctx, "build", "-q", "-t", image, ctxDir); err != nil {
		f.t.Fatalf("building the image: %v\n%s", err, out)
	}
}

// controlContainer is the control of the skip: a container of the image
// prints a word. When even that fails, this host cannot run containers.
func (f *fleet) controlContainer(ctx context.Context) {
	out, err := f.podman(ctx, "run", "--rm", "--entrypoint", "/usr/bin/echo", image, "container-ok")
	if err != nil || !strings.Contains(out, "container-ok") {
		f.t.Skipf("podman cannot start a container here (the control, echo in the image, failed): %v\n%s", err, out)
	}
}

// renderPod is the StatefulSet's pod i as podman plays it: the same
// container spec and the ConfigMap's config.toml, with what a single
// machine needs instead of a cluster. Ports: each pod listens on its own
// 127.0.0.1 ports on the host network (no CNI here). Volumes: the
// ConfigMap, Secret, PVC and emptyDirs become host directories under the
// test's state. Security: podman runs the pod as root, privileged (it has
// no user namespaces for pods nor procMount); probes and preStop are the
// kubelet's, left out (HAProxy checks /readyz itself).
func (f *fleet) renderPod(i int, sts *appsv1.StatefulSet, config string, cpus string) (pod, string) {
	t := f.t
	p := pod{name: fmt.Sprintf("%s-%d", sts.Name, i), port: freePort(t), metrics: freePort(t)}
	if len(sts.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("the StatefulSet's pod has %d containers; the test knows one, serve", len(sts.Spec.Template.Spec.Containers))
	}
	// podman kube play names a pod's container <pod>-<container>.
	p.container = p.name + "-" + sts.Spec.Template.Spec.Containers[0].Name
	dir := filepath.Join(f.state, p.name)
	for _, d := range []string{"config", "data", "tmp", "run"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := strings.Replace(config, `"tcp:0.0.0.0:7443"`, fmt.Sprintf(`"tcp:127.0.0.1:%d"`, p.port), 1)
	cfg = strings.Replace(cfg, `"tcp:0.0.0.0:9464"`, fmt.Sprintf(`"tcp:127.0.0.1:%d"`, p.metrics), 1)
	if cfg == config {
		t.Fatal("the ConfigMap's listen addresses changed: the renderer no longer finds them")
	}
	if err := os.WriteFile(filepath.Join(dir, "config", "config.toml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := *sts.Spec.Template.Spec.DeepCopy()
	spec.HostNetwork = true
	spec.Hostname = p.name
	spec.HostUsers = nil
	spec.SecurityContext = nil
	host := func(path string) corev1.VolumeSource {
		typ := corev1.HostPathDirectory
		return corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &typ}}
	}
	var vols []corev1.Volume
	for _, v := range spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			v.VolumeSource = host(filepath.Join(dir, "config"))
		case v.Secret != nil:
			v.VolumeSource = host(filepath.Join(f.state, "pod-secret"))
		default:
			v.VolumeSource = host(filepath.Join(dir, v.Name))
		}
		vols = append(vols, v)
	}
	for _, c := range sts.Spec.VolumeClaimTemplates {
		vols = append(vols, corev1.Volume{Name: c.Name, VolumeSource: host(filepath.Join(dir, c.Name))})
	}
	spec.Volumes = vols
	// The StatefulSet's Always is the kubelet's to apply to a running pod,
	// never to one that terminates; podman would start a drained serve
	// again in the pod being replaced. The test plays the controller and
	// the kubelet: it replaces or restarts pods itself.
	spec.RestartPolicy = corev1.RestartPolicyNever
	priv := true
	for k := range spec.Containers {
		c := &spec.Containers[k]
		c.Image = image
		c.SecurityContext = &corev1.SecurityContext{Privileged: &priv}
		c.ReadinessProbe, c.LivenessProbe, c.Lifecycle = nil, nil, nil
		c.Resources = corev1.ResourceRequirements{}
		if cpus != "" {
			c.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpus)}
		}
		c.Ports = nil
	}
	pd := corev1.Pod{
		TypeMeta:   metav1TypeMeta("v1", "Pod"),
		ObjectMeta: objectMeta(p.name, sts.Spec.Template.Labels),
		Spec:       spec,
	}
	b, err := yaml.Marshal(pd)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "pod.yaml")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, file
}

func (f *fleet) readManifests() (*appsv1.StatefulSet, string) {
	var sts appsv1.StatefulSet
	var config string
	for _, d := range splitYAML(f.t, filepath.Join(f.root, "contrib", "kubernetes", "shared-pool.yaml")) {
		switch kindOf(f.t, d) {
		case "StatefulSet":
			if err := yaml.UnmarshalStrict(d, &sts); err != nil {
				f.t.Fatal(err)
			}
		case "ConfigMap":
			var cm corev1.ConfigMap
			if err := yaml.UnmarshalStrict(d, &cm); err != nil {
				f.t.Fatal(err)
			}
			config = cm.Data["config.toml"]
		}
	}
	if sts.Name == "" || config == "" {
		f.t.Fatal("shared-pool.yaml lacks the StatefulSet or its ConfigMap's config.toml")
	}
	return &sts, config
}

// up plays n pods and starts HAProxy in front of them; cpus, when set,
// is each pod's CPU limit (the figures give each pod one core, as the
// StatefulSet's request does).
func (f *fleet) up(ctx context.Context, n int, cpus string) {
	t := f.t
	f.certs()
	f.buildImage(ctx)
	f.controlContainer(ctx)
	sts, config := f.readManifests()
	for i := 0; i < n; i++ {
		p, file := f.renderPod(i, sts, config, cpus)
		f.pods = append(f.pods, p)
		if out, err := f.podman(ctx, "kube", "play", file); err != nil {
			t.Fatalf("playing %s: %v\n%s", p.name, err, out)
		}
	}
	for _, p := range f.pods {
		f.waitReady(ctx, p)
	}
	f.startRouter(ctx)
}

func (f *fleet) readyz(p pod) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", p.metrics))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
	return resp.StatusCode, b.String()
}

func (f *fleet) waitReady(ctx context.Context, p pod) {
	var last string
	for ctx.Err() == nil {
		code, body := f.readyz(p)
		if code == http.StatusOK {
			return
		}
		last = fmt.Sprintf("%d %s", code, body)
		time.Sleep(200 * time.Millisecond)
	}
	logs, _ := f.podman(context.Background(), "pod", "logs", p.name)
	f.t.Fatalf("pod %s never became ready (last /readyz: %s)\n%s", p.name, last, logs)
}

func (f *fleet) startRouter(ctx context.Context) {
	t := f.t
	f.router = freePort(t)
	sec := filepath.Join(f.state, "secret")
	env := append(os.Environ(),
		fmt.Sprintf("ALEPH_ROUTER_BIND=127.0.0.1:%d", f.router),
		"ALEPH_ROUTER_CERT="+filepath.Join(sec, "router.pem"),
		"ALEPH_BACKEND_CA="+filepath.Join(sec, "ca.crt"),
		"ALEPH_ROUTER_CLIENT="+filepath.Join(sec, "router-client.pem"),
		"ALEPH_ROUTER_STATE="+f.state,
	)
	for i := 0; i < 3; i++ {
		p := f.pods[min(i, len(f.pods)-1)]
		env = append(env, fmt.Sprintf("ALEPH_POD%d=127.0.0.1:%d", i, p.port), fmt.Sprintf("ALEPH_POD%d_METRICS=%d", i, p.metrics))
	}
	// The shipped configuration, its log level raised to info so that
	// haproxy.log has a line per request (its termination state says why
	// a request failed): the one change.
	shipped, err := os.ReadFile(filepath.Join(f.root, "contrib", "haproxy", "haproxy.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	const level = "log stderr format short local0 notice"
	if strings.Count(string(shipped), level) != 1 {
		t.Fatalf("contrib/haproxy/haproxy.cfg no longer has %q", level)
	}
	cfg := filepath.Join(f.state, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(shipped), level, "log stderr format short local0 info", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	check := exec.CommandContext(ctx, "haproxy", "-c", "-f", cfg)
	check.Env = env
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c refuses %s: %v\n%s", cfg, err, out)
	}
	f.haproxy = exec.Command("haproxy", "-db", "-f", cfg)
	f.haproxy.Env = env
	f.haproxy.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logf, err := os.Create(filepath.Join(f.state, "haproxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	f.haproxy.Stdout, f.haproxy.Stderr = logf, logf
	if err := f.haproxy.Start(); err != nil {
		t.Fatal(err)
	}
	// For the sweep of a run killed before its cleanup (Pdeathsig covers
	// most, not a HAProxy whose starting thread had already ended).
	if err := os.WriteFile(filepath.Join(f.state, "haproxy.pid"), []byte(strconv.Itoa(f.haproxy.Process.Pid)), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range f.pods {
		f.waitServer(ctx, i, "UP")
	}
}

// serverState is HAProxy's view of pod i ("UP", "DOWN", ...), read from
// its admin socket.
func (f *fleet) serverState(i int) string {
	c, err := net.Dial("unix", filepath.Join(f.state, "admin.sock"))
	if err != nil {
		return "no admin socket: " + err.Error()
	}
	defer c.Close()
	fmt.Fprintf(c, "show stat\n")
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ",")
		if len(fields) > 17 && fields[0] == "serve" && fields[1] == fmt.Sprintf("pod%d", i) {
			return fields[17]
		}
	}
	return "unknown"
}

func (f *fleet) waitServer(ctx context.Context, i int, want string) {
	var got string
	for ctx.Err() == nil {
		if got = f.serverState(i); strings.HasPrefix(got, want) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	f.t.Fatalf("HAProxy never saw pod%d %s (last: %s)", i, want, got)
}

func (f *fleet) clientEnv() []string {
	return append(os.Environ(),
		"PYTHONPATH="+filepath.Join(f.root, "clients", "python"),
		fmt.Sprintf("ALEPH_FLEET_ADDR=tcp:127.0.0.1:%d", f.router),
		"ALEPH_FLEET_CA="+filepath.Join(f.state, "secret", "ca.crt"),
		"ALEPH_SANDBOX_TOKEN="+f.token,
	)
}

// client runs fleet_client.py with the Python client of this checkout.
func (f *fleet) client(ctx context.Context, out any, args ...string) {
	t := f.t
	cmd := exec.CommandContext(ctx, "python3", append([]string{filepath.Join(f.root, "contrib", "fleet", "fleet_client.py")}, args...)...)
	cmd.Env = f.clientEnv()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("fleet_client.py %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("fleet_client.py %s printed %q: %v", strings.Join(args, " "), b, err)
	}
}

type execOut struct {
	Stdout, Stderr     string
	ExitCode           *int `json:"exit_code"`
	Denied             bool
	Reason             string
	NodeID             string `json:"node_id"`
	SessionIncarnation string `json:"session_incarnation"`
	Error              string `json:"error"`
	Code               string `json:"code"`
	ReasonCode         string `json:"reason_code"`
	SessionMoved       bool   `json:"session_moved"`
	Message            string `json:"message"`
}

// hostOf is the pod that ran a command printing its hostname last.
func hostOf(r execOut) string {
	lines := strings.Fields(r.Stdout)
	if len(lines) == 0 {
		return ""
	}
	return lines[len(lines)-1]
}

var errNoMetric = errors.New("not in /metrics")

// metric sums a metric's samples in pod p's /metrics.
func (f *fleet) metric(p pod, name string) (float64, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", p.metrics))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, name+" ") || strings.HasPrefix(l, name+"{") {
			v, err := strconv.ParseFloat(l[strings.LastIndex(l, " ")+1:], 64)
			if err != nil {
				return 0, err
			}
			sum += v
			found = true
		}
	}
	if !found {
		return 0, fmt.Errorf("%s: %w", name, errNoMetric)
	}
	return sum, nil
}

func TestFleet(t *testing.T) {
	ctx, cancel := testContext(t, 20*time.Minute)
	defer cancel()
	f := newFleet(t)
	f.up(ctx, 3, "")

	// Affinity: a file written by a session's first call is read by its
	// second; the sessions spread over more than one pod.
	var aff map[string]struct {
		Token string
		Write execOut
		Read  execOut
	}
	f.client(ctx, &aff, "affinity", "12")
	perPod := map[string]int{}
	sessionPod, tokens := map[string]string{}, map[string]string{}
	for s, a := range aff {
		if a.Write.ExitCode == nil || *a.Write.ExitCode != 0 || a.Read.ExitCode == nil || *a.Read.ExitCode != 0 {
			t.Fatalf("session %s: write %+v, read %+v", s, a.Write, a.Read)
		}
		if !strings.HasPrefix(a.Read.Stdout, a.Token+"\n") {
			t.Errorf("session %s: the second call read %q, not the first call's %q (not the same workspace)", s, a.Read.Stdout, a.Token)
		}
		if hostOf(a.Write) != hostOf(a.Read) {
			t.Errorf("session %s moved from %s to %s", s, hostOf(a.Write), hostOf(a.Read))
		}
		// Every result names the server (serve's node id: the pod's
		// hostname) and the session's incarnation there.
		if a.Write.NodeID != hostOf(a.Write) || a.Read.NodeID != hostOf(a.Read) {
			t.Errorf("session %s: node_id %q then %q, but the commands ran on %q", s, a.Write.NodeID, a.Read.NodeID, hostOf(a.Write))
		}
		if a.Write.SessionIncarnation == "" || a.Write.SessionIncarnation != a.Read.SessionIncarnation {
			t.Errorf("session %s: incarnation changed between two calls: %q, %q", s, a.Write.SessionIncarnation, a.Read.SessionIncarnation)
		}
		perPod[hostOf(a.Write)]++
		sessionPod[s] = hostOf(a.Write)
		tokens[s] = a.Token
	}
	t.Logf("sessions per pod: %v", perPod)
	if len(perPod) < 2 {
		t.Errorf("12 sessions all landed on %v: the router does not spread sessions", perPod)
	}
	for h := range perPod {
		if !strings.HasPrefix(h, "aleph-sandbox-") {
			t.Errorf("a command ran on %q, not on one of the pods", h)
		}
	}
	// Metrics per pod: each pod that served sessions counted their commands.
	for _, p := range f.pods {
		n, err := f.metric(p, "aleph_sandbox_commands_total")
		if errors.Is(err, errNoMetric) && perPod[p.name] == 0 {
			// The counter has a line per outcome, made by the first
			// command: a pod the router gave no session has none yet
			// (12 sessions over 3 pods leave one empty now and then).
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", p.name, err)
			continue
		}
		if want := float64(2 * perPod[p.name]); n != want {
			t.Errorf("%s: aleph_sandbox_commands_total %v, want %v (2 commands for each of its %d sessions)", p.name, n, want, perPod[p.name])
		}
	}
	if testing.Short() {
		return
	}
	f.rollingRestart(ctx)
	f.drainAndKill(ctx, sessionPod, tokens)
}

// stat is a field of HAProxy's "show stat" for proxy px, server sv
// ("FRONTEND", "BACKEND" or a server), read from its admin socket.
func (f *fleet) stat(px, sv, field string) (int, error) {
	c, err := net.Dial("unix", filepath.Join(f.state, "admin.sock"))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	fmt.Fprintf(c, "show stat\n")
	sc := bufio.NewScanner(c)
	col := -1
	for sc.Scan() {
		fields := strings.Split(strings.TrimPrefix(sc.Text(), "# "), ",")
		if col < 0 {
			for i, name := range fields {
				if name == field {
					col = i
				}
			}
			if col < 0 {
				return 0, fmt.Errorf("show stat has no field %s", field)
			}
			continue
		}
		if len(fields) > col && fields[0] == px && fields[1] == sv {
			return strconv.Atoi(fields[col])
		}
	}
	return 0, fmt.Errorf("show stat has no %s/%s", px, sv)
}

// commandsOn is pod p's aleph_sandbox_commands_total (0 before its first
// command, which makes the metric appear), -1 when /metrics cannot be read
// (the pod is down).
func (f *fleet) commandsOn(p pod) float64 {
	n, err := f.metric(p, "aleph_sandbox_commands_total")
	switch {
	case errors.Is(err, errNoMetric):
		return 0
	case err != nil:
		return -1
	}
	return n
}

// waitCommands waits until pod p has counted at least n commands (the
// workload reached it), bounded by ctx.
func (f *fleet) waitCommands(ctx context.Context, p pod, n float64) {
	for ctx.Err() == nil {
		if f.commandsOn(p) >= n {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	ps, _ := f.podman(context.Background(), "ps", "-a", "--filter", "pod="+p.name, "--format", "{{.Names}} {{.State}} {{.Status}}")
	logs, _ := f.podman(context.Background(), "pod", "logs", "--tail", "30", p.name)
	f.t.Fatalf("%s never counted %v commands of the workload (has %v; HAProxy: %s)\n%s\n%s", p.name, n, f.commandsOn(p), f.serverState(f.podIndex(p.name)), ps, logs)
}

type rollingOut struct {
	OK, Draining, Moved, Failed, Sessions int
	Errors                                []string
	Records                               [][3]any
}

// containerState is podman's state of a container ("running",
// "stopping", "exited", ...) and its exit code.
func (f *fleet) containerState(ctx context.Context, name string) (string, int, error) {
	out, err := f.podman(ctx, "inspect", "--type", "container", "--format", "{{.State.Status}} {{.State.ExitCode}}", name)
	if err != nil {
		return "", 0, err
	}
	var state string
	var code int
	if _, err := fmt.Sscan(out, &state, &code); err != nil {
		return "", 0, fmt.Errorf("podman inspect %s printed %q: %w", name, out, err)
	}
	return state, code, nil
}

// terminate sends SIGTERM to pod p's serve container, as the kubelet does
// to a pod's containers (after preStop) while the pod's sandbox (podman's
// infra container) stays until they have ended: serve drains.
func (f *fleet) terminate(ctx context.Context, p pod) {
	if out, err := f.podman(ctx, "kill", "--signal", "TERM", p.container); err != nil {
		f.t.Fatalf("%v\n%s", err, out)
	}
}

// waitExited waits until pod p's serve container has ended and returns
// its exit code.
func (f *fleet) waitExited(ctx context.Context, p pod) int {
	var state string
	var err error
	for ctx.Err() == nil {
		var code int
		state, code, err = f.containerState(ctx, p.container)
		if err == nil && state != "running" && state != "stopping" && state != "paused" {
			return code
		}
		time.Sleep(200 * time.Millisecond)
	}
	logs, _ := f.podman(context.Background(), "pod", "logs", p.name)
	f.t.Fatalf("%s's serve did not end after its drain (state %q, %v)\n%s", p.name, state, err, logs)
	return -1
}

// rollingRestart restarts the three pods one after another, as a
// StatefulSet's rolling update does, while clients keep running commands
// through HAProxy: each pod gets SIGTERM (the kubelet's, after preStop)
// and drains within the grace period of the manifests, then it is
// replaced by a new pod of the same name, address and data volume. No
// command may fail: every one completes with its real result, or is
// refused before it ran with draining or session_moved, which the
// workload answers as docs/fleet.md says (a new session, the command
// again). The controls: the workload ran commands on every pod before
// its restart and after its replacement, and HAProxy's frontend answered
// no 5xx.
func (f *fleet) rollingRestart(ctx context.Context) {
	t := f.t
	cmd := exec.CommandContext(ctx, "python3", filepath.Join(f.root, "contrib", "fleet", "fleet_client.py"), "rolling", "6")
	cmd.Env = f.clientEnv()
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	before5xx, err := f.stat("aleph", "FRONTEND", "hrsp_5xx")
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			in.Close()
			_ = cmd.Wait()
		}
	}
	defer stop()
	// The control: the workload reaches every pod before the restarts.
	for _, p := range f.pods {
		f.waitCommands(ctx, p, f.commandsOn(p)+5)
	}
	drained := map[string]string{}
	down := make([]time.Time, len(f.pods))
	up := make([]time.Time, len(f.pods))
	for i, p := range f.pods {
		f.terminate(ctx, p)
		down[i] = time.Now()
		// serve's grace (20 s) and term grace (5 s), bounded as the
		// kubelet's terminationGracePeriodSeconds (30 s) would, with room
		// for a loaded machine.
		dctx, dcancel := context.WithTimeout(ctx, 90*time.Second)
		exit := f.waitExited(dctx, p)
		dcancel()
		// Replaced: a new pod of the same name on the same volumes, as the
		// StatefulSet's controller makes it.
		id, _ := f.podman(ctx, "pod", "inspect", "--format", "{{.Id}}", p.name)
		// The drained pod's serve log, kept for a failure's report.
		if logs, err := f.podman(ctx, "pod", "logs", "--timestamps", p.name); err == nil {
			drained[p.name] = logs
		}
		// A serve that drained exits 0; a kill (137) or a failure cut
		// what it was running.
		if exit != 0 {
			t.Errorf("%s's serve exited %d after SIGTERM: its drain did not end as a drain\n%s", p.name, exit, drained[p.name])
		}
		// podman can refuse the removal of a pod whose containers are
		// still being marked stopped ("container state improper"): tried
		// again, bounded.
		for try := 1; ; try++ {
			out, err := f.podman(ctx, "pod", "rm", "-f", "-t", "0", p.name)
			if err == nil {
				break
			}
			if try == 5 {
				t.Fatalf("%v\n%s", err, out)
			}
			t.Logf("podman pod rm %s (try %d): %v", p.name, try, err)
			time.Sleep(time.Duration(try) * time.Second)
		}
		removePodCgroups(strings.Fields(id))
		file := filepath.Join(f.state, p.name, "pod.yaml")
		if out, err := f.podman(ctx, "kube", "play", file); err != nil {
			t.Fatalf("replacing %s: %v\n%s", p.name, err, out)
		}
		wctx, wcancel := context.WithTimeout(ctx, 3*time.Minute)
		f.waitReady(wctx, p)
		f.waitServer(wctx, i, "UP")
		up[i] = time.Now()
		// The workload's new sessions reach the new pod before the next
		// one restarts (its counter starts again at 0).
		f.waitCommands(wctx, p, 5)
		wcancel()
		t.Logf("%s restarted: drained and replaced in %v", p.name, up[i].Sub(down[i]).Round(time.Second))
	}
	// Sessions spread again: every pod serves the workload after the last
	// restart.
	last := f.commandsOnAll()
	for _, p := range f.pods {
		f.waitCommands(ctx, p, last[p.name]+5)
	}
	stop()
	var r rollingOut
	if err := json.Unmarshal([]byte(stdout.String()), &r); err != nil {
		t.Fatalf("the rolling workload printed %q: %v\n%s", stdout.String(), err, stderr.String())
	}
	t.Logf("rolling restart: %d commands ok, %d refused draining, %d session_moved, %d failed; %d sessions", r.OK, r.Draining, r.Moved, r.Failed, r.Sessions)
	// HAProxy's log lines of requests that did not end cleanly (their
	// termination state is not "----"): what a failure is to be read with.
	unclean := func(l string) bool {
		return strings.Contains(l, "aleph.host.v1.Service/") && !strings.Contains(l, " ---- ")
	}
	failed := false
	if r.Failed != 0 {
		failed = true
		t.Errorf("%d commands failed during the rolling restart: %v\n%s", r.Failed, r.Errors, f.routerLog(unclean))
	}
	if after5xx, err := f.stat("aleph", "FRONTEND", "hrsp_5xx"); err != nil || after5xx != before5xx {
		failed = true
		t.Errorf("HAProxy answered %d 5xx during the rolling restart (%v):\n%s", after5xx-before5xx, err, f.routerLog(unclean))
	}
	if failed {
		// What a failure is read with: each pod's restart times and its
		// drained serve's log.
		for i, p := range f.pods {
			t.Logf("%s: SIGTERM at %s, replacement ready at %s; the drained serve's log:\n%s", p.name, down[i].UTC().Format(time.RFC3339Nano), up[i].UTC().Format(time.RFC3339Nano), drained[p.name])
		}
		f.keepLogs(drained)
	}
	// From the records: each pod ran commands of the workload before its
	// restart and after its replacement, and all three after the last.
	for i, p := range f.pods {
		var before, after, end int
		for _, rec := range r.Records {
			at, _ := rec[0].(float64)
			node, _ := rec[1].(string)
			kind, _ := rec[2].(string)
			if node != p.name || kind != "ok" {
				continue
			}
			when := time.Unix(0, int64(at*1e9))
			switch {
			case when.Before(down[i]):
				before++
			case when.After(up[i]):
				after++
			}
			if when.After(up[len(up)-1]) {
				end++
			}
		}
		if before == 0 || after == 0 || end == 0 {
			t.Errorf("%s ran %d commands of the workload before its restart, %d after its replacement, %d after the last restart: want some of each", p.name, before, after, end)
		}
	}
}

// keepLogs copies HAProxy's whole log and the drained pods' serve logs
// to $ALEPH_FLEET_LOG_DIR, when it is set, for a failure read at leisure
// (the run's state directory is removed with it).
func (f *fleet) keepLogs(drained map[string]string) {
	dir := os.Getenv("ALEPH_FLEET_LOG_DIR")
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Logf("keeping the logs: %v", err)
		return
	}
	if b, err := os.ReadFile(filepath.Join(f.state, "haproxy.log")); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "haproxy.log"), b, 0o644)
	}
	if b, err := os.ReadFile(filepath.Join(f.state, "events.log")); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "events.log"), b, 0o644)
	}
	for name, logs := range drained {
		_ = os.WriteFile(filepath.Join(dir, name+".log"), []byte(logs), 0o644)
	}
	f.t.Logf("logs kept in %s", dir)
}

// routerLog is the lines of HAProxy's log that match.
func (f *fleet) routerLog(match func(string) bool) string {
	b, _ := os.ReadFile(filepath.Join(f.state, "haproxy.log"))
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if match(l) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// commandsOnAll is every pod's aleph_sandbox_commands_total now.
func (f *fleet) commandsOnAll() map[string]float64 {
	m := map[string]float64{}
	for _, p := range f.pods {
		m[p.name] = f.commandsOn(p)
	}
	return m
}

func (f *fleet) podIndex(name string) int {
	for i, p := range f.pods {
		if p.name == name {
			return i
		}
	}
	f.t.Fatalf("no pod %q", name)
	return -1
}

// drainAndKill: a pod drains while a session's command runs there (it
// finishes, new sessions go elsewhere), then another pod is killed (its
// session's next call fails, a new session works elsewhere).
func (f *fleet) drainAndKill(ctx context.Context, sessionPod, tokens map[string]string) {
	t := f.t
	var drainS, drainPod, killS, killPod string
	for s, p := range sessionPod {
		if drainS == "" {
			drainS, drainPod = s, p
		}
	}
	for s, p := range sessionPod {
		if p != drainPod && killS == "" {
			killS, killPod = s, p
		}
	}
	long := make(chan execOut, 1)
	go func() {
		var r execOut
		f.client(ctx, &r, "run", drainS, `["sh","-c","read v < state; echo $v; exec sleep 4"]`)
		long <- r
	}()
	// The command is running once the pod counts it in flight.
	di := f.podIndex(drainPod)
	for ctx.Err() == nil {
		if n, err := f.metric(f.pods[di], "aleph_sandbox_commands_in_flight"); err == nil && n > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// SIGTERM, as the kubelet sends after preStop: serve drains.
	f.terminate(ctx, f.pods[f.podIndex(drainPod)])
	f.waitServer(ctx, di, "DOWN")
	if code, body := f.readyz(f.pods[di]); code != http.StatusServiceUnavailable || !strings.Contains(body, "draining") {
		t.Errorf("draining pod's /readyz: %d %q, want 503 draining", code, body)
	}
	for i := 0; i < 4; i++ {
		var r execOut
		f.client(ctx, &r, "run", fmt.Sprintf("after-drain-%d-%d", i, time.Now().UnixNano()), `["hostname"]`)
		if r.ExitCode == nil || *r.ExitCode != 0 {
			t.Fatalf("a new session while %s drains failed: %+v", drainPod, r)
		}
		if hostOf(r) == drainPod {
			t.Errorf("a new session was placed on the draining pod %s", drainPod)
		}
	}
	r := <-long
	if r.ExitCode == nil || *r.ExitCode != 0 || strings.TrimSpace(r.Stdout) != tokens[drainS] {
		t.Errorf("the command running on %s when it began to drain did not finish there: %+v", drainPod, r)
	}

	// A pod killed: its session's next call fails (it must not run in a
	// fresh, empty workspace on another pod); a new session works. A
	// client that keeps the session's incarnation gets session_moved: the
	// router sends its call to a pod left, which does not hold it.
	ki := f.podIndex(killPod)
	first, again := f.trackedClient(ctx, killS)
	if first.ExitCode == nil || *first.ExitCode != 0 || !strings.HasPrefix(first.Stdout, tokens[killS]+"\n") || first.SessionIncarnation == "" {
		t.Fatalf("session %s before its pod is killed: %+v", killS, first)
	}
	if out, err := f.podman(ctx, "pod", "kill", "--signal", "KILL", killPod); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	f.waitServer(ctx, ki, "DOWN")
	if moved := again(); !moved.SessionMoved {
		t.Errorf("session %s of the killed pod %s, from a client that keeps its incarnation: %+v, want aleph_sandbox.SessionMoved", killS, killPod, moved)
	}
	var lost execOut
	f.client(ctx, &lost, "run", killS, `["sh","-c","read v < state; echo $v; exec hostname"]`)
	if lost.Error == "" {
		t.Errorf("session %s of the killed pod %s ran again: %+v (a fresh workspace, its state silently gone)", killS, killPod, lost)
	} else {
		t.Logf("session of the killed pod: %s %s %s (session_moved %v)", lost.Error, lost.Code, lost.Message, lost.SessionMoved)
	}
	var fresh execOut
	f.client(ctx, &fresh, "run", fmt.Sprintf("after-kill-%d", time.Now().UnixNano()), `["hostname"]`)
	if fresh.ExitCode == nil || *fresh.ExitCode != 0 || hostOf(fresh) == killPod || hostOf(fresh) == drainPod {
		t.Errorf("a new session after the kill: %+v, want it served by the pod left", fresh)
	}
	f.restart(ctx, sessionPod, tokens, drainPod, killPod)
}

// restart: the pod left is killed and started again (a StatefulSet's pod
// restarted in place: same name, same address, same data volume) while a
// client holds one of its sessions. A client that keeps the session's
// incarnation gets session_moved: the session's processes are gone even
// though its files are still there. A client without it finds the files
// (the workspace lives on the pod's volume) and is served.
func (f *fleet) restart(ctx context.Context, sessionPod, tokens map[string]string, gone ...string) {
	t := f.t
	var s, host string
	for ss, p := range sessionPod {
		if p != gone[0] && p != gone[1] {
			s, host = ss, p
			break
		}
	}
	if s == "" {
		// The affinity step's sessions all landed on the two pods gone
		// (12 sessions over 3 pods leave one empty now and then): a new
		// one, which lands on the one pod still up.
		var left []string
		for _, p := range f.pods {
			if p.name != gone[0] && p.name != gone[1] {
				left = append(left, p.name)
			}
		}
		if len(left) != 1 {
			t.Fatalf("pods left after %v: %v, want one", gone, left)
		}
		s, host = fmt.Sprintf("restart-%d", time.Now().UnixNano()), left[0]
		tokens[s] = fmt.Sprintf("token-%d", time.Now().UnixNano())
		var made execOut
		f.client(ctx, &made, "run", s, fmt.Sprintf(`["sh","-c","echo %s > state; exec hostname"]`, tokens[s]))
		if made.ExitCode == nil || *made.ExitCode != 0 || hostOf(made) != host {
			t.Fatalf("a new session with %s the only pod up: %+v, want it placed there", host, made)
		}
	}
	first, again := f.trackedClient(ctx, s)
	if first.ExitCode == nil || *first.ExitCode != 0 || !strings.HasPrefix(first.Stdout, tokens[s]+"\n") {
		t.Fatalf("session %s before the restart: %+v", s, first)
	}
	i := f.podIndex(host)
	if out, err := f.podman(ctx, "pod", "kill", "--signal", "KILL", host); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	f.waitServer(ctx, i, "DOWN")
	// Start it again only once podman has finished with the killed
	// containers: its cleanup of a container that exited, when it comes
	// after the start (seen under load), stops the new one.
	f.waitExited(ctx, f.pods[i])
	time.Sleep(time.Second)
	if out, err := f.podman(ctx, "pod", "start", host); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// Bounded: a pod that does not come back fails here, with its log.
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Minute)
	defer wcancel()
	f.waitReady(wctx, f.pods[i])
	f.waitServer(wctx, i, "UP")
	r := again()
	if first.SessionIncarnation == "" {
		t.Errorf("the result before the restart carries no session_incarnation: %+v", first)
	}
	if !r.SessionMoved {
		t.Errorf("session %s after its pod restarted: %+v, want aleph_sandbox.SessionMoved (its processes are gone)", s, r)
	}
	// The control: a client that does not hold the old incarnation finds
	// the session's files on the restarted pod (its volume kept them), so
	// the refusal above came from the incarnation, not from a lost pod.
	var untracked execOut
	f.client(ctx, &untracked, "run", s, `["sh","-c","read v < state; echo $v; exec hostname"]`)
	if untracked.ExitCode == nil || *untracked.ExitCode != 0 || !strings.HasPrefix(untracked.Stdout, tokens[s]+"\n") || hostOf(untracked) != host {
		t.Errorf("session %s after its pod %s restarted, from a new client: %+v, want its file read on the same pod (the workspace is on the pod's volume)", s, host, untracked)
	}
}

// trackedClient runs session's command (read its state, print the pod)
// from a client that keeps the session's incarnation, and returns the
// result and again, which runs it once more from the same client (the
// incarnation sent) and returns that result or its error.
func (f *fleet) trackedClient(ctx context.Context, session string) (first execOut, again func() execOut) {
	t := f.t
	t.Helper()
	cmd := exec.CommandContext(ctx, "python3", filepath.Join(f.root, "contrib", "fleet", "fleet_client.py"), "restart", session)
	cmd.Env = f.clientEnv()
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	wait := func() { once.Do(func() { _ = in.Close(); _ = cmd.Wait() }) }
	t.Cleanup(wait)
	rd := bufio.NewReader(outp)
	var r1 struct{ First execOut }
	line, err := rd.ReadBytes('\n')
	if err != nil || json.Unmarshal(line, &r1) != nil {
		t.Fatalf("tracked client: %q %v\n%s", line, err, stderr.String())
	}
	return r1.First, func() execOut {
		t.Helper()
		defer wait()
		if _, err := in.Write([]byte("go\n")); err != nil {
			t.Fatal(err)
		}
		var r2 struct{ Second execOut }
		line, err := rd.ReadBytes('\n')
		if err != nil && len(line) == 0 {
			t.Fatalf("tracked client: %v\n%s", err, stderr.String())
		}
		if err := json.Unmarshal(line, &r2); err != nil {
			t.Fatalf("tracked client printed %q: %v", line, err)
		}
		return r2.Second
	}
}

// setServers leaves the first n pods in HAProxy's pool and puts the others
// in maintenance, through its admin socket.
func (f *fleet) setServers(n int) {
	for i := range f.pods {
		verb := "enable"
		if i >= n {
			verb = "disable"
		}
		c, err := net.Dial("unix", filepath.Join(f.state, "admin.sock"))
		if err != nil {
			f.t.Fatal(err)
		}
		fmt.Fprintf(c, "%s server serve/pod%d\n", verb, i)
		_, _ = bufio.NewReader(c).ReadString('\n')
		c.Close()
	}
}

type loadOut struct {
	OK      int
	Seconds float64
	Failed  int
	Errors  []string
}

// TestFleetFigures measures what docs/fleet.md's capacity model rests on:
// commands/s through the router with 1, 2 and 3 pods of one core each,
// and one pod's commands/s as concurrent sessions grow. It asserts only
// that every command succeeded; the figures are logged (a measurement,
// not a test: make bench-fleet, ALEPH_FLEET_FIGURES=1).
func TestFleetFigures(t *testing.T) {
	if os.Getenv("ALEPH_FLEET_FIGURES") == "" {
		t.Skip("a measurement of a few minutes: set ALEPH_FLEET_FIGURES=1 (make bench-fleet)")
	}
	ctx, cancel := testContext(t, 30*time.Minute)
	defer cancel()
	f := newFleet(t)
	f.up(ctx, 3, "1")
	n := 160
	if v, err := strconv.Atoi(os.Getenv("ALEPH_FLEET_COMMANDS")); err == nil && v > 0 {
		n = v
	}
	measure := func(sessions, conc int) loadOut {
		var l loadOut
		f.client(ctx, &l, "load", strconv.Itoa(sessions), strconv.Itoa(n), strconv.Itoa(conc), "fig")
		if l.Failed > 0 || l.OK != n {
			t.Errorf("load %d sessions, concurrency %d: %d of %d ok, errors %v", sessions, conc, l.OK, n, l.Errors)
		}
		return l
	}
	// Warm each pod's pipeline once.
	f.setServers(3)
	measure(24, 12)
	for _, conc := range []int{1, 2, 4, 8, 16} {
		f.setServers(1)
		l := measure(conc, conc)
		t.Logf("1 pod (1 core), %2d sessions side by side: %6.1f commands/s (load %s)", conc, float64(l.OK)/l.Seconds, loadavg())
	}
	// The pods' counts side by side, twice in turn, so that a change of
	// the machine's load during the run weighs on each alike; the ratios
	// are to one pod.
	rate := map[int][]float64{}
	for round := 0; round < 2; round++ {
		for pods := 1; pods <= 3; pods++ {
			f.setServers(pods)
			l := measure(24, 12)
			rate[pods] = append(rate[pods], float64(l.OK)/l.Seconds)
			t.Logf("%d pod(s) of 1 core, 24 sessions, 12 side by side: %6.1f commands/s (load %s)", pods, float64(l.OK)/l.Seconds, loadavg())
		}
	}
	mean := func(v []float64) float64 { return (v[0] + v[1]) / 2 }
	t.Logf("throughput to 1 pod's: 2 pods %.2fx, 3 pods %.2fx", mean(rate[2])/mean(rate[1]), mean(rate[3])/mean(rate[1]))
	// Sessions held: one pod takes 200 sessions of one command each; its
	// memory (the pod's cgroup) before and after is what a held session
	// costs while its sandboxes are kept.
	f.setServers(1)
	p := f.pods[0]
	before, err := f.podMemory(ctx, p)
	if err != nil {
		t.Logf("the pod's memory cannot be read here: %v", err)
		return
	}
	var l loadOut
	f.client(ctx, &l, "load", "200", "200", "8", "held")
	after, err := f.podMemory(ctx, p)
	if err != nil || l.OK != 200 {
		t.Errorf("200 sessions held: %d ok, errors %v; memory: %v", l.OK, l.Errors, err)
		return
	}
	t.Logf("200 sessions held on one pod: memory %.0f MiB -> %.0f MiB, %.2f MiB a session (load %s)", before/(1<<20), after/(1<<20), (after-before)/200/(1<<20), loadavg())
}

// loadavg is the machine's load average over 1, 5 and 15 minutes.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// podMemory is the memory the cgroup of pod p charges (cgroup v1's
// memory controller, else v2's memory.current).
func (f *fleet) podMemory(ctx context.Context, p pod) (float64, error) {
	out, err := f.podman(ctx, "pod", "inspect", "--format", "{{.CgroupPath}}", p.name)
	if err != nil {
		return 0, err
	}
	cg := strings.TrimSpace(out)
	for _, file := range []string{
		filepath.Join("/sys/fs/cgroup/memory", cg, "memory.usage_in_bytes"),
		filepath.Join("/sys/fs/cgroup", cg, "memory.current"),
		filepath.Join("/sys/fs/cgroup/unified", cg, "memory.current"),
	} {
		if b, err := os.ReadFile(file); err == nil {
			return strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
		}
	}
	return 0, fmt.Errorf("no memory accounting for cgroup %s", cg)
}
