package appcontainer

import (
	"path"
	"strings"
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
