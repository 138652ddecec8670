// Package winnames holds the rules for Windows file-name components that
// Windows does not read as their text: a check on the text (a protected
// entry, a link on the way) would pass what Win32 then maps elsewhere
// (`.git.` opens .git, `.git::$INDEX_ALLOCATION` is the directory .git,
// `NUL.txt` is the null device, `GIT~1` may be .git's 8.3 alias). The
// class is the one of BatBadBut (CVE-2024-24576): checks on the string
// miss what the OS does with it.
//
// The files API (core/wsfs, on os.Root) and the AppContainer driver (its
// path planning) refuse the same names by these rules. They are pure
// functions, tested on every platform.
package winnames

import "strings"

// Problem is why Windows would not read component c as its text, or "":
// a trailing dot or space (stripped), a colon (a stream or stream type),
// a wildcard or a character not valid in a name, a DOS device name, a
// control character. An 8.3 short-name shape is not one of them: whether
// to refuse it depends on the use (IsShortName).
func Problem(c string) string {
	switch {
	case strings.HasSuffix(c, ".") || strings.HasSuffix(c, " "):
		return "ends in a dot or a space, which Windows strips (so it names another entry: \".git.\" is .git)"
	case strings.ContainsRune(c, ':'):
		return "contains ':', which names an alternate data stream or stream type on Windows (\".git::$INDEX_ALLOCATION\" is .git)"
	case strings.ContainsAny(c, `<>"|?*`):
		return "contains a wildcard or a character not valid in a Windows file name"
	case IsDevice(c):
		return "is a DOS device name (CON, NUL, COM1...), which Windows opens as the device"
	}
	for _, r := range c {
		if r < 0x20 {
			return "contains a control character, not valid in a Windows file name"
		}
	}
	return ""
}

// IsDevice reports whether c names a DOS device, which Win32 maps to the
// device whatever the directory and whatever extension follows (Windows
// 11 stopped reserving some names with an extension; refusing them all is
// the safe side on every version).
func IsDevice(c string) bool {
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

// IsShortName reports whether c has the shape of an 8.3 alias: at most
// eight characters of base ending in ~ and digits, and an extension of at
// most three (GIT~1, PROGRA~1, SCRIPT~2.BAT). Whether it really is one
// depends on the volume (8.3 names can be off) and on what else the
// directory holds; a caller refuses a name of that shape whatever it is.
func IsShortName(c string) bool {
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
