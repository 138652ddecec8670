package wsfs

import (
	"fmt"

	"github.com/aleph-sandbox/aleph-sandbox/internal/winnames"
)

// Windows opens something other than a name's text in several cases, so a
// check on the text (a protected entry, a link on the way) would pass what
// Windows then maps elsewhere: `.git.` opens .git. os.Root refuses some of
// these itself (a colon, a device name, a `?`: its path cleaning goes
// through GetFullPathNameW and filepath.IsLocal), but it strips trailing
// dots and spaces like any Win32 path and the file system resolves 8.3
// short names, so wsfs refuses the whole class itself, before anything is
// opened, and says which rule a name broke.
//
// The rules are internal/winnames' (the AppContainer driver's too).

// winNameProblem is why Windows would not read component c as its text,
// or "" (winnames.Problem). mutating is true for a write or a remove,
// where an 8.3 short name is refused as well (GIT~1 may be .git, which is
// never written; a read of it is harmless, as reading .git is allowed).
func winNameProblem(c string, mutating bool) string {
	if why := winnames.Problem(c); why != "" {
		return why
	}
	if mutating && winnames.IsShortName(c) {
		return "has the shape of an 8.3 short name (NAME~1.EXT), which Windows may resolve to another entry's long name, a protected one included; give the long name"
	}
	return ""
}

// checkWinNames refuses comps when one of them is not read by Windows as
// its text (winNameProblem), as an invalid path.
func checkWinNames(op, p string, comps []string, mutating bool) error {
	for _, c := range comps {
		if why := winNameProblem(c, mutating); why != "" {
			return &Error{Op: op, Path: p, Code: CodeInvalid, Field: "path", Reason: fmt.Sprintf("component %q %s", c, why)}
		}
	}
	return nil
}
