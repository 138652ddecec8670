package conformance

import (
	"fmt"
	"strings"
)

// Markdown renders the case table as docs/conformance.md. The file in the
// repository is generated from it (go test ./conformance -run
// TestConformanceDoc -update), and a test fails when the two differ, so the
// document cannot drift from the suite.
func Markdown() string {
	var b strings.Builder
	cases := Cases()
	b.WriteString("# Driver conformance cases\n\n")
	b.WriteString("<!-- Generated from the conformance package; do not edit. Regenerate with:\n")
	b.WriteString("     go test ./conformance -run TestConformanceDoc -update -->\n\n")
	fmt.Fprintf(&b, "The suite has %d cases. Run it with `aleph-sandbox conformance --driver NAME|PATH` or, from Go,\n", len(cases))
	b.WriteString("`conformance.Run(t, conformance.Binary(path))`; see [writing-a-driver.md](writing-a-driver.md).\n\n")
	b.WriteString("- **Level**: MUST is required by the contract; SHOULD is expected of every driver. A failing case\n")
	b.WriteString("  of either level is reported as FAIL and makes the run fail.\n")
	b.WriteString("- **Feature**: the `driverapi.Feature*` name the case needs. A driver that does not claim it gets\n")
	b.WriteString("  SKIP with the reason; a driver that claims it is always tested. Cases with no feature run for\n")
	b.WriteString("  every driver.\n")
	b.WriteString("- Every case that proves a denial also proves, in the same case, that the allowed action works\n")
	b.WriteString("  (a positive control), so a driver that refuses everything fails.\n")
	b.WriteString("- **OS**: where the case applies. `posix` cases are SKIPPED on Windows, `linux` cases on every\n")
	b.WriteString("  other OS and `windows` cases on every other OS, each with the reason shown below the table; they\n")
	b.WriteString("  are never counted as passed.\n")
	b.WriteString("- Every case runs the *probe*, a small Go program of the suite (`conformance/probe`, standard library\n")
	b.WriteString("  only), copied into the case's workspace and started from there: the same program on Linux, macOS\n")
	b.WriteString("  and Windows, with no shell or interpreter between the suite and what it tests. A driver must let a\n")
	b.WriteString("  program in the workspace run, and with `spawn_subprocess` let it start itself as a child.\n")
	b.WriteString("  POSIX hosts also need, for the cases that are about them, `/bin/sh` (a #! script in the workspace,\n")
	b.WriteString("  shell forks without `spawn_subprocess`) and `/usr/bin/perl` (memory and fork limits: under\n")
	b.WriteString("  `RLIMIT_AS` or a pids limit that counts threads the Go runtime itself cannot start), and where\n")
	b.WriteString("  present `/usr/bin/python3` (`os.posix_spawn` for `proc/spawn-denied-clone3`).\n")
	b.WriteString("- Cases that plant canaries outside the allowed roots use names drawn afresh for every run and\n")
	b.WriteString("  remove them when the case ends (see writing-a-driver.md for the list of places).\n")
	area := ""
	for _, c := range cases {
		a, _, _ := strings.Cut(c.ID, "/")
		if a != area {
			area = a
			fmt.Fprintf(&b, "\n## %s\n\n", areaTitle(a))
			b.WriteString("| id | level | feature | OS | what passing proves |\n")
			b.WriteString("| --- | --- | --- | --- | --- |\n")
		}
		feat := "—"
		if c.Feature != "" {
			feat = "`" + c.Feature + "`"
		}
		os := "all"
		if c.OS != AllOS {
			os = c.OS
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", c.ID, c.Level, feat, os, strings.ReplaceAll(c.Description, "|", `\|`))
	}
	b.WriteString("\n## Cases that do not run everywhere\n\n")
	runs := map[string]int{}
	for _, c := range cases {
		for _, goos := range []string{"linux", "darwin", "windows"} {
			if osSkip(c, goos) == "" {
				runs[goos]++
			}
		}
	}
	fmt.Fprintf(&b, "Of the %d cases, %d apply on Linux, %d on macOS and %d on Windows; the others are skipped there:\n\n",
		len(cases), runs["linux"], runs["darwin"], runs["windows"])
	for _, c := range cases {
		if c.OS != AllOS {
			fmt.Fprintf(&b, "- `%s` (%s): %s.\n", c.ID, c.OS, c.OSReason)
		}
	}
	return b.String()
}

func areaTitle(a string) string {
	switch a {
	case "protocol":
		return "Protocol"
	case "exec":
		return "Execution"
	case "fs":
		return "Filesystem"
	case "proc":
		return "Processes and output"
	case "net":
		return "Network"
	case "res":
		return "Resource limits"
	case "robust":
		return "Robustness"
	}
	return a
}
