package gitimport

import (
	"fmt"
	"strings"
)

// CheckRefFormat applies git's check-ref-format rules to a full ref name
// (refs/heads/main), returning nil or an error saying which rule it broke.
// It is git's own test, written in Go so that a name the session wrote is
// judged before the host's git ever sees it: a name that passes cannot
// step out of refs/ (no "..", no component starting with "."), cannot be
// taken for a revision expression (no "@{", "^", "~", ":"), and cannot
// hide as a lock file.
func CheckRefFormat(name string) error {
	bad := func(why string) error { return fmt.Errorf("invalid ref name %q: %s", name, why) }
	if name == "" {
		return bad("empty")
	}
	if name == "@" {
		return bad(`"@" alone is not a ref name`)
	}
	if strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") {
		return bad("begins or ends with /")
	}
	if strings.HasSuffix(name, ".") {
		return bad("ends with .")
	}
	if !strings.Contains(name, "/") {
		return bad("has no /")
	}
	if strings.Contains(name, "..") {
		return bad(`contains ".."`)
	}
	if strings.Contains(name, "@{") {
		return bad(`contains "@{"`)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c < 0x20 || c == 0x7f:
			return bad("contains a control character")
		case strings.IndexByte(" ~^:?*[\\", c) >= 0:
			return bad(fmt.Sprintf("contains %q", c))
		}
	}
	for _, comp := range strings.Split(name, "/") {
		switch {
		case comp == "":
			return bad("contains //")
		case strings.HasPrefix(comp, "."):
			return bad("a component begins with .")
		case strings.HasSuffix(comp, ".lock"):
			return bad("a component ends with .lock")
		}
	}
	return nil
}
