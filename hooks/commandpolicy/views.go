package commandpolicy

import (
	"strings"
)

// Derived views: readings of the POSIX view that a shell would only reach
// through state carried from one command to the next, which a rule (a
// regexp over one line) cannot track. Each is appended on lines of its own
// after the views it derives from, and only where it differs from them, so
// the rules match the original text and the derived reading alike.
//
//   - a function that calls itself is read with its name spelled ":" in
//     that line (a(){ a & a; }; a is also read as :(){ : & :; }; :), so one
//     rule recognises a fork bomb whatever the function is called; RE2 has
//     no back-references to say "the same name" itself;
//   - after cd (or pushd) to a known directory, the relative words of the
//     commands that follow are read against it (cd /; rm -rf . is also read
//     as cd /; rm -rf /), so the rules on absolute paths see a relative
//     path that names the same file.
//
// hints (from canonicalHints) say whether the text holds a function
// definition or a cd the cwd view can follow; without them the views are
// skipped.
func derivedViews(posix string, hints viewHints) string {
	var b strings.Builder
	if hints.funcDef {
		selfCallView(&b, posix)
	}
	if hints.cd {
		cwdView(&b, posix)
	}
	return b.String()
}

// maxFuncBody bounds the body searched for a self call.
const maxFuncBody = 256

// selfCallView appends, for each line defining a function that calls
// itself (NAME(){ ... NAME ... }, NAME() ( ... ), function NAME { ... }),
// the line with every word NAME spelled ":". The replacement never makes
// the line longer.
func selfCallView(b *strings.Builder, posix string) {
	for rest := posix; rest != ""; {
		line, next, _ := strings.Cut(rest, "\n")
		rest = next
		if !strings.Contains(line, "()") && !strings.Contains(line, "function ") {
			continue
		}
		out := line
		for _, name := range selfCallingFunctions(line) {
			out = replaceWord(out, name, ":")
		}
		if out != line {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(out)
		}
	}
}

// selfCallingFunctions lists the names of the functions defined on line
// whose body names them as a word.
func selfCallingFunctions(line string) []string {
	var names []string
	for i := 0; i < len(line); i++ {
		var name string
		var body int
		switch {
		case strings.HasPrefix(line[i:], "()"):
			// NAME(){ or NAME() ( : the word just before.
			j := i
			for j > 0 && !tokenEnd[line[j-1]] {
				j--
			}
			if j == i {
				continue
			}
			name = line[j:i]
			k := i + 2
			if k < len(line) && line[k] == ' ' {
				k++
			}
			if k >= len(line) || (line[k] != '{' && line[k] != '(') {
				continue
			}
			body = k + 1
		case strings.HasPrefix(line[i:], "function ") && (i == 0 || tokenEnd[line[i-1]]):
			j := i + len("function ")
			k := j
			for k < len(line) && !tokenEnd[line[k]] {
				k++
			}
			if k == j {
				continue
			}
			name = line[j:k]
			if strings.HasPrefix(line[k:], "()") {
				k += 2
			}
			if k < len(line) && line[k] == ' ' {
				k++
			}
			if k >= len(line) || line[k] != '{' {
				continue
			}
			body = k + 1
		default:
			continue
		}
		// The body runs to its closing brace or parenthesis.
		end, depth := body, 1
		for ; end < len(line) && end-body < maxFuncBody; end++ {
			switch line[end] {
			case '{', '(':
				depth++
			case '}', ')':
				depth--
			}
			if depth == 0 {
				break
			}
		}
		if name != ":" && containsWord(line[body:end], name) {
			names = append(names, name)
		}
	}
	return names
}

// containsWord reports whether w occurs in s between word ends (tokenEnd
// bytes or the ends of s).
func containsWord(s, w string) bool {
	for off := 0; ; {
		k := strings.Index(s[off:], w)
		if k < 0 {
			return false
		}
		k += off
		if (k == 0 || tokenEnd[s[k-1]]) && (k+len(w) == len(s) || tokenEnd[s[k+len(w)]]) {
			return true
		}
		off = k + 1
	}
}

// replaceWord replaces every whole-word occurrence of w in s with r.
func replaceWord(s, w, r string) string {
	var b strings.Builder
	for off := 0; ; {
		k := strings.Index(s[off:], w)
		if k < 0 {
			b.WriteString(s[off:])
			return b.String()
		}
		k += off
		if (k == 0 || tokenEnd[s[k-1]]) && (k+len(w) == len(s) || tokenEnd[s[k+len(w)]]) {
			b.WriteString(s[off:k])
			b.WriteString(r)
		} else {
			b.WriteString(s[off : k+len(w)])
		}
		off = k + len(w)
	}
}

// isCd reports the words that change the shell's directory (w lower case).
func isCd(w string) bool { return w == "cd" || w == "pushd" || w == "chdir" }

// Bounds of the cwd view: a directory longer than maxCwd is not followed,
// and the view stops growing past twice the text (plus a margin). With the
// root as the directory a word grows by one byte, so the root is always
// followed to the end.
const maxCwd = 64

// cwdView appends, for each line on which a directory set by an earlier cd
// is known, the line with the relative words of its commands (operands
// and key=value values, not command words or options) resolved against
// that directory where that makes them an interestingPath. It follows the shell's reading: cd to an absolute or home
// path sets the directory, a relative cd moves it, cd alone is the home,
// anything it cannot resolve (cd -, cd $DIR, popd) makes it unknown again,
// and a subshell's cd ends with the subshell.
func cwdView(b *strings.Builder, posix string) {
	budget := 2*len(posix) + 256
	start := b.Len()
	cwd := ""
	// cwdOfNote caches interestingPath(cwd) for lastCwd.
	lastCwd, cwdOfNote := "", false
	noted := func() bool {
		if cwd != lastCwd {
			lastCwd, cwdOfNote = cwd, interestingPath(cwd)
		}
		return cwdOfNote
	}
	var stack []string
	var line strings.Builder
	for rest := posix; rest != ""; {
		ln, next, _ := strings.Cut(rest, "\n")
		rest = next
		// A line that cannot change the directory nor be read otherwise
		// is skipped without being tokenised.
		if len(stack) == 0 && (cwd == "" || !noted()) && !strings.Contains(ln, "..") &&
			!strings.Contains(ln, "cd") && !strings.Contains(ln, "pushd") && !strings.Contains(ln, "chdir") && !strings.Contains(ln, "popd") {
			continue
		}
		// The line is copied only once something in it is read
		// otherwise: copied is how much of ln is already in line.
		line.Reset()
		copied, changed := 0, false
		edit := func(at, skip int, repl string) {
			line.WriteString(ln[copied:at])
			line.WriteString(repl)
			copied, changed = skip, true
		}
		cmdPos, inCd, cdDone := true, false, false
		// findPaths: just after find's command word, where its starting
		// points go; none (find -delete) means the directory.
		findPaths := false
		for i := 0; i < len(ln); {
			c := ln[i]
			if c == ' ' {
				i++
				continue
			}
			if isSep(c) {
				if inCd && !cdDone {
					cwd = "~" // cd alone: the home directory
				}
				if findPaths && cwd != "" && noted() {
					if i > 0 && ln[i-1] == ' ' {
						edit(i, i, cwd+" ")
					} else {
						edit(i, i, " "+cwd)
					}
				}
				inCd, findPaths = false, false
				switch c {
				case '(':
					stack = append(stack, cwd)
				case ')':
					if n := len(stack); n > 0 {
						cwd, stack = stack[n-1], stack[:n-1]
					}
				}
				cmdPos = c != '<' && c != '>'
				i++
				continue
			}
			j := i
			for j < len(ln) && !tokenEnd[ln[j]] {
				j++
			}
			tok, at := ln[i:j], i
			i = j
			switch {
			case inCd:
				if !cdDone && !strings.HasPrefix(tok, "-") {
					cwd, cdDone = cdTarget(cwd, tok), true
				}
				continue
			case cmdPos:
				if inFoldedSet(isCd, tok) {
					inCd, cdDone, cmdPos = true, false, false
					continue
				}
				if strings.EqualFold(tok, "popd") {
					cwd = ""
				}
				if strings.EqualFold(tok, "find") {
					findPaths, cmdPos = true, false
					continue
				}
				cmdPos = strings.HasPrefix(tok, "-") || strings.Contains(tok, "=") || inFoldedSet(isWrapper, tok) || inFoldedSet(isRunner, tok)
				continue
			}
			if findPaths {
				if tok == "-H" || tok == "-L" || tok == "-P" {
					continue
				}
				if strings.HasPrefix(tok, "-") && cwd != "" && noted() {
					edit(at, at, cwd+" ")
				}
				findPaths = false
			}
			cmdPos = (tok[0] == '-' || tok[0] == '/' || tok[0]|0x20 == 'x') && inFoldedSet(isRunner, tok)
			if cwd == "" || !mayResolveInteresting(cwd, noted(), tok) {
				continue
			}
			if r, ok := resolveWord(cwd, tok); ok && interestingPath(r) {
				edit(at, j, r)
			}
		}
		if inCd && !cdDone {
			cwd = "~"
		}
		if findPaths && cwd != "" && noted() {
			edit(len(ln), len(ln), " "+cwd)
		}
		if changed {
			line.WriteString(ln[copied:])
			if b.Len()-start+line.Len() > budget {
				return
			}
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(line.String())
		}
	}
}

// interestingPath reports the resolved paths a rule can tell apart from a
// relative one: the root and every entry of it (/, /*, /.*), one top-level
// system directory (/usr, /etc/*), anything below /dev and /etc, and the
// home itself or its .ssh. Only such words are written resolved, and only
// lines holding one are emitted: a script that starts with cd /srv/app
// and then works on relative paths below it adds nothing to scan.
func interestingPath(p string) bool {
	if k := strings.IndexByte(p, '='); k >= 0 {
		p = p[k+1:]
	}
	switch {
	case p == "":
		return false
	case strings.HasPrefix(p, "/dev/"), strings.HasPrefix(p, "/etc/"):
		return true
	case p == "~" || p == "~/" || p == "~/*" || strings.HasPrefix(p, "~/.ssh"):
		return true
	case p[0] != '/':
		return false
	}
	rest := strings.TrimLeft(p, "/")
	if rest == "" || strings.IndexByte("*?.[", rest[0]) >= 0 {
		return true
	}
	return isTopName(strings.TrimSuffix(strings.TrimSuffix(rest, "*"), "/"))
}

// isTopName reports the top-level system directories (as topDir names
// them).
func isTopName(name string) bool { return inFoldedSet(topName, name) }

func topName(name string) bool {
	switch name {
	case "bin", "boot", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "opt", "proc", "root", "run",
		"sbin", "srv", "sys", "usr", "var", "system", "library", "applications", "private", "users":
		return true
	}
	return false
}

// mayResolveInteresting is a cheap test, before resolveWord allocates,
// that tok read against cwd can be an interestingPath: it climbs (..), or
// the directory is the root and tok starts with a wildcard, a dot or a
// top-level name, or the directory is itself of interest (cwdOfNote).
func mayResolveInteresting(cwd string, cwdOfNote bool, tok string) bool {
	if strings.Contains(tok, "..") {
		return true
	}
	if cwd != "/" {
		return cwdOfNote
	}
	if k := strings.IndexByte(tok, '='); k >= 0 {
		tok = tok[k+1:]
	}
	if tok == "" || strings.IndexByte(".*?[", tok[0]) >= 0 {
		return true
	}
	first, _, _ := strings.Cut(tok, "/")
	return isTopName(strings.TrimSuffix(first, "*"))
}

// cdTarget is the directory after cd tok from cwd ("" when unknown).
func cdTarget(cwd, tok string) string {
	var d string
	switch {
	case strings.ContainsAny(tok, "$`*?[") && !strings.HasPrefix(tok, "$HOME"):
		return ""
	case tok[0] == '/':
		d = cleanAbsPath(tok)
	case tok == "~" || strings.HasPrefix(tok, "~/") || tok == "$HOME" || strings.HasPrefix(tok, "$HOME/"):
		d = tok
	case tok == "-" || cwd == "":
		return ""
	default:
		d, _ = resolveWord(cwd, tok)
	}
	if len(d) > maxCwd {
		return ""
	}
	return d
}

// resolveWord reads a relative word against cwd: the word itself, or the
// value of a key=value word. ok is false for words that are not relative
// paths (options, absolute, home, variable and drive paths, URLs).
func resolveWord(cwd, tok string) (string, bool) {
	prefix := ""
	if k := strings.IndexByte(tok, '='); k >= 0 {
		if k == 0 || !isWordByte(tok[0]) {
			return "", false
		}
		prefix, tok = tok[:k+1], tok[k+1:]
	}
	if tok == "" {
		return "", false
	}
	switch tok[0] {
	case '-', '/', '~', '$', '\\', '%', '+', '`':
		return "", false
	}
	if strings.ContainsAny(tok, ":\\") {
		return "", false
	}
	p := cwd + "/" + tok
	if cwd == "/" {
		p = "/" + tok
	}
	if p[0] == '/' {
		p = cleanAbsPath(p)
	} else {
		p = cleanHomePath(p)
	}
	return prefix + p, true
}
