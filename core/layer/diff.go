package layer

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	udiff "github.com/aymanbagabas/go-udiff"
)

// Git's modes in a diff.
const (
	gitModeFile    = 0o100644
	gitModeExec    = 0o100755
	gitModeSymlink = 0o120000
)

// diffSide is one side of a file's diff.
type diffSide struct {
	exists  bool
	mode    uint32 // git's mode
	content []byte
	binary  bool // named, not diffed
}

// gitMode is git's mode for a regular file (executable when the owner may
// execute it, as git decides) or a symlink.
func gitMode(isLink bool, perm uint32) uint32 {
	switch {
	case isLink:
		return gitModeSymlink
	case perm&0o100 != 0:
		return gitModeExec
	}
	return gitModeFile
}

// isBinary is git's test: a NUL byte in the first 8000 bytes.
func isBinary(b []byte) bool {
	if len(b) > 8000 {
		b = b[:8000]
	}
	return bytes.IndexByte(b, 0) >= 0
}

// quotePath quotes a path as git does (core.quotePath): in double quotes
// with C escapes when it holds a control character, a quote, a backslash
// or a byte over 0x7f.
func quotePath(p string) string {
	need := false
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			need = true
			break
		}
	}
	if !need {
		return p
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch c {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\a':
			b.WriteString(`\a`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\v':
			b.WriteString(`\v`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if c < 0x20 || c >= 0x7f {
				fmt.Fprintf(&b, `\%03o`, c)
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// gitFileDiff is the diff of one path in git's format ("" when nothing
// differs). A change of type between a file and a link is, as in git, a
// deletion followed by an addition.
func gitFileDiff(p string, a, b diffSide) string {
	if a.exists && b.exists && (a.mode == gitModeSymlink) != (b.mode == gitModeSymlink) {
		return gitFileDiff(p, a, diffSide{}) + gitFileDiff(p, diffSide{}, b)
	}
	if !a.exists && !b.exists {
		return ""
	}
	same := a.exists && b.exists && a.mode == b.mode && !a.binary && !b.binary && bytes.Equal(a.content, b.content)
	if same {
		return ""
	}
	an, bn := quotePath("a/"+p), quotePath("b/"+p)
	var w strings.Builder
	fmt.Fprintf(&w, "diff --git %s %s\n", an, bn)
	switch {
	case !a.exists:
		fmt.Fprintf(&w, "new file mode %06o\n", b.mode)
		an = "/dev/null"
	case !b.exists:
		fmt.Fprintf(&w, "deleted file mode %06o\n", a.mode)
		bn = "/dev/null"
	case a.mode != b.mode:
		fmt.Fprintf(&w, "old mode %06o\nnew mode %06o\n", a.mode, b.mode)
	}
	if a.binary || b.binary {
		if !(a.exists && b.exists && bytes.Equal(a.content, b.content) && a.content != nil) {
			fmt.Fprintf(&w, "Binary files %s and %s differ\n", an, bn)
		}
		return w.String()
	}
	if bytes.Equal(a.content, b.content) {
		return w.String() // a mode change, or an empty file added or deleted
	}
	edits := udiff.Lines(string(a.content), string(b.content))
	u, err := udiff.ToUnified(an, bn, string(a.content), edits, udiff.DefaultContextLines)
	if err != nil {
		// Cannot happen: the edits come from these contents.
		fmt.Fprintf(&w, "Binary files %s and %s differ\n", an, bn)
		return w.String()
	}
	w.WriteString(u)
	return w.String()
}

func sortStrings(s []string) { sort.Strings(s) }
