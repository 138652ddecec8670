package commandpolicy

import (
	"encoding/base64"
	"path"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDecodeDepth bounds nested -EncodedCommand expansion; maxDecodes bounds
// how many payloads one text may expand. They keep the work bounded on a
// hostile input; a text that goes past them is not let through unread but
// marked (undecodedMarker) and blocked.
const (
	maxDecodeDepth = 2
	maxDecodes     = 8
)

// undecodedMarker is the line the normaliser appends when a text holds
// -EncodedCommand payloads beyond its bounds: the rule
// win-encoded-command-undecoded blocks on it, so a script hidden past the
// bounds fails closed instead of passing as a mere warning.
const undecodedMarker = "[command policy: encoded payload not decoded]"

// Normalize folds the spellings a shell (sh, cmd.exe or PowerShell) would
// execute exactly like their plain form, so the rules see through them:
//
//   - invisible and zero-width characters are dropped; Unicode spaces, dashes
//     and smart quotes become their ASCII forms (PowerShell accepts them);
//   - line continuations (backslash, caret or backtick before a newline) are
//     joined, and a line ending in a pipe or && joins the next one;
//   - cmd ^ escapes and PowerShell backtick escapes are removed;
//   - quote characters are removed (so "" pairs and 'r”m' splits vanish) and
//     $'\x72\x6d' ANSI-C strings are decoded; ${IFS} becomes a space;
//   - parameter expansions that spell a fixed word are folded: ${VAR-word}
//     and ${VAR:-word} (and =, +) become word, an expansion between two
//     letters of a word (r${x}m) is dropped as if empty, ${VAR} before a
//     non-word character becomes $VAR and PowerShell's ${env:X} $env:X;
//   - simple brace lists are expanded, within a word too (rm -r{,f} / is
//     rm -r -rf /): no nesting, at most 16 items, one list per word, at most
//     four times the bytes replaced;
//   - backslash-escaped characters lose their backslash (\r\m -> rm). As a
//     backslash is also the Windows path separator, a text with backslashes
//     is returned in two views, the POSIX reading then the Windows reading,
//     separated by a newline;
//   - a directory prefix on a command word is dropped when it names a system
//     binary directory (/bin/rm, /usr/bin/rm, C:\Windows\System32\x.exe) and
//     .exe/.com suffixes of command words are removed;
//   - spaces and tabs collapse to one space, and repeated slashes and "."
//     and ".." segments of absolute paths (also after key=, as in dd's of=)
//     are resolved: /usr/../ is /, //dev/./sda is /dev/sda, C:\Windows\..
//     is C:\; below ~ or
//     $HOME they are resolved for a home one level below the root (like
//     /root), so ~/../.. is /;
//   - PowerShell -EncodedCommand (and its prefixes -enc, -e, ...) payloads are
//     decoded (base64 of UTF-16LE), normalised, and appended on new lines;
//     past the bounds (maxDecodes payloads, maxDecodeDepth levels) the
//     undecodedMarker line is appended instead.
//
// The result is for matching only: it is not a command to run.
func Normalize(s string) string { return normalize(s, 0) }

func normalize(s string, depth int) string {
	base := fold(s)
	posix, hints := canonicalHints(unescapeBackslashes(base))
	out := posix
	if win := windowsView(base); win != "" {
		out = posix + "\n" + win
	}
	if derived := derivedViews(posix, hints); derived != "" {
		out += "\n" + derived
	}
	payloads, complete := encodedPayloads(base, depth)
	for _, payload := range payloads {
		out += "\n" + normalize(payload, depth+1)
	}
	if !complete {
		out += "\n" + undecodedMarker
	}
	return out
}

// lowerASCII folds ASCII upper case, allocating only when there is some.
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				b[j] = foldByte(b[j])
			}
			return string(b)
		}
	}
	return s
}

// windowsView is the Windows reading of the lines that hold a backslash
// (where it differs from their POSIX reading); the other lines read the
// same both ways and are not repeated.
func windowsView(base string) string {
	if strings.IndexByte(base, '\\') < 0 {
		return ""
	}
	var b strings.Builder
	for rest := base; rest != ""; {
		line, next, _ := strings.Cut(rest, "\n")
		rest = next
		if strings.IndexByte(line, '\\') < 0 {
			continue
		}
		win := canonical(line)
		if win == canonical(unescapeBackslashes(line)) {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(win)
	}
	return b.String()
}

// invisible reports runes that render as nothing and that shells either
// ignore or treat as part of a word: zero-width, bidi controls, soft hyphen,
// other format characters and C0/C1 controls except tab and newline.
func invisible(r rune) bool {
	switch {
	case r == '\t' || r == '\n' || r == '\r':
		return false
	case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
		return true
	case r == 0x00ad, r == 0x034f, r == 0x061c, r == 0x115f, r == 0x1160, r == 0x17b4, r == 0x17b5,
		r == 0x180e, r == 0x3164, r == 0xffa0:
		return true
	case r >= 0x200b && r <= 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2060 && r <= 0x206f,
		r == 0xfeff, r >= 0xfe00 && r <= 0xfe0f, r >= 0xfff0 && r <= 0xfffb:
		return true
	}
	return unicode.Is(unicode.Cf, r)
}

// foldRune maps look-alike runes to the ASCII rune PowerShell (or a terminal
// reader) takes them for; -1 means "keep r".
func foldRune(r rune) rune {
	switch {
	case r == 0x00a0 || r == 0x1680 || (r >= 0x2000 && r <= 0x200a) || r == 0x202f || r == 0x205f || r == 0x3000:
		return ' '
	case (r >= 0x2010 && r <= 0x2015) || r == 0x2212 || r == 0xfe63 || r == 0xff0d:
		return '-'
	case r >= 0x2018 && r <= 0x201b:
		return '\''
	case r >= 0x201c && r <= 0x201f:
		return '"'
	case r == 0x212a:
		return 'k'
	case r == 0x017f:
		return 's'
	case r >= 0xff01 && r <= 0xff5e: // full-width ASCII
		return r - 0xfee0
	}
	return -1
}

// fold is the first pass: character-level folding common to every view.
func fold(s string) string {
	return foldASCII(foldUnicode(s))
}

// foldUnicode drops invisible runes and maps look-alikes to ASCII. Text that
// is already ASCII is returned as is.
func foldUnicode(s string) string {
	if isASCII(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r == utf8.RuneError || invisible(r) {
			continue
		}
		if f := foldRune(r); f >= 0 {
			r = f
		}
		b.WriteRune(r)
	}
	return b.String()
}

// foldASCII removes escapes, continuations and quotes, and folds the
// parameter and brace expansions that spell a fixed word.
func foldASCII(s string) string {
	return string(foldASCIIInto(make([]byte, 0, len(s)), s, 0))
}

// foldASCIIInto appends the folding of s to b; depth counts the enclosing
// ${VAR:-word} expansions.
func foldASCIIInto(b []byte, s string, depth int) []byte {
	// A word holds at most one brace expansion (the rest of the word is
	// copied as is), so the output stays linear in the input.
	braceFloor := len(b)
	for i := 0; i < len(s); {
		// Copy the run of ordinary bytes in one go.
		j := i
		for j < len(s) && !foldSpecial[s[j]] {
			j++
		}
		if j > i {
			b = append(b, s[i:j]...)
			i = j
			if i >= len(s) {
				break
			}
		}
		c := s[i]
		next := byte(0)
		if i+1 < len(s) {
			next = s[i+1]
		}
		switch {
		case c == '\r':
			if next != '\n' {
				b = append(b, '\n')
			}
			i++
		case c == '\t' || c == '\v' || c == '\f':
			b = append(b, ' ')
			i++
		case c < 0x20 && c != '\n' || c == 0x7f:
			i++
		case (c == '^' || c == '`' || c == '\\') && (next == '\n' || next == '\r'):
			// Line continuation in cmd, PowerShell and sh respectively.
			i += 2
			if next == '\r' && i < len(s) && s[i] == '\n' {
				i++
			}
		case c == '^' || c == '`':
			// cmd and PowerShell escapes; a POSIX backquote substitution
			// runs its content, which therefore stays visible.
			i++
		case c == '$' && next == '\'':
			j, decoded := ansiC(s, i+2)
			b = append(b, foldUnicode(decoded)...)
			i = j
		case c == '\'' || c == '"':
			// 'Format-'+'Volume' (PowerShell string concatenation) reads
			// as one word: a closing quote, +, and an opening quote vanish.
			if j := concatEnd(s, i); j > i {
				i = j
				continue
			}
			i++
		case c == '{':
			// Brace expansion: {rm,-rf,/} runs "rm -rf /", rm -r{,f} /
			// runs "rm -r -rf /".
			if j, out, ok := braceExpand(b, s, i, braceFloor); ok {
				b, i, braceFloor = out, j, len(out)
				continue
			}
			// Not a list bash expands: neither is a list inside it
			// ({a,{b,c}} is left as it is).
			b = append(b, c)
			braceFloor = len(b) + 1
			i++
		case c == '$' && strings.HasPrefix(s[i:], "${IFS}"):
			b = append(b, ' ')
			i += len("${IFS}")
		case c == '$' && next == '{':
			if j, out, ok := foldParam(b, s, i, depth); ok {
				b, i = out, j
				continue
			}
			b = append(b, c)
			i++
		case c == '$' && strings.HasPrefix(s[i:], "$IFS") && (i+4 >= len(s) || !isWordByte(s[i+4])):
			b = append(b, ' ')
			i += len("$IFS")
		case c == '$' && endsInLetter(b):
			// r$x"m", r$@m: an expansion (empty when unset) between the
			// letters of a word.
			if j := emptyBetweenLetters(s, i); j > i {
				i = j
				continue
			}
			b = append(b, c)
			i++
		default:
			b = append(b, c)
			i++
		}
	}
	return b
}

// Bounds of the expansions foldASCII reads: bytes of a brace word or
// ${VAR:-word} word, items of a brace list, nesting of ${VAR:-word}.
const (
	maxExpansionBytes = 256
	maxBraceItems     = 16
	maxParamDepth     = 16
)

func isLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

func endsInLetter(b []byte) bool { return len(b) > 0 && isLetter(b[len(b)-1]) }

// paramName returns the end of a shell parameter name at s[i]: an
// identifier, or one of the special parameters 1-9, @ and *; i when there
// is none.
func paramName(s string, i int) int {
	if i >= len(s) {
		return i
	}
	switch c := s[i]; {
	case c == '_' || isLetter(c):
		j := i + 1
		for j < len(s) && isWordByte(s[j]) {
			j++
		}
		return j
	case c >= '1' && c <= '9' || c == '@' || c == '*':
		return i + 1
	}
	return i
}

// emptyBetweenLetters: at s[i] = '$' just after a letter, the end of an
// unbraced expansion that the next character (a letter, a quote or a
// backslash) separates from the rest of the word; i when there is none.
func emptyBetweenLetters(s string, i int) int {
	j := paramName(s, i+1)
	if j == i+1 || j >= len(s) {
		return i
	}
	switch c := s[j]; {
	case c == '\'' || c == '"' || c == '\\':
		return j
	case isLetter(c) && !isWordByte(s[j-1]):
		// $@m, $*m, $1m: a special parameter ends at one character.
		return j
	}
	return i
}

// foldParam folds a ${...} expansion at s[i]:
//   - ${VAR-word}, ${VAR:-word} (and =, :=, +, :+) become word, folded:
//     the value when VAR is unset (or set, for +), which the text cannot
//     rule out;
//   - ${VAR} between two letters of a word (r${x}m) is dropped, as when VAR
//     is empty; before a non-word character it becomes $VAR;
//   - PowerShell's ${env:NAME} becomes $env:NAME.
//
// Anything else (${VAR:0:1}, ${#VAR}, ...) is left as it is (ok false).
func foldParam(b []byte, s string, i, depth int) (int, []byte, bool) {
	k := paramName(s, i+2)
	if k == i+2 || k >= len(s) {
		return i, b, false
	}
	name := s[i+2 : k]
	switch c := s[k]; {
	case c == '}':
		after := byte(0)
		if k+1 < len(s) {
			after = s[k+1]
		}
		switch {
		case endsInLetter(b) && (isLetter(after) || after == '\'' || after == '"' || after == '\\'):
			return k + 1, b, true
		case !isWordByte(after):
			b = append(append(b, '$'), name...)
			return k + 1, b, true
		}
		return i, b, false
	case c == ':' && strings.EqualFold(name, "env"):
		m := k + 1
		for m < len(s) && isWordByte(s[m]) {
			m++
		}
		if m == k+1 || m >= len(s) || s[m] != '}' {
			return i, b, false
		}
		b = append(append(b, "$env:"...), s[k+1:m]...)
		return m + 1, b, true
	}
	m := k
	if s[m] == ':' {
		m++
	}
	if m >= len(s) || (s[m] != '-' && s[m] != '=' && s[m] != '+') {
		return i, b, false
	}
	m++
	// The word runs to the matching brace, on the same line.
	open := 1
	for w := m; w < len(s) && w-m <= maxExpansionBytes; w++ {
		switch s[w] {
		case '{':
			open++
		case '}':
			if open--; open == 0 {
				if depth >= maxParamDepth {
					return w + 1, append(b, s[m:w]...), true
				}
				return w + 1, foldASCIIInto(b, s[m:w], depth+1), true
			}
		case '\n':
			return i, b, false
		}
	}
	return i, b, false
}

// braceExpand expands a brace list at s[i] within its word, as bash does:
// pre{a,b}post is "prea preb" with post appended to each (the word so far,
// already in b, is the prefix). Only simple lists are read: no nesting, no
// blanks or escapes inside, at most maxBraceItems items, and the expansion
// at most four times the bytes it replaces; the suffix stops at anything
// that needs folding first. ok is false when there is no such list.
func braceExpand(b []byte, s string, i, floor int) (int, []byte, bool) {
	p := len(b)
	for p > 0 && !tokenEnd[b[p-1]] {
		p--
	}
	if p < floor || len(b)-p > maxExpansionBytes || (p < len(b) && b[len(b)-1] == '$') {
		return i, b, false
	}
	var items []string
	var item []byte
	end := -1
	for k := i + 1; k < len(s) && k-i <= maxExpansionBytes; k++ {
		c := s[k]
		if c == '}' {
			end = k
			break
		}
		switch {
		case c == ',':
			items = append(items, string(item))
			item = item[:0]
		case c == '\'' || c == '"':
			// bash removes the quotes of each item.
		case tokenEnd[c] || foldSpecial[c]:
			return i, b, false
		default:
			item = append(item, c)
		}
	}
	if end < 0 || len(items) == 0 || len(items) >= maxBraceItems {
		return i, b, false
	}
	items = append(items, string(item))
	e := end + 1
	for e < len(s) && e-end <= maxExpansionBytes && !tokenEnd[s[e]] && !foldSpecial[s[e]] {
		e++
	}
	prefix, suffix := string(b[p:]), s[end+1:e]
	size := len(items) - 1
	for _, it := range items {
		size += len(prefix) + len(it) + len(suffix)
	}
	if size > 4*(len(prefix)+e-i) {
		return i, b, false
	}
	b = b[:p]
	for n, it := range items {
		if n > 0 {
			b = append(b, ' ')
		}
		b = append(append(append(b, prefix...), it...), suffix...)
	}
	return e, b, true
}

// foldSpecial marks the bytes foldASCII does something with.
var foldSpecial = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = c != '\n'
	}
	for _, c := range "\x7f^`\\$'\"{" {
		t[c] = true
	}
	return t
}()

// concatEnd: at a quote that closes a string followed by + and an opening
// quote (blanks allowed), the index just past the opening quote; else i.
func concatEnd(s string, i int) int {
	j := i + 1
	for j < len(s) && s[j] == ' ' {
		j++
	}
	if j >= len(s) || s[j] != '+' {
		return i
	}
	j++
	for j < len(s) && s[j] == ' ' {
		j++
	}
	if j < len(s) && (s[j] == '\'' || s[j] == '"') {
		return j + 1
	}
	return i
}

func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// ansiC decodes a bash $'...' string starting at s[i] (just past the
// opening quote); it returns the index after the closing quote.
func ansiC(s string, i int) (int, string) {
	var b strings.Builder
	for i < len(s) {
		c := s[i]
		if c == '\'' {
			return i + 1, b.String()
		}
		if c != '\\' || i+1 >= len(s) {
			b.WriteByte(c)
			i++
			continue
		}
		e := s[i+1]
		i += 2
		switch e {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte(' ')
		case 'x':
			v, n := hexVal(s[i:], 2)
			if n == 0 {
				b.WriteString(`\x`)
				continue
			}
			b.WriteByte(byte(v))
			i += n
		case 'u', 'U':
			width := 4
			if e == 'U' {
				width = 8
			}
			v, n := hexVal(s[i:], width)
			if n == 0 {
				b.WriteByte(e)
				continue
			}
			b.WriteRune(rune(v))
			i += n
		case '0', '1', '2', '3', '4', '5', '6', '7':
			v := int(e - '0')
			for k := 0; k < 2 && i < len(s) && s[i] >= '0' && s[i] <= '7'; k++ {
				v = v*8 + int(s[i]-'0')
				i++
			}
			b.WriteByte(byte(v))
		default:
			b.WriteByte(e)
		}
	}
	return i, b.String()
}

func hexVal(s string, max int) (int, int) {
	v, n := 0, 0
	for n < max && n < len(s) {
		c := s[n]
		var d int
		switch {
		case c >= '0' && c <= '9':
			d = int(c - '0')
		case c >= 'a' && c <= 'f':
			d = int(c-'a') + 10
		case c >= 'A' && c <= 'F':
			d = int(c-'A') + 10
		default:
			return v, n
		}
		v = v*16 + d
		n++
	}
	return v, n
}

// unescapeBackslashes is the POSIX reading of backslashes: "\x" is "x".
func unescapeBackslashes(s string) string {
	k := strings.IndexByte(s, '\\')
	if k < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for k >= 0 {
		b.WriteString(s[:k])
		if k+1 < len(s) {
			b.WriteByte(s[k+1])
			s = s[k+2:]
		} else {
			s = ""
		}
		k = strings.IndexByte(s, '\\')
	}
	b.WriteString(s)
	return b.String()
}

// tokenEnd marks the bytes that end a word: blanks and separators.
var tokenEnd = func() (t [256]bool) {
	for _, c := range " ;&|(){}<>\n" {
		t[c] = true
	}
	return t
}()

// inFoldedSet applies set to tok in lower case without allocating.
func inFoldedSet(set func(string) bool, tok string) bool {
	if len(tok) > 16 {
		return false
	}
	var buf [16]byte
	for i := 0; i < len(tok); i++ {
		buf[i] = foldByte(tok[i])
	}
	return set(string(buf[:len(tok)]))
}

func isSep(c byte) bool {
	switch c {
	case ';', '&', '|', '(', ')', '{', '}', '<', '>', '\n':
		return true
	}
	return false
}

// isWrapper reports words that run their argument as a command, so the
// word after them is in command position too (w is lower case).
func isWrapper(w string) bool {
	switch w {
	case "sudo", "doas", "env", "exec", "nohup", "nice", "time", "xargs", "command", "builtin",
		"busybox", "timeout", "watch", "strace", "chroot", "su", "eval", "then", "do", "else", "if",
		"while", "until", "!", "sh", "bash", "zsh", "dash", "ksh", "cmd", "powershell", "pwsh",
		"call", "start", "runas", "ionice", "stdbuf", "setsid", "unbuffer":
		return true
	}
	return false
}

// isRunner reports words that make the next word a command wherever they
// appear (w is lower case).
func isRunner(w string) bool {
	switch w {
	case "-c", "/c", "/k", "-command", "/command", "-exec", "-execdir", "-ok", "-okdir", "xargs":
		return true
	}
	return false
}

// canonical collapses blanks, joins lines continued by a trailing pipe or
// &&, squeezes "( ) {" to "(){", and strips system directory prefixes and
// .exe suffixes from words in command position.
func canonical(s string) string {
	out, _ := canonicalHints(s)
	return out
}

// viewHints are what canonical notices on its way for the derived views
// (see derivedViews), so texts that need neither skip them at no cost.
type viewHints struct {
	// funcDef: a function definition (NAME() or the function keyword).
	funcDef bool
	// cd: a cd, pushd or chdir in command position whose target the cwd
	// view can know: an absolute or home path, or none (the home).
	cd bool
}

// canonicalHints is canonical, also returning its viewHints.
func canonicalHints(s string) (string, viewHints) {
	var hints viewHints
	// cdPending: the last command word was a cd whose target is still to
	// come.
	cdPending := false
	var b strings.Builder
	b.Grow(len(s))
	cmdPos := true
	lastNonSpace := byte('\n')
	pendingSpace := false
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ':
			pendingSpace = true
			i++
			continue
		case c == '\n':
			if cdPending {
				hints.cd, cdPending = true, false
			}
			pendingSpace = false
			if lastNonSpace == '|' || lastNonSpace == '&' {
				pendingSpace = true
			} else if lastNonSpace != '\n' {
				b.WriteByte('\n')
				lastNonSpace = '\n'
			}
			cmdPos = true
			i++
			continue
		}
		if pendingSpace && lastNonSpace != '\n' {
			b.WriteByte(' ')
		}
		pendingSpace = false
		if c == '(' {
			// "( ) {" -> "(){": function definitions in one spelling.
			j := i + 1
			for j < len(s) && s[j] == ' ' {
				j++
			}
			if j < len(s) && s[j] == ')' {
				hints.funcDef = true
				b.WriteString("()")
				k := j + 1
				for k < len(s) && s[k] == ' ' {
					k++
				}
				i = j + 1
				if k < len(s) && s[k] == '{' {
					b.WriteByte('{')
					i = k + 1
				}
				lastNonSpace = s[i-1]
				cmdPos = true
				continue
			}
		}
		if isSep(c) {
			if cdPending {
				hints.cd, cdPending = true, false
			}
			b.WriteByte(c)
			lastNonSpace = c
			cmdPos = c != '<' && c != '>'
			i++
			continue
		}
		j, sep := i, -1
		for j < len(s) && !tokenEnd[s[j]] {
			if c := s[j]; (c == '/' || c == '\\') && sep < 0 {
				sep = j - i
			}
			j++
		}
		tok := s[i:j]
		if sep >= 0 {
			tok = cleanPathToken(tok, sep)
		}
		if cdPending && (len(tok) < 2 || tok[0] != '-') {
			cdPending = false
			if tok[0] == '/' || tok[0] == '~' || strings.HasPrefix(tok, "$HOME") {
				hints.cd = true
			}
		}
		if cmdPos {
			tok = stripCommandPrefix(tok)
			switch len(tok) {
			case 2, 5:
				cdPending = inFoldedSet(isCd, tok)
			case 8:
				hints.funcDef = hints.funcDef || tok == "function"
			}
			cmdPos = strings.HasPrefix(tok, "-") || strings.Contains(tok, "=") || inFoldedSet(isWrapper, tok) || inFoldedSet(isRunner, tok)
		} else {
			// Runners start with '-', '/' or 'x'; skip the lookup otherwise.
			cmdPos = (tok[0] == '-' || tok[0] == '/' || tok[0]|0x20 == 'x') && inFoldedSet(isRunner, tok)
		}
		b.WriteString(tok)
		lastNonSpace = s[j-1]
		i = j
	}
	if cdPending {
		hints.cd = true
	}
	return strings.TrimRight(b.String(), "\n"), hints
}

// cleanPathToken resolves the lexical spellings of an absolute path the
// kernel reads as one file: repeated slashes and "." and ".." segments
// (//dev/sda, /dev/./sda and /dev/../dev/sda are /dev/sda, /usr/../ is /).
// The value of a key=value word (dd's of=/dev//sda) is cleaned the same way,
// and so are Windows paths from a drive root (C:\Windows\.. is C:\).
// k is the index of the first slash or backslash in tok.
func cleanPathToken(tok string, k int) string {
	if tok[k] == '\\' || k == 2 && tok[1] == ':' {
		return cleanWindowsPath(tok, k)
	}
	if !hasDotOrDoubleSlash(tok[k:]) {
		return tok
	}
	switch {
	case k == 0:
		return cleanAbsPath(tok)
	case tok[0] == '~' || tok[0] == '$':
		return cleanHomePath(tok)
	case tok[k-1] == '=' && strings.IndexByte(tok, '=') == k-1:
		return tok[:k] + cleanAbsPath(tok[k:])
	}
	return tok
}

// hasDotOrDoubleSlash reports a slash followed by a slash or a dot: what
// path cleaning may change.
func hasDotOrDoubleSlash(p string) bool {
	for i := 0; i+1 < len(p); i++ {
		if p[i] == '/' && (p[i+1] == '/' || p[i+1] == '.') {
			return true
		}
	}
	return false
}

// cleanWindowsPath resolves "." and ".." segments of a path from the root
// of a drive (C:\x\.., \x\..) with either separator, keeping the first
// separator's kind. UNC and device paths (\\server, \\.\) are left alone.
func cleanWindowsPath(tok string, k int) string {
	root := k
	switch {
	case k == 2 && tok[1] == ':' && isLetter(tok[0]):
	case k == 0 && len(tok) > 1 && tok[1] != '\\' && tok[1] != '/':
	default:
		return tok
	}
	rest := tok[root:]
	if !strings.Contains(rest, ".") {
		return tok
	}
	c := path.Clean(strings.ReplaceAll(rest, `\`, "/"))
	if rest[0] == '\\' {
		c = strings.ReplaceAll(c, "/", `\`)
	}
	return tok[:root] + c
}

func cleanAbsPath(p string) string {
	if len(p) >= 4 && p[1] == '/' && (p[2] == '.' || p[2] == '?') && p[3] == '/' {
		// //./ and //?/ open the Windows device namespace
		// (//./PhysicalDrive0): keep the prefix, clean what follows.
		return p[:3] + path.Clean(p[3:])
	}
	return path.Clean(p)
}

// cleanHomePath resolves dot segments of a path below ~ or $HOME, reading
// the home as one level below the root (like /root): ~/.. and
// $HOME/../../ are the root, ~/../etc is /etc, and ~/a/../b stays ~/b.
func cleanHomePath(tok string) string {
	home := ""
	switch {
	case strings.HasPrefix(tok, "~/"):
		home = "~"
	case strings.HasPrefix(tok, "$HOME/"):
		home = "$HOME"
	default:
		return tok
	}
	rest := tok[len(home):]
	switch c := path.Clean("/h" + rest); {
	case c == "/h":
		return home
	case strings.HasPrefix(c, "/h/"):
		return home + c[2:]
	default:
		return c
	}
}

// stripCommandPrefix drops a system binary directory from a command word and
// a Windows executable suffix.
func stripCommandPrefix(tok string) string {
	k := len(tok) - 1
	for k >= 0 && tok[k] != '/' && tok[k] != '\\' {
		k--
	}
	if k >= 0 && k < len(tok)-1 && systemDir(lowerASCII(tok[:k+1])) {
		tok = tok[k+1:]
		k = -1
	}
	if k < 0 && len(tok) > 4 && tok[len(tok)-4] == '.' {
		if ext := tok[len(tok)-4:]; strings.EqualFold(ext, ".exe") || strings.EqualFold(ext, ".com") {
			tok = tok[:len(tok)-4]
		}
	}
	return tok
}

// systemDir reports whether dir (lower-case, ending in a separator) is a
// directory commands are installed in.
func systemDir(dir string) bool {
	if strings.ContainsRune(dir, '\\') || len(dir) >= 2 && dir[1] == ':' || strings.HasPrefix(dir, "%") || strings.HasPrefix(dir, "$env:") {
		return strings.Contains(dir, `windows`) || strings.Contains(dir, "system32") ||
			strings.Contains(dir, "syswow64") || strings.Contains(dir, "sysnative") ||
			strings.HasPrefix(dir, "%systemroot%") || strings.HasPrefix(dir, "%windir%") ||
			strings.HasPrefix(dir, "$env:systemroot") || strings.HasPrefix(dir, "$env:windir")
	}
	if !strings.HasPrefix(dir, "/") && !strings.HasPrefix(dir, "./") && !strings.HasPrefix(dir, "~/") {
		return false
	}
	for _, part := range strings.Split(dir, "/") {
		if part == "bin" || part == "sbin" {
			return true
		}
	}
	return false
}

// encodedRE finds a PowerShell -EncodedCommand argument. PowerShell accepts
// any prefix of the parameter name ("-e", "-enc", ..., but not -Encoding)
// and its alias -ec, with "/" as well as "-" as its sign. The payload may be
// split by blanks (a quoted argument: Convert.FromBase64String skips
// whitespace), so the words that follow are captured too; payloadBase64
// picks the ones that belong to it.
var encodedRE = regexp.MustCompile(`(?i)(?:^|[^\w.-])(?:powershell|pwsh)(?:\.exe)?\b[^\n;&|]*?\s[-/](?:ec|e(?:n(?:c(?:o(?:d(?:e(?:d(?:c(?:o(?:m(?:m(?:a(?:n(?:d)?)?)?)?)?)?)?)?)?)?)?)?)?)\s+([a-z0-9+/]{4,}={0,2}(?: +[a-z0-9+/]+={0,2})*)`)

// encodedPayloads decodes the -EncodedCommand payloads in s, a text found
// depth payloads deep. complete is false when s holds payloads beyond the
// bounds: more than maxDecodes, or any at maxDecodeDepth.
func encodedPayloads(s string, depth int) (payloads []string, complete bool) {
	if !mentionsPowerShell(s) {
		return nil, true
	}
	ms := encodedRE.FindAllStringSubmatch(s, maxDecodes+1)
	if len(ms) == 0 {
		return nil, true
	}
	if depth >= maxDecodeDepth {
		return nil, false
	}
	complete = len(ms) <= maxDecodes
	if !complete {
		ms = ms[:maxDecodes]
	}
	for _, m := range ms {
		if p, ok := decodeEncodedCommand(payloadBase64(m[1])); ok {
			payloads = append(payloads, p)
		}
	}
	return payloads, complete
}

// payloadBase64 joins the longest run of the captured words that is whole
// base64 (a multiple of four characters, padding only at its end). As
// base64 decodes four characters at a time, a following argument taken in
// by mistake only adds bytes after the payload's own. With no such run,
// the first word alone is decoded as it stands.
func payloadBase64(capture string) string {
	words := strings.Fields(capture)
	n, end := 0, 0
	for k, w := range words {
		n += len(w)
		if n%4 == 0 {
			end = k + 1
		}
		if strings.HasSuffix(w, "=") {
			break // padding ends the data
		}
	}
	if end == 0 {
		return words[0]
	}
	return strings.Join(words[:end], "")
}

// decodeEncodedCommand decodes a payload the way PowerShell does: base64 of
// UTF-16LE text (an odd last byte is dropped). When that reading is not
// mostly ASCII and the bytes are valid UTF-8, the UTF-8 reading (base64 of
// plain text, which a reader might try) follows on a new line. ok is false
// only when the base64 itself is invalid, which PowerShell refuses to run.
func decodeEncodedCommand(b64 string) (string, bool) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		raw, err = base64.RawStdEncoding.DecodeString(strings.TrimRight(b64, "="))
		if err != nil {
			return "", false
		}
	}
	u := make([]uint16, len(raw)/2)
	ascii := 0
	for i := range u {
		u[i] = uint16(raw[2*i]) | uint16(raw[2*i+1])<<8
		if raw[2*i+1] == 0 {
			ascii++
		}
	}
	text := string(utf16.Decode(u))
	if ascii*2 < len(u) || len(u) == 0 {
		if utf8.Valid(raw) {
			if text != "" {
				text += "\n"
			}
			text += string(raw)
		}
	}
	return text, text != ""
}

// mentionsPowerShell reports whether s names pwsh or powershell in any
// letter case, in one pass.
func mentionsPowerShell(s string) bool {
	for i := 0; i+4 <= len(s); i++ {
		if s[i]|0x20 != 'p' {
			continue
		}
		if hasPrefixFold(s[i:], "pwsh") || hasPrefixFold(s[i:], "powershell") {
			return true
		}
	}
	return false
}

func hasPrefixFold(s, prefix string) bool {
	if len(s) < len(prefix) {
		return false
	}
	for k := 0; k < len(prefix); k++ {
		if foldByte(s[k]) != prefix[k] {
			return false
		}
	}
	return true
}

// containsFold reports whether s contains sub (lower-case ASCII), ignoring
// ASCII case, without allocating.
func containsFold(s, sub string) bool {
	n := len(sub)
	for i := 0; i+n <= len(s); i++ {
		if foldByte(s[i]) != sub[0] {
			continue
		}
		k := 1
		for k < n && foldByte(s[i+k]) == sub[k] {
			k++
		}
		if k == n {
			return true
		}
	}
	return false
}
