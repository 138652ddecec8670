package termsafe

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Escape shows s with every character that prints nothing of its own
// written as a visible escape: control characters (C0, DEL, C1), bidi
// overrides and isolates, zero-width and other format characters, the
// line and paragraph separators, spaces other than the ASCII one, and
// bytes that are not UTF-8. It is for text shown to a person who decides
// on it (a question, a refusal): a bidi override reorders what follows it
// on the line, a newline adds a line of its own, and a no-break space
// passes for a word break, so any of them lets text read as something it
// is not.
func Escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case !unicode.IsPrint(r):
			switch {
			case r < 0x80:
				fmt.Fprintf(&b, `\x%02x`, r)
			case r <= 0xffff:
				fmt.Fprintf(&b, `\u%04x`, r)
			default:
				fmt.Fprintf(&b, `\U%08x`, r)
			}
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// CommandLine is program and args as a question shows them: each word as
// it is when it is plain, quoted (Go syntax) when it is empty or holds
// spaces, quotes, backslashes or characters Escape would change, the whole
// cut between characters at max bytes with "..." after it.
func CommandLine(program string, args []string, max int) string {
	var b strings.Builder
	for i, w := range append([]string{program}, args...) {
		if i > 0 {
			b.WriteByte(' ')
		}
		if w == "" || strings.ContainsAny(w, " \t'\"\\") || Escape(w) != w {
			w = strconv.Quote(w)
		}
		b.WriteString(w)
		if b.Len() > max {
			s, cut := b.String(), max
			for cut > 0 && !utf8.RuneStart(s[cut]) {
				cut--
			}
			return s[:cut] + "..."
		}
	}
	return b.String()
}
