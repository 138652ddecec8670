package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/conformance"
)

// buildTestDriver builds one of the conformance package's drivers.
func buildTestDriver(t *testing.T, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(gobin, "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

func runConf(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = runConformance(context.Background(), args, stdio{In: strings.NewReader(""), Out: &o, Err: &e})
	return code, o.String(), e.String()
}

func TestConformanceLinesAndJUnit(t *testing.T) {
	drv := buildTestDriver(t, "../../conformance/example")
	junit := filepath.Join(t.TempDir(), "report.xml")
	code, out, errOut := runConf(t, "--driver", drv, "--junit", junit,
		"--run", `^(protocol/handshake|exec/stdin-small|fs/write-outside-denied)$`)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q, stdout %q", code, errOut, out)
	}
	want := "PASS protocol/handshake\n" +
		"PASS exec/stdin-small\n" +
		"SKIP fs/write-outside-denied: driver does not claim fs_write_isolation\n" +
		"2 passed, 0 failed, 1 skipped\n"
	if out != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out, want)
	}
	b, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var doc junitSuites
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("JUnit file is not XML: %v", err)
	}
	if len(doc.Suites) != 1 || doc.Suites[0].Tests != 3 || doc.Suites[0].Skipped != 1 || doc.Suites[0].Failures != 0 {
		t.Fatalf("JUnit summary: %+v", doc.Suites)
	}
	skipped := 0
	for _, c := range doc.Suites[0].Cases {
		if c.Skipped != nil {
			skipped++
			if c.Name != "fs/write-outside-denied" || !strings.Contains(c.Skipped.Message, "fs_write_isolation") {
				t.Errorf("skipped case %+v", c)
			}
		}
	}
	if skipped != 1 {
		t.Errorf("%d skipped testcases, want 1", skipped)
	}
}

func TestConformanceFailureExitAndJSON(t *testing.T) {
	drv := buildTestDriver(t, "../../conformance/testdrivers/denyall")
	code, out, _ := runConf(t, "--driver", drv, "--run", `^(exec/stdin-small|protocol/handshake)$`)
	if code != 1 {
		t.Errorf("exit %d with a failing case, want 1", code)
	}
	if !strings.Contains(out, "FAIL exec/stdin-small: ") || !strings.HasSuffix(out, "1 passed, 1 failed, 0 skipped\n") {
		t.Errorf("stdout %q", out)
	}
	code, out, _ = runConf(t, "--driver", drv, "--json", "--run", `^(exec/stdin-small|protocol/handshake)$`)
	if code != 1 {
		t.Errorf("--json exit %d, want 1", code)
	}
	var rep struct {
		Driver, Backend         string
		Cases                   []struct{ ID, Status, Detail string }
		Passed, Failed, Skipped int
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output is not one JSON object: %v\n%s", err, out)
	}
	if rep.Driver != drv || rep.Backend != "denyall" || rep.Passed != 1 || rep.Failed != 1 || len(rep.Cases) != 2 {
		t.Errorf("json report %+v", rep)
	}
	for _, c := range rep.Cases {
		if c.ID == "exec/stdin-small" && (c.Status != "fail" || c.Detail == "") {
			t.Errorf("case %+v", c)
		}
		if c.ID == "protocol/handshake" && c.Status != "pass" {
			t.Errorf("case %+v", c)
		}
	}
}

func TestConformanceRefusals(t *testing.T) {
	for name, args := range map[string][]string{
		"bad regexp":     {"--driver", "/bin/sh", "--run", "("},
		"missing driver": {"--driver", "no-such-driver-name-xyz"},
		"missing path":   {"--driver", filepath.Join(t.TempDir(), "nope")},
		"missing config": {"--driver", "/bin/sh", "--config", filepath.Join(t.TempDir(), "nope.toml")},
		"extra argument": {"--driver", "/bin/sh", "extra"},
	} {
		code, out, errOut := runConf(t, args...)
		if code != exitSandboxError || out != "" || !strings.HasPrefix(errOut, "aleph-sandbox: conformance: ") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%s: exit %d stdout %q stderr %q", name, code, out, errOut)
		}
	}
}

func TestConformanceList(t *testing.T) {
	code, out, _ := runConf(t, "--list", "--run", "^net/none-blocks-tcp$")
	if code != 0 || out != "net/none-blocks-tcp\tMUST\tnetwork_none\n" {
		t.Errorf("exit %d, %q", code, out)
	}
}

// A --run filter that cannot select anything is the caller's mistake: it
// is refused (125) before any driver is looked at, naming the pattern,
// rather than passing with nothing run.
func TestConformanceRunFilterRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"no match", []string{"--driver", "/bin/sh", "--run", "^fs/no-such-case$"},
			[]string{`--run "^fs/no-such-case$" matches no case id`, "aleph-sandbox conformance --list"}},
		{"no match, missing driver", []string{"--driver", "no-such-driver-name-xyz", "--run", "typo"},
			[]string{`--run "typo" matches no case id`}},
		{"no match with --list", []string{"--list", "--run", "^net/nope$"},
			[]string{`--run "^net/nope$" matches no case id`}},
		{"bad regexp", []string{"--driver", "/bin/sh", "--run", "("},
			[]string{`--run "(" is not a regular expression`, "missing closing )"}},
		{"bad regexp with --list", []string{"--list", "--run", "a**"},
			[]string{`--run "a**" is not a regular expression`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := runConf(t, c.args...)
			if code != exitSandboxError || out != "" || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "aleph-sandbox: conformance: ") {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 125 and one line on stderr", code, out, errOut)
			}
			for _, w := range c.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q does not say %q", errOut, w)
				}
			}
		})
	}
	// Positive control: a filter that matches runs the list.
	if code, out, _ := runConf(t, "--list", "--run", "^net/none-blocks-tcp$"); code != 0 || out == "" {
		t.Errorf("matching --list: exit %d, %q", code, out)
	}
}

// confJSON is conformance --json's object as a CI job reads it.
type confJSON struct {
	Driver    string `json:"driver"`
	Cases     []struct{ ID, Status, Detail string }
	Passed    int    `json:"passed"`
	Failed    int    `json:"failed"`
	Error     string `json:"error"`
	ErrorCode string `json:"error_code"`
}

// decodeOne decodes out, which must be exactly one JSON object holding
// the keys error and error_code, into v.
func decodeOne(t *testing.T, out string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	var obj map[string]json.RawMessage
	if err := dec.Decode(&obj); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%q", err, out)
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one JSON value: %q", out)
	}
	for _, k := range []string{"error", "error_code", "cases"} {
		if _, ok := obj[k]; !ok {
			t.Errorf("the object has no %q: %s", k, out)
		}
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatal(err)
	}
}

// With --json every error that ends the command is still one object on
// stdout, with error and error_code, and nothing on stderr: a CI job that
// parses the output never gets an empty document.
func TestConformanceJSONErrors(t *testing.T) {
	drv := buildTestDriver(t, "../../conformance/example")
	noDir := filepath.Join(t.TempDir(), "no-such-dir", "report.xml")
	for _, c := range []struct {
		name string
		args []string
		code string
		want string
	}{
		{"unknown flag", []string{"--json", "--nope"}, "invalid_config", "unknown flag --nope"},
		{"unexpected argument", []string{"--json", "--driver", drv, "extra"}, "invalid_config", `unexpected argument "extra"`},
		{"bad regexp", []string{"--json", "--driver", drv, "--run", "("}, "invalid_config", `--run "(" is not a regular expression`},
		{"no match", []string{"--json", "--driver", drv, "--run", "^nope$"}, "invalid_config", `--run "^nope$" matches no case id`},
		{"no match with --list", []string{"--json", "--list", "--run", "^nope$"}, "invalid_config", `matches no case id`},
		{"missing driver", []string{"--json", "--driver", "no-such-driver-name-xyz"}, "driver_launch", "not found"},
		{"missing config", []string{"--json", "--driver", drv, "--config", filepath.Join(t.TempDir(), "nope.toml")}, "invalid_config", "nope.toml"},
		{"junit not writable", []string{"--json", "--driver", drv, "--run", "^protocol/handshake$", "--junit", noDir}, "report_write", "writing " + noDir},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := runConf(t, c.args...)
			if code != exitSandboxError || errOut != "" {
				t.Errorf("exit %d, stderr %q; want 125 and nothing on stderr", code, errOut)
			}
			var rep confJSON
			decodeOne(t, out, &rep)
			if rep.ErrorCode != c.code || !strings.HasPrefix(rep.Error, "conformance: ") || !strings.Contains(rep.Error, c.want) || strings.Contains(rep.Error, "\n") {
				t.Errorf("error_code %q error %q; want %q and a line saying %q", rep.ErrorCode, rep.Error, c.code, c.want)
			}
			if rep.Cases == nil {
				t.Error(`"cases" is null, want a list`)
			}
		})
	}
	// The report written before the failed --junit is complete; and a run
	// that ends normally says so with empty error fields.
	code, out, _ := runConf(t, "--json", "--driver", drv, "--run", "^protocol/handshake$", "--junit", noDir)
	var rep confJSON
	decodeOne(t, out, &rep)
	if code != exitSandboxError || rep.Passed != 1 || len(rep.Cases) != 1 || rep.Driver != drv {
		t.Errorf("report beside the --junit error: exit %d %+v", code, rep)
	}
	code, out, _ = runConf(t, "--json", "--driver", drv, "--run", "^protocol/handshake$")
	rep = confJSON{}
	decodeOne(t, out, &rep)
	if code != 0 || rep.Error != "" || rep.ErrorCode != "" || rep.Passed != 1 {
		t.Errorf("a clean run: exit %d %+v", code, rep)
	}
}

func TestConformanceListJSON(t *testing.T) {
	code, out, _ := runConf(t, "--list", "--json", "--run", "^net/none-blocks-tcp$")
	var list struct {
		Cases []struct {
			ID, Level, Feature, OS, Description string
		}
		Error     string `json:"error"`
		ErrorCode string `json:"error_code"`
	}
	decodeOne(t, out, &list)
	if code != 0 || len(list.Cases) != 1 || list.Cases[0].ID != "net/none-blocks-tcp" || list.Cases[0].Level != "MUST" ||
		list.Cases[0].Feature != "network_none" || list.Cases[0].OS != "all" || list.Cases[0].Description == "" || list.Error != "" {
		t.Errorf("exit %d, %+v", code, list)
	}
}

// writeScript writes an executable shell script (mode) or a plain file.
func writeScript(t *testing.T, name, body string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// A driver that cannot start is one launch error (exit 125), not a FAIL
// line for every case that could not run: with and without --json.
func TestConformanceDriverDoesNotStart(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the stand-in drivers are POSIX programs and scripts")
	}
	hostile := buildTestDriver(t, "./testdata/hostiledriver")
	for _, c := range []struct {
		name, driver, mode, want string
	}{
		{"exits at once", "/bin/false", "", "exited without a handshake"},
		{"not executable", writeScript(t, "driver", "#!/bin/sh\n", 0o644), "", "not executable"},
		{"crashes at start", writeScript(t, "driver", "#!/bin/sh\necho 'panic: broken at start' >&2\nexit 2\n", 0o755), "", "panic: broken at start"},
		{"writes on stdout", writeScript(t, "driver", "#!/bin/sh\necho hello\nsleep 5\n", 0o755), "", `first line: "hello"`},
		{"capabilities fail", hostile, "capabilities-error", "its Capabilities call failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("HOSTILE_DRIVER_MODE", c.mode)
			code, out, errOut := runConf(t, "--driver", c.driver, "--run", `^(protocol/handshake|exec/stdin-small|fs/read-outside-denied)$`)
			if code != exitSandboxError || out != "" || strings.Count(errOut, "\n") != 1 ||
				!strings.Contains(errOut, "did not start, so no case ran") || !strings.Contains(errOut, c.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want 125 and one line saying %q", code, out, errOut, c.want)
			}
			code, out, errOut = runConf(t, "--json", "--driver", c.driver)
			var rep confJSON
			decodeOne(t, out, &rep)
			if code != exitSandboxError || errOut != "" || rep.ErrorCode != "driver_launch" || !strings.Contains(rep.Error, c.want) || len(rep.Cases) != 0 || rep.Driver != c.driver {
				t.Errorf("--json: exit %d, stderr %q, %+v", code, errOut, rep)
			}
		})
	}
}

// hasControl reports a control character (C0, DEL, C1) other than the
// newlines that end lines.
func hasControl(s string) bool {
	for _, r := range s {
		if r != '\n' && (r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0)) {
			return true
		}
	}
	return false
}

// A case's detail is text from the driver: printed, its control
// characters are escaped, so it can neither end its line and forge
// another nor send the terminal escape sequences.
func TestConformanceCaseLineEscapes(t *testing.T) {
	for _, c := range []struct {
		name string
		r    conformance.Result
		want string
	}{
		{"forged line", conformance.Result{ID: "exec/x", Status: conformance.Fail, Detail: "bad\nPASS exec/y"}, `FAIL exec/x: bad\x0aPASS exec/y`},
		{"carriage return", conformance.Result{ID: "exec/x", Status: conformance.Fail, Detail: "bad\rPASS exec/x"}, `FAIL exec/x: bad\x0dPASS exec/x`},
		{"escape sequences", conformance.Result{ID: "exec/x", Status: conformance.Fail, Detail: "\x1b[2J\x1b]0;t\x07\u009b1m"}, `FAIL exec/x: \x1b[2J\x1b]0;t\x07\u009b1m`},
		{"skip reason", conformance.Result{ID: "fs/x", Status: conformance.Skip, Detail: "why\x1b[8m"}, `SKIP fs/x: why\x1b[8m`},
		{"plain text kept", conformance.Result{ID: "fs/x", Status: conformance.Fail, Detail: `exit=1 stdout="a\nb" ünïcode`}, `FAIL fs/x: exit=1 stdout="a\nb" ünïcode`},
		{"pass", conformance.Result{ID: "fs/x", Status: conformance.Pass}, "PASS fs/x"},
	} {
		if got := caseLine(c.r); got != c.want || hasControl(got) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// End to end: a driver whose Run error holds a newline, a PASS line and
// escape sequences gets one FAIL line, escaped, and no forged PASS.
func TestConformanceHostileDriverText(t *testing.T) {
	drv := buildTestDriver(t, "./testdata/hostiledriver")
	code, out, _ := runConf(t, "--driver", drv, "--run", `^exec/stdin-small$`)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 1 || len(lines) != 2 || !strings.HasPrefix(lines[0], "FAIL exec/stdin-small: ") || lines[1] != "0 passed, 1 failed, 0 skipped" {
		t.Fatalf("exit %d, stdout %q; want exit 1, one FAIL line and the counts", code, out)
	}
	if hasControl(out) || !strings.Contains(lines[0], `refused\nPASS forged/case\r\x1b[2J\x1b]0;owned\x07`) {
		t.Errorf("the driver's text is not shown escaped: %q", lines[0])
	}
	// --json keeps the text as the driver sent it (JSON escapes it).
	_, out, _ = runConf(t, "--json", "--driver", drv, "--run", `^exec/stdin-small$`)
	var rep confJSON
	decodeOne(t, out, &rep)
	if len(rep.Cases) != 1 || !strings.Contains(rep.Cases[0].Detail, "\x1b[2J") || hasControl(out) {
		t.Errorf("--json: %q", out)
	}
}
