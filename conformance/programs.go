package conformance

import (
	"github.com/aleph-sandbox/aleph-sandbox/conformance/internal/probe"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// programs is what the cases run on one OS, in one place so a port to
// another OS changes only programsFor.
//
// Every case runs the probe (conformance/internal/probe), a Go program the
// suite copies into the case's workspace: the same code on every OS, with
// no shell or interpreter between the suite and the system calls it
// tests. POSIX hosts keep /bin/sh and perl for the few cases that are about
// them or that a Go program cannot do (see posixOnly).
type programs struct {
	goos string
	// probeName is the probe's file name in the workspace.
	probeName string
	// sh and perl are empty on Windows.
	sh, perl string
	// env is the environment commands get unless a case says otherwise.
	env []driverapi.EnvVar
	// unusualDir is a workspace directory name made of characters that
	// break naive quoting and are legal in a file name on this OS.
	unusualDir string
}

// posixOnly are the reasons a case needs a POSIX host, for Case.OSReason.
const (
	whyShell = "the case is about #! scripts and shell forks, which exist only on POSIX hosts"
	whySig   = "POSIX signals do not exist on Windows (a Job Object ends its processes with an exit code)"
)

// windowsSystemRoot is used when the host's SystemRoot is not set.
const windowsSystemRoot = `C:\Windows`

// programsFor returns the table for goos; getenv reads the host's
// environment (Windows commands need SystemRoot for Winsock).
func programsFor(goos string, getenv func(string) string) programs {
	if goos == "windows" {
		root := getenv("SystemRoot")
		if root == "" {
			root = windowsSystemRoot
		}
		return programs{
			goos:      goos,
			probeName: probe.Magic + ".exe",
			env: []driverapi.EnvVar{
				{Name: "PATH", Value: root + `\System32;` + root},
				{Name: "SystemRoot", Value: root},
			},
			// No quotes, colons, stars or angle brackets: Windows refuses
			// them in names.
			unusualDir: "wörk space 'q' $x;(1) & ^%!",
		}
	}
	return programs{
		goos:      goos,
		probeName: probe.Magic,
		sh:        "/bin/sh",
		perl:      "/usr/bin/perl", // memory and fork limits: see caseMemory and casePids
		env: []driverapi.EnvVar{
			{Name: "PATH", Value: "/usr/local/bin:/usr/bin:/bin"},
			{Name: "LC_ALL", Value: "C"},
		},
		unusualDir: "wörk space 'q' \"dq\" $x;(1)",
	}
}

// posix reports whether the table is for a POSIX host.
func (p programs) posix() bool { return p.goos != "windows" }

// OS scopes of a case (Case.OS).
const (
	// AllOS: the case runs everywhere.
	AllOS = ""
	// POSIXOnly: every OS but Windows.
	POSIXOnly = "posix"
	// LinuxOnly: Linux hosts only.
	LinuxOnly = "linux"
	// WindowsOnly: Windows hosts only.
	WindowsOnly = "windows"
)

// osSkip says why c does not run on goos ("" when it does).
func osSkip(c Case, goos string) string {
	switch c.OS {
	case POSIXOnly:
		if goos == "windows" {
			return "not applicable on windows: " + c.OSReason
		}
	case LinuxOnly:
		if goos != "linux" {
			return "not applicable on " + goos + ": " + c.OSReason
		}
	case WindowsOnly:
		if goos != "windows" {
			return "not applicable on " + goos + ": " + c.OSReason
		}
	}
	return ""
}
