package wsfs

import (
	"fmt"
	"strings"
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
// These are pure functions: they are tested on every platform.

// winNameProblem is why Windows would not read component c as its text,
// or "". mutating is true for a write or a remove, where an 8.3 short name
// is refused as well (GIT~1 may be .git, which is never written; a read
// of it is harmless, as reading .git is allowed).
func winNameProblem(c string, mutating bool) string {
	switch {
	case strings.HasSuffix(c, ".") || strings.HasSuffix(c, " "):
		return "ends in a dot or a space, which Windows strips (so it names another entry: \".git.\" is .git)"
	case strings.ContainsRune(c, ':'):
		return "contains ':', which names an alternate data stream or stream type on Windows (\".git::$INDEX_ALLOCATION\" is .git)"
	case strings.ContainsAny(c, `<>"|?*`):
		return "contains a wildcard or a character not valid in a Windows file name"
	case winDevice(c):
		return "is a DOS device name (CON, NUL, COM1...), which Windows opens as the device"
	}
	for _, r := range c {
		if r < 0x20 {
			return "contains a control character, not valid in a Windows file name"
		}
	}
	if mutating && winShortName(c) {
		return "has the shape of an 8.3 short name (NAME~1.EXT), which Windows may resolve to another entry's long name, a protected one included; give the long name"
	}
	return ""
}

// winDevice reports whether c names a DOS device, which Win32 maps to the
// device whatever the directory and whatever extension follows (Windows
// 11 stopped reserving some names with an extension; refusing them all is
// the safe side on every version).
func winDevice(c string) bool {
	base := strings.ToUpper(c)
	if i := strings.IndexByte(base, '.'); i >= 0 {
		base = base[:i]
	}
	base = strings.TrimRight(base, " ")
	switch base {
	case "CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$":
		return true
	}
	if strings.HasPrefix(base, "COM") || strings.HasPrefix(base, "LPT") {
		d := base[3:]
		return len(d) == 1 && d[0] >= '0' && d[0] <= '9' || d == "¹" || d == "²" || d == "³"
	}
	return false
}

// winShortName reports whether c has the shape of an 8.3 alias: at most
// eight characters of base ending in ~ and digits, and an extension of at
// most three (GIT~1, PROGRA~1, SCRIPT~2.BAT). Whether it really is one
// depends on the volume (8.3 names can be off) and on what else the
// directory holds; a name of that shape is refused whatever it is.
func winShortName(c string) bool {
	base, ext := c, ""
	if i := strings.LastIndexByte(c, '.'); i > 0 {
		base, ext = c[:i], c[i+1:]
	}
	if len(base) > 8 || len(ext) > 3 {
		return false
	}
	t := strings.LastIndexByte(base, '~')
	if t < 1 || t == len(base)-1 {
		return false
	}
	for _, r := range base[t+1:] {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
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
