package conformance_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/conformance"
	"github.com/aleph-sandbox/aleph-sandbox/conformance/internal/probe"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

var update = flag.Bool("update", false, "rewrite docs/conformance.md from the case table")

// drivers are built once in TestMain: name → binary path, and why the
// real Linux driver could not be built (if so).
var drivers struct {
	paths    map[string]string
	bwrapErr error
}

func TestMain(m *testing.M) {
	// With no Config.Probe this test binary is the probe (TestRunEntryPoint).
	conformance.ServeProbe(os.Args)
	flag.Parse()
	dir, err := os.MkdirTemp("", "conformance-drivers-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		gobin := goTool()
		build := exec.Command(gobin, "build", "-o", dir+string(filepath.Separator), "./example", "./testdrivers/leaky", "./testdrivers/denyall", "./probe", "./internal/linkonly")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building the test drivers:", err)
			return 1
		}
		exe := ""
		if runtime.GOOS == "windows" {
			exe = ".exe"
		}
		drivers.paths = map[string]string{}
		for _, n := range []string{"example", "leaky", "denyall", "probe", "linkonly"} {
			drivers.paths[n] = filepath.Join(dir, n+exe)
		}
		if _, err := os.Stat("../cmd/aleph-driver-bwrap"); err == nil && runtime.GOOS == "linux" {
			bb := exec.Command(gobin, "build", "-o", dir+string(filepath.Separator), "../cmd/aleph-driver-bwrap", "../cmd/aleph-sandbox-init", "./testdrivers/fakebwrap")
			bb.Env = append(os.Environ(), "CGO_ENABLED=0") // as make build
			out, err := bb.CombinedOutput()
			if err != nil {
				drivers.bwrapErr = fmt.Errorf("%v: %s", err, out)
			} else {
				drivers.paths["bwrap"] = filepath.Join(dir, "aleph-driver-bwrap")
				drivers.paths["fakebwrap"] = filepath.Join(dir, "fakebwrap")
			}
		} else {
			drivers.bwrapErr = errors.New("no cmd/aleph-driver-bwrap on this platform")
		}
		return m.Run()
	}()
	os.Exit(code)
}

// hostDependent cases may skip on some hosts whatever the driver does
// (no IPv6 loopback, /etc/shadow unreadable, no /proc, no home directory).
func hostDependent() map[string]bool {
	return map[string]bool{
		"fs/etc-shadow-invisible": true, "net/none-blocks-tcp6": true, "net/none-blocks-abstract": true,
		"fs/home-secrets-invisible": true, "fs/write-home-denied": true,
		"proc/output-flood-bounded-memory": true, "robust/sequential-200": true, "robust/concurrent-16": true,
		"fs/host-homes-invisible": true, "fs/host-dev-shm-invisible": true, "proc/host-sysv-ipc-invisible": true,
	}
}

func runSuite(t *testing.T, name string, mod func(*conformance.Config)) conformance.Report {
	t.Helper()
	// The separate probe binary: smaller and quicker to start than this
	// test binary, which TestRunEntryPoint uses as the probe instead.
	cfg := conformance.Config{DriverPath: drivers.paths[name], Probe: drivers.paths["probe"]}
	if mod != nil {
		mod(&cfg)
	}
	rep, err := conformance.RunSuite(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func statuses(rep conformance.Report) map[string]conformance.Result {
	m := map[string]conformance.Result{}
	for _, r := range rep.Results {
		m[r.ID] = r
	}
	return m
}

// expectOutcomes checks every case of rep against want (id → status; ids
// not listed must be defaultStatus). Host-dependent cases may also skip.
func expectOutcomes(t *testing.T, rep conformance.Report, want map[string]conformance.Status, defaultStatus conformance.Status, may map[string]bool) {
	t.Helper()
	got := statuses(rep)
	if len(got) != len(conformance.Cases()) {
		t.Errorf("report has %d cases, suite has %d", len(got), len(conformance.Cases()))
	}
	for _, c := range conformance.Cases() {
		r := got[c.ID]
		w, ok := want[c.ID]
		if !ok {
			w = defaultStatus
		}
		if r.Status == w || may[c.ID] || (r.Status == conformance.Skip && (hostDependent()[c.ID] || c.OS != conformance.AllOS)) {
			continue
		}
		t.Errorf("%s: got %s (%s), want %s", c.ID, r.Status, r.Detail, w)
	}
}

func TestCaseTable(t *testing.T) {
	cases := conformance.Cases()
	if len(cases) < 50 {
		t.Errorf("only %d cases; the suite promises at least 50", len(cases))
	}
	idRE := regexp.MustCompile(`^(protocol|exec|stream|pty|fs|proc|net|res|robust|session|layered)/[a-z0-9]+(-[a-z0-9]+)*$`)
	seen := map[string]bool{}
	covered := map[string]bool{}
	for _, c := range cases {
		if !idRE.MatchString(c.ID) {
			t.Errorf("case id %q is not area/kebab-case", c.ID)
		}
		if seen[c.ID] {
			t.Errorf("case id %q twice", c.ID)
		}
		seen[c.ID] = true
		if c.Level != conformance.Must && c.Level != conformance.Should {
			t.Errorf("%s: level %q", c.ID, c.Level)
		}
		if c.Feature != "" && !driverapi.IsKnownFeature(c.Feature) {
			t.Errorf("%s: unknown feature %q", c.ID, c.Feature)
		}
		covered[c.Feature] = true
		if len(c.Description) < 30 {
			t.Errorf("%s: description too short to say what it proves", c.ID)
		}
	}
	// A claimed feature is always tested: every feature needs a case.
	for _, f := range driverapi.KnownFeatures() {
		if !covered[f] {
			t.Errorf("no case tests feature %s", f)
		}
	}
}

func TestConformanceDoc(t *testing.T) {
	const path = "../docs/conformance.md"
	want := conformance.Markdown()
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (generate it: go test ./conformance -run TestConformanceDoc -update)", err)
	}
	if string(got) != want {
		t.Error("docs/conformance.md is stale: go test ./conformance -run TestConformanceDoc -update")
	}
	for _, c := range conformance.Cases() {
		if !strings.Contains(string(got), "`"+c.ID+"`") {
			t.Errorf("docs/conformance.md does not list %s", c.ID)
		}
	}
}

// The go-test entry point: one subtest per selected case, skips as skips.
// With no Config.Probe, this test binary itself is the probe.
func TestRunEntryPoint(t *testing.T) {
	conformance.Run(t, func(testing.TB) conformance.Config {
		return conformance.Config{DriverPath: drivers.paths["example"], Run: regexp.MustCompile(`^(protocol/handshake|exec/argv-verbatim|fs/write-outside-denied)$`)}
	})
}

// The example driver claims only env_isolation: it passes every case it
// is tested on, and every isolation case skips.

func TestExampleDriver(t *testing.T) {
	tmp := t.TempDir()
	rep := runSuite(t, "example", func(c *conformance.Config) { c.TempDir = tmp })
	assertNothingLeft(t, tmp, drivers.paths["example"])
	want := map[string]conformance.Status{}
	for _, c := range conformance.Cases() {
		if c.Feature != "" && c.Feature != driverapi.FeatureEnvIsolation || c.Call != "" {
			want[c.ID] = conformance.Skip
		}
	}
	expectOutcomes(t, rep, want, conformance.Pass, nil)
	if rep.Backend != "example-exec" || rep.Failed != 0 {
		t.Errorf("backend %q, %d failed", rep.Backend, rep.Failed)
	}
	if len(example(t)) >= 100 {
		t.Errorf("the example driver has %d lines; it must stay under 100", len(example(t)))
	}
}

func example(t *testing.T) []string {
	b, err := os.ReadFile("example/main.go")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// leakyFails is exactly what a driver with no isolation that claims every
// feature fails.
func leakyFails() []string {
	return []string{
		"exec/env-empty", "exec/env-exact", "exec/env-host-not-leaked",
		"fs/dotdot-escape-read-denied", "fs/dotdot-escape-write-denied", "fs/etc-shadow-invisible",
		"fs/home-secrets-invisible", "fs/protected-dirs-not-creatable", "fs/protected-dirs-readonly",
		"fs/protected-dirs-rename-denied", "fs/read-grant", "fs/read-grant-prefix", "fs/read-outside-denied",
		"fs/host-canaries-unreadable", "fs/host-canaries-unwritable", "fs/host-dev-shm-invisible",
		"fs/host-homes-invisible", "fs/protected-existing-readonly",
		"fs/nested-git-readonly", "fs/protected-default-set", "fs/no-setid-files",
		"fs/protected-roots-not-movable", "fs/protected-name-any-case", "fs/protected-hardlink-write-denied",
		"net/allow-hosts-no-unix-sockets", "res/tmpfs-bounded",
		"fs/symlink-escape-read-denied", "fs/symlink-escape-write-denied", "fs/symlink-made-inside-denied", "fs/symlink-dir-escape-read-denied",
		"fs/write-grant-prefix", "fs/write-home-denied", "fs/write-outside-denied",
		"net/allow-hosts-direct-blocked", "net/allow-hosts-udp-blocked", "net/none-blocks-abstract", "net/none-blocks-listen",
		"net/none-blocks-tcp", "net/none-blocks-tcp6", "net/none-blocks-udp", "net/none-blocks-unix",
		"net/none-blocks-unix-granted-path", "net/none-own-loopback", "net/unix-host-socket-unreachable",
		"proc/cancel-kills-tree", "proc/no-host-terminal", "proc/no-survivors-after-exit", "proc/spawn-denied", "proc/timeout-kills-tree",
		"proc/host-processes-invisible", "proc/host-sysv-ipc-invisible", "proc/spawn-denied-clone3", "proc/spawn-refused-reported",
		// Claims violation_report and names no watched kind.
		"proc/violations-reported",
		"res/memory-limit", "res/memory-limit-tight", "res/pid-limit", "robust/driver-death-kills-tree",
		// No cap: failed as such on an idle host, as inconclusive on a busy one.
		"res/cpu-limit",
	}
}

func TestLeakyDriverFailsIsolation(t *testing.T) {
	tmp := t.TempDir()
	rep := runSuite(t, "leaky", func(c *conformance.Config) { c.TempDir = tmp })
	// Even the survivors a leaky driver leaves are cleaned up.
	assertNothingLeft(t, tmp, drivers.paths["leaky"])
	want := optionalCallsSkipped()
	for _, id := range leakyFails() {
		want[id] = conformance.Fail
	}
	// It claims the streaming features without the run_stream call (and
	// signals without the signal call): each of their cases fails.
	streamFails := []string{"stream/stdin-as-it-arrives", "stream/stdin-eof"}
	if runtime.GOOS != "windows" {
		streamFails = append(streamFails, "stream/signal", "pty/echo", "pty/resize", "pty/isatty", "pty/stdin-eof", "pty/tiocsti-denied")
	}
	if runtime.GOOS == "linux" {
		streamFails = append(streamFails, "pty/host-terminal-unreachable")
	}
	for _, id := range streamFails {
		want[id] = conformance.Fail
	}
	if runtime.GOOS == "windows" {
		// Run only there: without isolation a write through .git.\config
		// lands in .git\config.
		want["fs/protected-windows-aliases"] = conformance.Fail
	}
	if runtime.GOOS == "linux" {
		// Linux children find the proxy at the in-namespace bridge, which
		// a driver without a network namespace does not provide.
		want["net/allow-hosts-via-proxy"] = conformance.Fail
	}
	expectOutcomes(t, rep, want, conformance.Pass, nil)
	var failed []string
	for _, r := range rep.Results {
		if r.Status == conformance.Fail {
			failed = append(failed, r.ID)
		}
	}
	sort.Strings(failed)
	t.Logf("leaky driver failed %d cases: %v", len(failed), failed)
}

// TestSuiteFollowsTheReportedProxyRoute: the proxy case builds the child's
// proxy address from the route the driver reports, not from the OS it runs
// on. The leaky driver runs commands on the host's own network and has no
// in-namespace bridge, so reported as host_loopback its proxied connection
// reaches the proxy (pass), and reported as namespace_bridge it cannot
// (fail: nothing listens at the bridge address), on every OS.
func TestSuiteFollowsTheReportedProxyRoute(t *testing.T) {
	for _, tc := range []struct {
		route driverapi.ProxyRoute
		want  conformance.Status
	}{
		{driverapi.RouteHostLoopback, conformance.Pass},
		{driverapi.RouteNamespaceBridge, conformance.Fail},
	} {
		t.Run(string(tc.route), func(t *testing.T) {
			rep := runSuite(t, "leaky", func(c *conformance.Config) {
				c.Env = []string{"LEAKY_NETWORK_ROUTE=" + string(tc.route)}
				c.Run = regexp.MustCompile(`^net/allow-hosts-via-proxy$`)
			})
			if got := rep.Capabilities.NetworkRoute(); got != tc.route {
				t.Fatalf("the driver reported route %q, want %q", got, tc.route)
			}
			r, ok := statuses(rep)["net/allow-hosts-via-proxy"]
			if !ok {
				t.Fatalf("the case did not run: %+v", rep.Results)
			}
			if r.Status != tc.want {
				t.Errorf("route %s: net/allow-hosts-via-proxy %s (%s), want %s", tc.route, r.Status, r.Detail, tc.want)
			}
		})
	}
}

// optionalCallsSkipped: the cases of an optional call (Case.Call) skip,
// named, for a test driver that does not list the call.
func optionalCallsSkipped() map[string]conformance.Status {
	want := map[string]conformance.Status{}
	for _, c := range conformance.Cases() {
		if c.Call != "" {
			want[c.ID] = conformance.Skip
		}
	}
	return want
}

// denyAllPasses is all a driver that runs nothing can pass: the protocol
// cases that never need a command to work.
func denyAllPasses() []string {
	return []string{"protocol/handshake", "protocol/version-mismatch", "protocol/capabilities-well-formed",
		"protocol/capabilities-stable", "protocol/profile-deterministic"}
}

func TestDenyAllDriverFailsPositiveControls(t *testing.T) {
	rep := runSuite(t, "denyall", nil)
	want := optionalCallsSkipped()
	for _, id := range denyAllPasses() {
		want[id] = conformance.Pass
	}
	expectOutcomes(t, rep, want, conformance.Fail, nil)
	for _, r := range rep.Results {
		if r.Status == conformance.Fail && r.Detail == "" {
			t.Errorf("%s failed without saying why", r.ID)
		}
	}
}

func TestUnknownFeatureFailsCapabilities(t *testing.T) {
	rep := runSuite(t, "leaky", func(c *conformance.Config) {
		c.Env = []string{"LEAKY_EXTRA_FEATURE=teleportation"}
		c.Run = regexp.MustCompile(`^protocol/capabilities-well-formed$`)
	})
	if len(rep.Results) != 1 {
		t.Fatalf("--run selected %d cases, want 1", len(rep.Results))
	}
	r := rep.Results[0]
	if r.Status != conformance.Fail || !strings.Contains(r.Detail, `unknown feature "teleportation"`) {
		t.Errorf("got %s: %s", r.Status, r.Detail)
	}
	// Positive control: without the made-up name the same case passes.
	rep = runSuite(t, "leaky", func(c *conformance.Config) { c.Run = regexp.MustCompile(`^protocol/capabilities-well-formed$`) })
	if rep.Passed != 1 {
		t.Errorf("honest feature list: %+v", rep.Results)
	}
}

func TestDriverThatDoesNotStart(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the stand-in non-plugin executable is /bin/sh")
	}
	// Real executables that are not plugins: the run is one *LaunchError
	// saying why, and no case is reported (each would fail for the same
	// reason).
	for name, args := range map[string][]string{
		"exits":            {"-c", "exit 3"},
		"writes on stdout": {"-c", "echo hello; sleep 5"},
	} {
		rep, err := conformance.RunSuite(t.Context(), conformance.Config{
			DriverPath: "/bin/sh", Args: args,
			Run: regexp.MustCompile(`^(protocol/capabilities-well-formed|exec/stdin-small)$`)})
		var le *conformance.LaunchError
		if !errors.As(err, &le) || le.Path != "/bin/sh" || !strings.Contains(err.Error(), "did not start") {
			t.Errorf("%s: want a *LaunchError, got %v", name, err)
		}
		if len(rep.Results) != 0 || rep.Failed != 0 {
			t.Errorf("%s: cases reported: %+v", name, rep.Results)
		}
	}
	// Positive control: the same selection against a driver that starts
	// runs both cases.
	rep, err := conformance.RunSuite(t.Context(), conformance.Config{DriverPath: drivers.paths["example"], Probe: drivers.paths["probe"],
		Run: regexp.MustCompile(`^(protocol/capabilities-well-formed|exec/stdin-small)$`)})
	if err != nil || rep.Passed != 2 {
		t.Errorf("example driver: %v, %+v", err, rep.Results)
	}
}

func TestBadConfig(t *testing.T) {
	for name, cfg := range map[string]conformance.Config{
		"empty":   {},
		"missing": {DriverPath: filepath.Join(t.TempDir(), "nope")},
		"dir":     {DriverPath: t.TempDir()},
		// A typo in a filter must not pass having run nothing.
		"no case": {DriverPath: drivers.paths["example"], Run: regexp.MustCompile(`^exec/no-such-case$`)},
	} {
		_, err := conformance.RunSuite(context.Background(), cfg)
		var ce *conformance.ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%s: want *ConfigError, got %v", name, err)
		}
		// It is the project's one configuration error type: a caller
		// catches it with the errors.As it uses for every other one.
		var de *driverapi.ConfigError
		if !errors.As(err, &de) || !strings.HasPrefix(err.Error(), "conformance: ") {
			t.Errorf("%s: %v (%T) is not a *driverapi.ConfigError reading \"conformance: ...\"", name, err, err)
		}
	}
}

// The real Linux driver must pass every case it is tested on.
func TestBwrapDriver(t *testing.T) {
	if drivers.paths["bwrap"] == "" {
		t.Skipf("Linux driver not available: %v", drivers.bwrapErr)
	}
	opts := map[string]string{}
	if os.Getenv("ALEPH_TEST_NO_NAMESPACES") == "1" {
		// scripts/test-nonamespaces.sh: namespaces are refused, the suite
		// runs against the Landlock tier.
		opts["fallback"] = "landlock"
	}
	if m := os.Getenv("ALEPH_TEST_PREPARED"); m != "" {
		// scripts/test-prepared.sh: every command through a prepared
		// sandbox (sandbox.linux.prepared = "always").
		opts["prepared"] = m
	}
	if os.Getenv("ALEPH_TEST_SESSION") == "on" {
		// scripts/test-session.sh: every command of a session in its
		// session's sandbox (sandbox.linux.session_sandbox = "always").
		opts["session_sandbox"] = "always"
	}
	var env []string
	if len(opts) > 0 {
		js, err := json.Marshal(opts)
		if err != nil {
			t.Fatal(err)
		}
		env = []string{"ALEPH_DRIVER_OPTIONS=" + string(js)}
	}
	conformance.Run(t, func(testing.TB) conformance.Config {
		return conformance.Config{DriverPath: drivers.paths["bwrap"], Probe: drivers.paths["probe"], Env: env}
	})
}

// assertNothingLeft: no case directory remains in tmp, and (where /proc
// exists) no process runs the driver binary or a tree script of the suite.
func assertNothingLeft(t *testing.T, tmp, driver string) {
	t.Helper()
	ents, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("left behind: %s", filepath.Join(tmp, e.Name()))
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, p := range procs {
		if exe, err := os.Readlink(filepath.Join("/proc", p.Name(), "exe")); err == nil && exe == driver {
			t.Errorf("driver process %s still running", p.Name())
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		cwd, _ := os.Readlink(filepath.Join("/proc", p.Name(), "cwd"))
		if err == nil && strings.Contains(string(cmd), "aleph-conformance-") && strings.HasPrefix(cwd, tmp) {
			t.Errorf("process %s started by a case still running: %q", p.Name(), cmd)
		}
	}
}

// goTool is the go command that runs this test: the one on PATH, else the
// toolchain the test binary came from.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// The complete minimal driver in docs/writing-a-driver.md is the example
// driver this package tests against the suite, and it builds as it stands
// in the document (the snippet is compiled in place of the example's
// source through a build overlay).
func TestMinimalDriverInDocs(t *testing.T) {
	doc, err := os.ReadFile("../docs/writing-a-driver.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "<!-- minimal-driver: begin -->\n```go\n")
	snippet, _, ok2 := strings.Cut(rest, "```\n<!-- minimal-driver: end -->")
	if !ok || !ok2 {
		t.Fatal("docs/writing-a-driver.md has no minimal-driver block")
	}
	if want := strings.Join(example(t), "\n") + "\n"; snippet != want {
		t.Error("the minimal driver in docs/writing-a-driver.md differs from conformance/example/main.go")
	}
	_, rest, ok = strings.Cut(string(doc), "<!-- minimal-driver-group: begin -->\n```go\n")
	group, _, ok2 := strings.Cut(rest, "```\n<!-- minimal-driver-group: end -->")
	if want, err := os.ReadFile("example/group_unix.go"); err != nil || !ok || !ok2 || group != string(want) {
		t.Errorf("the ownGroup block in docs/writing-a-driver.md differs from conformance/example/group_unix.go (%v)", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(snippet), 0o644); err != nil {
		t.Fatal(err)
	}
	target, err := filepath.Abs("example/main.go")
	if err != nil {
		t.Fatal(err)
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {target: src}})
	if err != nil {
		t.Fatal(err)
	}
	ov := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(goTool(), "build", "-overlay", ov, "-o", filepath.Join(dir, "driver"), "./example").CombinedOutput()
	if err != nil {
		t.Fatalf("the minimal driver of the docs does not build: %v\n%s", err, out)
	}
}

// Linking the conformance package changes nothing in a program: started
// with the probe's magic first argument, a program that does not call
// ServeProbe runs its own main (the package once did this from an init,
// taking over every binary that linked it). The positive control: this
// test binary, which calls ServeProbe in TestMain, answers as the probe.
func TestLinkingDoesNotMakeTheProbe(t *testing.T) {
	out, err := exec.Command(drivers.paths["linkonly"], probe.Magic, "echo", "hi").CombinedOutput()
	if err != nil {
		t.Fatalf("linkonly: %v: %s", err, out)
	}
	if got := string(out); got != "linkonly main ran with 3 arguments\n" {
		t.Errorf("a program linking conformance, started as the probe, printed %q, want its own main's line", got)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(self, probe.Magic, "echo", "hi").CombinedOutput()
	if err != nil || string(out) != "hi\n" {
		t.Errorf("this test binary (ServeProbe in TestMain) as the probe: %v, %q, want \"hi\\n\"", err, out)
	}
}
