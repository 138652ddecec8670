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
	b.WriteString("- **Call**: an optional call (protocol 1.3's `session_sandbox`, 1.4's `layered_workspace`) shown\n")
	b.WriteString("  beside the feature as `call:NAME`. A driver that does not list it in its capability report gets\n")
	b.WriteString("  SKIP, named.\n")
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
	b.WriteString("- **Budget**: each case must end within `Config.CaseTimeout`, 60 s by default (`aleph-sandbox\n")
	b.WriteString("  conformance --case-timeout`); a case that runs out fails, saying `case exceeded 60s`. The cases that\n")
	b.WriteString("  run many commands (`robust/sequential-200`, `robust/concurrent-16`) are measured against the\n")
	b.WriteString("  driver's own pace instead, so that they test leaks, not speed: their budget is the case budget\n")
	b.WriteString("  plus four times the per-command cost of three warm-up commands for each command, at most ten\n")
	b.WriteString("  times the case budget (a steady driver of up to about 0.7 s a command fits the default). Only the\n")
	b.WriteString("  timeout cases hold a driver to a clock of their own (`proc/timeout-tight`: the timeout plus 2 s).\n")
	b.WriteString("  The suite's own test of this scaling (`TestBudgetScalesWithTheDriver`) runs a driver 150 ms slower\n")
	b.WriteString("  a command twice: first under a 10 minute case budget, to measure how long it takes on this host\n")
	b.WriteString("  now, then under a third of that, which it passes only because its budget follows its pace; the\n")
	b.WriteString("  calibration in the same run keeps the test one of behaviour, not of the host's load.\n")
	area := ""
	for _, c := range cases {
		a, _, _ := strings.Cut(c.ID, "/")
		if a != area {
			area = a
			fmt.Fprintf(&b, "\n## %s\n\n", areaTitle(a))
			b.WriteString("| id | level | feature | OS | what passing proves |\n")
			b.WriteString("| --- | --- | --- | --- | --- |\n")
		}
		var need []string
		if c.Feature != "" {
			need = append(need, "`"+c.Feature+"`")
		}
		if c.Call != "" {
			need = append(need, "`call:"+c.Call+"`")
		}
		feat := "—"
		if len(need) > 0 {
			feat = strings.Join(need, " ")
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
	b.WriteString("\n## Lies a careless driver author makes\n\n")
	b.WriteString("Each line is a small dishonest (or careless) change to an otherwise passing driver, and the case\n")
	b.WriteString("that fails it. The suite's own tests make each change to a test driver (`conformance/testdrivers`:\n")
	b.WriteString("`leaky`, or the real Linux driver through `fakebwrap`) and check that the named case fails it\n")
	b.WriteString("while the honest variant passes (`TestLiesAreCaught`, `TestCPULimitAgainstBaseline`).\n\n")
	b.WriteString("| the lie | caught by |\n| --- | --- |\n")
	for _, l := range carelessLies() {
		ids := make([]string, len(l.cases))
		for i, id := range l.cases {
			ids[i] = "`" + id + "`"
		}
		fmt.Fprintf(&b, "| %s | %s |\n", l.lie, strings.Join(ids, ", "))
	}
	return b.String()
}

// lieDoc is one line of the lies table: what the driver does and the cases
// that fail it (each tested in lies_test.go).
type lieDoc struct {
	lie   string
	cases []string
}

func carelessLies() []lieDoc {
	return []lieDoc{
		{"Cancel or timeout returns at once and kills nothing (process_tree_kill not claimed, so the tree cases skip).", []string{"proc/cancel-kills-command", "proc/timeout-kills-command"}},
		{"Cancel and timeout kill only the direct child (`exec.CommandContext` alone): a background child runs on.", []string{"proc/cancel-kills-command", "proc/timeout-kills-command"}},
		{"The timeout is enforced, but five times too late.", []string{"proc/timeout-tight"}},
		{"An exit status above 128 is read as a death by signal.", []string{"exec/exit-status-not-signal"}},
		{"A descriptor of the driver reaches the command.", []string{"proc/only-std-fds-inherited"}},
		{"The set-id filter checks chmod and forgets fchmod (a descriptor's mode), or the creation mode of open, creat or mknod.", []string{"fs/no-setid-files"}},
		{"The set-id filter checks the set-user-id bit only.", []string{"fs/no-setid-files"}},
		{"cpu_limit is claimed and no cap is set (passing only where the host is too busy to tell).", []string{"res/cpu-limit"}},
		{"The memory limit is an RLIMIT_AS 3.5 times the one asked for.", []string{"res/memory-limit-tight"}},
		{"The memory limit does not cover a memory-backed /tmp.", []string{"res/tmpfs-bounded"}},
		{"The spawn gate denies fork and clone but leaves clone3 open.", []string{"proc/spawn-denied-clone3"}},
		{"The host's root is bound under the sandbox with only a few well-known paths hidden.", []string{"fs/host-canaries-unreadable", "fs/host-canaries-unwritable", "fs/host-homes-invisible"}},
		{"The host's /home is shown read-only.", []string{"fs/host-homes-invisible"}},
		{"Only .git is protected, or only the original four entries of the default protected set.", []string{"fs/protected-existing-readonly", "fs/protected-default-set"}},
		{"Nested repositories and submodule gitfiles are left writable.", []string{"fs/nested-git-readonly"}},
		{"The host's IPC namespace, /dev/shm or /proc is shared.", []string{"proc/host-sysv-ipc-invisible", "fs/host-dev-shm-invisible", "proc/host-processes-invisible"}},
		{"Under allow_hosts any socket family may be opened, AF_UNIX unguarded (the mounts trusted to hide the host's sockets).", []string{"net/allow-hosts-no-unix-sockets"}},
		{"Unix sockets of the command's own are reported (`network.none_unix_sockets = own`) while the seccomp policy still refuses socket(AF_UNIX).", []string{"net/unix-own-sockets"}},
		{"Under network none, socket(AF_UNIX) is let through so that Python's multiprocessing and ssh-agent work, trusting the mounts to hide the host's sockets (a socket the host binds in the workspace or a write grant is reachable by path).", []string{"net/unix-host-socket-unreachable"}},
		{"A layered command runs over the live workspace instead of the session's overlay: it sees its own writes, and so does the host.", []string{"layered/writes-stay-in-layer", "layered/host-view-below"}},
	}
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
	case "session":
		return "Session sandboxes"
	case "layered":
		return "Layered workspaces"
	}
	return a
}
