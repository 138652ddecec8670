package appcontainer

import (
	"fmt"
	"path"
	"strings"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/internal/winnames"
)

// Windows paths are handled here by hand, not with path/filepath, so the
// planning code means the same thing when its tests run on Linux.

// winVolume splits off `C:` or `\\server\share` and reports whether the
// rest is rooted.
func winVolume(p string) (vol, rest string, ok bool) {
	p = strings.ReplaceAll(p, "/", `\`)
	switch {
	case strings.HasPrefix(p, `\\?\`) || strings.HasPrefix(p, `\\.\`):
		return "", "", false // device and verbatim paths are refused
	case len(p) >= 3 && isLetter(p[0]) && p[1] == ':' && p[2] == '\\':
		return strings.ToUpper(p[:1]) + ":", p[2:], true
	case strings.HasPrefix(p, `\\`):
		parts := strings.SplitN(p[2:], `\`, 3)
		if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
			return "", "", false
		}
		rest := `\`
		if len(parts) == 3 {
			rest += parts[2]
		}
		return `\\` + parts[0] + `\` + parts[1], rest, true
	}
	return "", "", false
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// WinIsAbs reports whether p is a fully qualified drive or UNC path.
func WinIsAbs(p string) bool {
	_, _, ok := winVolume(p)
	return ok && !strings.ContainsRune(p, 0)
}

// WinClean normalises an absolute Windows path: backslashes, no `.` or
// `..` elements, no trailing separator (except a drive root). It returns
// "" for a path that is not absolute.
func WinClean(p string) string {
	vol, rest, ok := winVolume(p)
	if !ok {
		return ""
	}
	c := path.Clean(strings.ReplaceAll(rest, `\`, "/"))
	return vol + strings.ReplaceAll(c, "/", `\`)
}

// WinJoin appends a relative element.
func WinJoin(dir, elem string) string {
	if strings.HasSuffix(dir, `\`) {
		return dir + elem
	}
	return dir + `\` + elem
}

// WinWithin reports whether p equals root or lies below it, comparing
// case-insensitively (as NTFS does by default) and by whole components.
func WinWithin(p, root string) bool {
	p, root = strings.ToLower(WinClean(p)), strings.ToLower(WinClean(root))
	if p == "" || root == "" {
		return false
	}
	if p == root {
		return true
	}
	if !strings.HasSuffix(root, `\`) {
		root += `\`
	}
	return strings.HasPrefix(p, root)
}

// winIsRoot reports whether p is a drive or share root.
func winIsRoot(p string) bool {
	_, rest, ok := winVolume(WinClean(p))
	return ok && rest == `\`
}

// winComponents lists p and each of its ancestors below the volume root,
// from the outermost: C:\a\b -> [C:\a, C:\a\b].
func winComponents(p string) []string {
	vol, rest, ok := winVolume(WinClean(p))
	if !ok {
		return nil
	}
	var out []string
	cur := vol
	for _, e := range strings.Split(strings.Trim(rest, `\`), `\`) {
		if e == "" {
			continue
		}
		cur += `\` + e
		out = append(out, cur)
	}
	return out
}

// LongPather is a file system that can expand 8.3 short names (GIT~1) to
// the long names they stand for, and make a path fully qualified the way
// Win32 does (GetFullPathNameW, GetLongPathNameW). The Windows file system
// implements it; elsewhere no short name can be resolved, so one is refused.
type LongPather interface {
	LongPath(path string) (string, error)
}

// PathError refuses a path that Windows would read as something other
// than what its text says.
type PathError struct {
	Field, Path, Component, Reason string
}

func (e *PathError) Error() string {
	return fmt.Sprintf("%s %q: component %q %s", e.Field, e.Path, e.Component, e.Reason)
}

// IsShortNameAlias reports whether a component has the shape of an 8.3
// alias (winnames.IsShortName).
func IsShortNameAlias(c string) bool { return winnames.IsShortName(c) }

// checkComponent refuses what Win32 path parsing changes or reads
// specially, so that the text compared here is the object opened there:
//   - a trailing dot or space is stripped (`.git.` and `.git ` open .git,
//     `x.bat.` runs a batch file);
//   - a colon starts an alternate data stream or stream type
//     (`.git::$INDEX_ALLOCATION` is the directory .git);
//   - wildcards and control characters are not valid in names;
//   - DOS device names open the device.
//
// The class is the one of BatBadBut (CVE-2024-24576): checks on the
// string miss what the OS does with it.
func checkComponent(c string) string {
	if c == "" {
		return ""
	}
	return winnames.Problem(c)
}

// checkComponents applies checkComponent to every component below the
// volume of a cleaned absolute path, and refuses 8.3 aliases when
// allowShort is false.
func checkComponents(field, raw, p string, allowShort bool) error {
	_, rest, ok := winVolume(p)
	if !ok {
		return &PathError{Field: field, Path: raw, Reason: "is not an absolute Windows path"}
	}
	for _, c := range strings.Split(strings.Trim(rest, `\`), `\`) {
		if why := checkComponent(c); why != "" {
			return &PathError{Field: field, Path: raw, Component: c, Reason: why}
		}
		if !allowShort && IsShortNameAlias(c) {
			return &PathError{Field: field, Path: raw, Component: c,
				Reason: "looks like an 8.3 short name, which could name a protected directory; it could not be resolved to its long name (give the long name)"}
		}
	}
	return nil
}

// ExactPath is CanonicalPath for a path the host hands over already
// resolved (the workspace, a cwd): one that WinClean would change (a "."
// or ".." element, a doubled or trailing separator, a forward slash) is
// refused, not cleaned, since nobody checked the path it cleans to.
func ExactPath(fsys FS, field, raw string) (string, error) {
	if c := WinClean(raw); c != "" && c != raw {
		return "", &driverapi.InvalidSpecError{Field: field, Reason: fmt.Sprintf("%q is not canonical (it cleans to %q): pass the resolved path", raw, c)}
	}
	return CanonicalPath(fsys, field, raw)
}

// CanonicalPath turns a request path into the one form every check here
// compares: absolute, cleaned, with each component as Windows will read
// it. Components Windows would rewrite (trailing dots and spaces, streams,
// devices) are refused, not rewritten, so that a request never means
// something other than what it reads as. When fsys is a LongPather, 8.3
// short names of existing components are expanded; a short-name-shaped
// component that remains (it does not exist, or the file system cannot
// say) is refused.
func CanonicalPath(fsys FS, field, raw string) (string, error) {
	if strings.ContainsRune(raw, 0) {
		return "", &driverapi.InvalidSpecError{Field: field, Reason: "contains a NUL byte"}
	}
	p := WinClean(raw)
	if p == "" {
		return "", &driverapi.InvalidSpecError{Field: field, Reason: fmt.Sprintf("%q is not an absolute Windows path (C:\\... or \\\\server\\share\\...)", raw)}
	}
	if err := checkComponents(field, raw, p, true); err != nil {
		return "", &driverapi.InvalidSpecError{Field: field, Reason: err.Error()}
	}
	if lp, ok := fsys.(LongPather); ok {
		long, err := lp.LongPath(p)
		if err != nil {
			return "", &driverapi.InvalidSpecError{Field: field, Reason: fmt.Sprintf("cannot resolve %q to its long form: %v", raw, err)}
		}
		if p = WinClean(long); p == "" {
			return "", &driverapi.InvalidSpecError{Field: field, Reason: fmt.Sprintf("%q resolves to %q, which is not an absolute path", raw, long)}
		}
		if err := checkComponents(field, raw, p, true); err != nil {
			return "", &driverapi.InvalidSpecError{Field: field, Reason: err.Error()}
		}
	}
	if err := checkComponents(field, raw, p, false); err != nil {
		return "", &driverapi.InvalidSpecError{Field: field, Reason: err.Error()}
	}
	return p, nil
}
