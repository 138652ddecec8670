package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/conformance"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/pluginhost"
)

// runConformance runs the driver conformance suite against one driver
// binary: one line per case, a closing count, exit 0 only when nothing
// failed. With --json it prints exactly one object whatever happens, so a
// CI job parsing it never reads empty output: an error that ends the run
// early fills error and error_code (exit 125).
func runConformance(ctx context.Context, args []string, io stdio) int {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	driver := fs.String("driver", "", "driver `NAME|PATH`: a name (bwrap → aleph-driver-bwrap) or the path of a driver binary")
	junit := fs.String("junit", "", "also write a JUnit XML report to `FILE`")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the case lines (errors included)")
	run := fs.String("run", "", "run only the cases whose id matches `REGEXP`")
	list := fs.Bool("list", false, "list the cases (id, level, feature) without running them")
	caseTimeout := fs.Duration("case-timeout", 60*time.Second, "bound each case by `DURATION` (the cases that run many commands scale it by the driver's own pace, up to 10 times)")
	config := fs.String("config", "", "TOML config `FILE` whose section for the driver ([sandbox.linux] or [sandbox.windows] for this project's drivers, [sandbox.drivers.NAME] for aleph-driver-NAME) is passed to it as ALEPH_DRIVER_OPTIONS, as exec does")
	const usageLine = "aleph-sandbox conformance --driver NAME|PATH [--junit FILE] [--json] [--run REGEXP]"
	// failure ends the command with msg: the one refusal line, or with
	// --json the report so far with error and error_code set.
	failure := func(code string, rep conformance.Report, msg string) int {
		msg = oneLine("conformance: " + msg)
		if *asJSON {
			writeConformanceJSON(io.Out, rep, code, msg)
			return exitSandboxError
		}
		return fail(io.Err, "%s", msg)
	}
	if help, err := parseFlagsQuiet(fs, args, io, usageLine); help {
		return 0
	} else if err != nil {
		// The flags did not parse, so --json is read off the arguments.
		*asJSON = jsonRequested(args)
		return failure(confErrInvalid, conformance.Report{}, fmt.Sprintf("%v (usage: %s)", err, usageLine))
	}
	if fs.NArg() > 0 {
		return failure(confErrInvalid, conformance.Report{}, fmt.Sprintf("unexpected argument %q (usage: %s)", fs.Arg(0), usageLine))
	}
	if *caseTimeout <= 0 {
		return failure(confErrInvalid, conformance.Report{}, fmt.Sprintf("--case-timeout %s: give a positive duration, such as 60s or 5m", *caseTimeout))
	}
	re, err := runFilter(*run)
	if *list {
		if err != nil {
			return failure(confErrInvalid, conformance.Report{}, err.Error())
		}
		return listCases(io.Out, re, *asJSON)
	}
	if err != nil {
		return failure(confErrInvalid, conformance.Report{Driver: *driver}, err.Error())
	}
	path, _, err := pluginhost.FindDriver(*driver, nil)
	if err != nil {
		return failure(confErrDriver, conformance.Report{Driver: *driver}, err.Error())
	}
	cfg := conformance.Config{DriverPath: path, Run: re, CaseTimeout: *caseTimeout}
	if *config != "" {
		// Without --config the driver runs on its own defaults.
		c, err := core.LoadConfig(*config)
		if err != nil {
			return failure(confErrInvalid, conformance.Report{Driver: path}, err.Error())
		}
		cfg.Env = []string{"ALEPH_DRIVER_OPTIONS=" + string(c.DriverOptionsFor(path, runtime.GOOS))}
		cfg.SHA256 = driverPin(c, path)
	}
	if !*asJSON {
		cfg.Progress = func(r conformance.Result) { fmt.Fprintln(io.Out, caseLine(r)) }
	}
	rep, err := conformance.RunSuite(ctx, cfg)
	rep.Driver = path
	// The package's errors say "conformance: " already.
	why := strings.TrimPrefix(fmt.Sprint(err), "conformance: ")
	var ce *conformance.ConfigError
	var le *conformance.LaunchError
	switch {
	case errors.As(err, &le):
		// One error for the run: every case would fail for this reason.
		// First: a driver that refuses its configuration at launch is a
		// driver error here, though it is also a *ConfigError.
		return failure(confErrDriver, rep, why)
	case errors.As(err, &ce):
		return failure(confErrInvalid, rep, why)
	case err != nil && ctx.Err() != nil:
		return failure(confErrInterrupted, rep, fmt.Sprintf("interrupted after %d cases: %s", len(rep.Results), why))
	case err != nil:
		return failure(confErrDriver, rep, why)
	}
	if *junit != "" {
		if err := writeJUnit(*junit, rep); err != nil {
			return failure(confErrReport, rep, fmt.Sprintf("writing %s: %v", *junit, err))
		}
	}
	if *asJSON {
		writeConformanceJSON(io.Out, rep, "", "")
	} else {
		fmt.Fprintf(io.Out, "%d passed, %d failed, %d skipped\n", rep.Passed, rep.Failed, rep.Skipped)
	}
	if rep.Failed > 0 {
		return 1
	}
	return 0
}

// The error_code values of conformance --json: what kind of error ended
// the run before it could report on every case.
const (
	// confErrInvalid: the command line or the configuration it names
	// (flags, arguments, --run, --config FILE).
	confErrInvalid = "invalid_config"
	// confErrDriver: the driver was not found or did not start.
	confErrDriver = "driver_launch"
	// confErrReport: the run completed but --junit FILE could not be written.
	confErrReport = "report_write"
	// confErrInterrupted: a signal ended the run part-way.
	confErrInterrupted = "interrupted"
)

// listCases prints the cases re selects (all for nil): id, level and
// feature per line, or with asJSON one object listing them.
func listCases(w io.Writer, re *regexp.Regexp, asJSON bool) int {
	type listedCase struct {
		ID          string `json:"id"`
		Level       string `json:"level"`
		Feature     string `json:"feature"`
		OS          string `json:"os"`
		Description string `json:"description"`
	}
	out := struct {
		Cases     []listedCase `json:"cases"`
		Error     string       `json:"error"`
		ErrorCode string       `json:"error_code"`
	}{Cases: []listedCase{}}
	for _, c := range conformance.Cases() {
		if re != nil && !re.MatchString(c.ID) {
			continue
		}
		if !asJSON {
			fmt.Fprintf(w, "%s\t%s\t%s\n", c.ID, c.Level, c.Feature)
			continue
		}
		where := c.OS
		if where == conformance.AllOS {
			where = "all"
		}
		out.Cases = append(out.Cases, listedCase{ID: c.ID, Level: string(c.Level), Feature: c.Feature, OS: where, Description: c.Description})
	}
	if asJSON {
		writeIndentedJSON(w, out)
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

// caseLine is one case's line of the text report. The detail carries
// text from the driver (its error messages), which must not be able to
// end the line and forge another ("\nPASS x") or drive the terminal: it is
// printed with control characters escaped.
func caseLine(r conformance.Result) string {
	switch r.Status {
	case conformance.Pass:
		return "PASS " + r.ID
	case conformance.Fail:
		return fmt.Sprintf("FAIL %s: %s", r.ID, escapeControls(r.Detail))
	}
	return fmt.Sprintf("SKIP %s: %s", r.ID, escapeControls(r.Detail))
}

// conformanceJSON is the --json shape fixed by the command-line contract,
// with error and error_code added.
type conformanceJSON struct {
	Driver  string     `json:"driver"`
	Backend string     `json:"backend"`
	Cases   []caseJSON `json:"cases"`
	Passed  int        `json:"passed"`
	Failed  int        `json:"failed"`
	Skipped int        `json:"skipped"`
	// Error is why the run ended before reporting on every case (the
	// line printed on stderr without --json), "" when it did not.
	Error string `json:"error"`
	// ErrorCode is Error's kind (confErr*), for scripts to branch on.
	ErrorCode string `json:"error_code"`
}

type caseJSON struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Detail string `json:"detail"`
	Level  string `json:"level"`
}

func writeConformanceJSON(w io.Writer, rep conformance.Report, code, msg string) {
	out := conformanceJSON{Driver: rep.Driver, Backend: rep.Backend, Cases: []caseJSON{},
		Passed: rep.Passed, Failed: rep.Failed, Skipped: rep.Skipped, Error: msg, ErrorCode: code}
	for _, r := range rep.Results {
		out.Cases = append(out.Cases, caseJSON{ID: r.ID, Status: string(r.Status), Detail: r.Detail, Level: string(r.Level)})
	}
	writeIndentedJSON(w, out)
}

// writeIndentedJSON writes v as indented JSON. The values here (strings,
// numbers, slices of them) always encode, and a write error has nowhere
// better to be reported than the stream that failed.
func writeIndentedJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
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
