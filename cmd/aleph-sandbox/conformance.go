package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"

	"github.com/aleph-sandbox/aleph-sandbox/conformance"
	"github.com/aleph-sandbox/aleph-sandbox/core"
)

// runConformance runs the driver conformance suite against one driver
// binary: one line per case, a closing count, exit 0 only when nothing
// failed.
func runConformance(ctx context.Context, args []string, io stdio) int {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	driver := fs.String("driver", "", "driver `NAME|PATH`: a name (bwrap → aleph-driver-bwrap) or the path of a driver binary")
	junit := fs.String("junit", "", "also write a JUnit XML report to `FILE`")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the case lines")
	run := fs.String("run", "", "run only the cases whose id matches `REGEXP`")
	list := fs.Bool("list", false, "list the cases (id, level, feature) without running them")
	config := fs.String("config", "", "TOML config `FILE` whose platform section is passed to the driver as ALEPH_DRIVER_OPTIONS, as exec does")
	if done, code := parseFlags(fs, args, io, "aleph-sandbox conformance --driver NAME|PATH [--junit FILE] [--json] [--run REGEXP]"); done {
		return code
	}
	if fs.NArg() > 0 {
		return fail(io.Err, "conformance: unexpected argument %q", fs.Arg(0))
	}
	re, err := runFilter(*run)
	if err != nil {
		return fail(io.Err, "conformance: %s", oneLine(err.Error()))
	}
	if *list {
		for _, c := range conformance.Cases() {
			if re == nil || re.MatchString(c.ID) {
				fmt.Fprintf(io.Out, "%s\t%s\t%s\n", c.ID, c.Level, c.Feature)
			}
		}
		return 0
	}
	path, _, err := core.FindDriver(*driver, nil)
	if err != nil {
		return fail(io.Err, "conformance: %v", err)
	}
	cfg := conformance.Config{DriverPath: path, Run: re}
	if *config != "" {
		// Without --config the driver runs on its own defaults.
		c, err := core.LoadConfig(*config)
		if err != nil {
			return fail(io.Err, "conformance: %v", err)
		}
		cfg.Env = []string{"ALEPH_DRIVER_OPTIONS=" + string(c.DriverOptions(runtime.GOOS))}
		cfg.SHA256 = driverPin(c, path)
	}
	if !*asJSON {
		cfg.Progress = func(r conformance.Result) { fmt.Fprintln(io.Out, caseLine(r)) }
	}
	rep, err := conformance.RunSuite(ctx, cfg)
	if err != nil {
		return fail(io.Err, "conformance: %v", err)
	}
	if *junit != "" {
		if err := writeJUnit(*junit, rep); err != nil {
			return fail(io.Err, "conformance: writing %s: %v", *junit, err)
		}
	}
	if *asJSON {
		if err := writeConformanceJSON(io.Out, rep); err != nil {
			return fail(io.Err, "conformance: %v", err)
		}
	} else {
		fmt.Fprintf(io.Out, "%d passed, %d failed, %d skipped\n", rep.Passed, rep.Failed, rep.Skipped)
	}
	if rep.Failed > 0 {
		return 1
	}
	return 0
}

// runFilter compiles --run. A pattern that is no regular expression, or
// that selects no case, is refused: a CI job whose filter has a typo must
// fail, not pass having run nothing.
func runFilter(pattern string) (*regexp.Regexp, error) {
	if pattern == "" {
		return nil, nil
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("--run %q is not a regular expression (Go RE2 syntax): %w", pattern, err)
	}
	for _, c := range conformance.Cases() {
		if re.MatchString(c.ID) {
			return re, nil
		}
	}
	return nil, fmt.Errorf("--run %q matches no case id; list them with: aleph-sandbox conformance --list", pattern)
}

func caseLine(r conformance.Result) string {
	switch r.Status {
	case conformance.Pass:
		return "PASS " + r.ID
	case conformance.Fail:
		return fmt.Sprintf("FAIL %s: %s", r.ID, r.Detail)
	}
	return fmt.Sprintf("SKIP %s: %s", r.ID, r.Detail)
}

// conformanceJSON is the --json shape fixed by the command-line contract.
type conformanceJSON struct {
	Driver  string     `json:"driver"`
	Backend string     `json:"backend"`
	Cases   []caseJSON `json:"cases"`
	Passed  int        `json:"passed"`
	Failed  int        `json:"failed"`
	Skipped int        `json:"skipped"`
}

type caseJSON struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Detail string `json:"detail"`
	Level  string `json:"level"`
}

func writeConformanceJSON(w io.Writer, rep conformance.Report) error {
	out := conformanceJSON{Driver: rep.Driver, Backend: rep.Backend, Cases: []caseJSON{},
		Passed: rep.Passed, Failed: rep.Failed, Skipped: rep.Skipped}
	for _, r := range rep.Results {
		out.Cases = append(out.Cases, caseJSON{ID: r.ID, Status: string(r.Status), Detail: r.Detail, Level: string(r.Level)})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// JUnit XML as CI systems (GitHub, GitLab, Jenkins) read it.
type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Time     string      `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

func writeJUnit(path string, rep conformance.Report) error {
	s := junitSuite{Name: "aleph-sandbox conformance: " + rep.Backend, Tests: len(rep.Results),
		Failures: rep.Failed, Skipped: rep.Skipped, Time: fmt.Sprintf("%.3f", rep.Duration.Seconds())}
	for _, r := range rep.Results {
		c := junitCase{Name: r.ID, Classname: "conformance." + rep.Backend, Time: fmt.Sprintf("%.3f", r.Duration.Seconds())}
		switch r.Status {
		case conformance.Fail:
			c.Failure = &junitMessage{Message: string(r.Level) + ": " + r.Detail, Text: r.Detail}
		case conformance.Skip:
			c.Skipped = &junitMessage{Message: r.Detail}
		}
		s.Cases = append(s.Cases, c)
	}
	b, err := xml.MarshalIndent(junitSuites{Suites: []junitSuite{s}}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append([]byte(xml.Header), append(b, '\n')...), 0o644)
}
