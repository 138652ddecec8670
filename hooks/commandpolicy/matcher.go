package commandpolicy

import (
	"fmt"
	"regexp"
	"strings"
)

// compiledRule is a Rule ready to confirm candidates.
type compiledRule struct {
	Rule
	re *regexp.Regexp
	// lineScoped rules cannot match across a newline, so a candidate is
	// confirmed on its own line only; other rules are run on the whole text
	// once.
	lineScoped bool
}

// matcher evaluates a rule set in one pass over the text: an Aho-Corasick
// automaton over every rule's required literals finds the candidate
// positions, and only the rules owning a literal that occurs are confirmed
// with their own regexp, each at most once per line. Unlike an alternation
// of all rules in one regexp (leftmost-first: a rule matching at the same
// place as an earlier one is hidden), every matching rule is reported.
type matcher struct {
	rules  []compiledRule
	ac     *acMachine
	byLit  [][]int32 // literal id -> rule indices
	always []int     // rules with no usable literal: run on every text
}

// RuleError is a rule that cannot be used.
type RuleError struct {
	Rule   string
	Reason string
}

func (e *RuleError) Error() string {
	return fmt.Sprintf("command policy rule %q: %s", e.Rule, e.Reason)
}

// confineToLine rewrites \s in a curated pattern so that it never matches a
// newline: a space outside brackets, a plain space inside a positive class.
// Normalised text has no other blank than space and newline.
func confineToLine(p string) string {
	var b strings.Builder
	inClass, neg := false, false
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '\\' && i+1 < len(p) {
			e := p[i+1]
			i++
			if e == 's' {
				switch {
				case !inClass:
					b.WriteString(`[^\S\n]`)
				case !neg:
					b.WriteString(`\x20`)
				default:
					b.WriteString(`\s`)
				}
				continue
			}
			b.WriteByte(c)
			b.WriteByte(e)
			continue
		}
		if !inClass && c == '[' {
			inClass = true
			neg = i+1 < len(p) && p[i+1] == '^'
		} else if inClass && c == ']' {
			inClass = false
		}
		b.WriteByte(c)
	}
	return b.String()
}

func compileRule(r Rule, curated bool) (compiledRule, error) {
	if strings.TrimSpace(r.Name) == "" {
		return compiledRule{}, &RuleError{Rule: r.Name, Reason: "has no name"}
	}
	switch r.Action {
	case Block, Warn:
	case "deny":
		r.Action = Block
	default:
		return compiledRule{}, &RuleError{Rule: r.Name, Reason: fmt.Sprintf("action %q is neither %q nor %q", r.Action, Block, Warn)}
	}
	if r.Regex == "" {
		return compiledRule{}, &RuleError{Rule: r.Name, Reason: "empty regex"}
	}
	pattern := r.Regex
	lineScoped := false
	if curated {
		pattern = `(?im)` + confineToLine(pattern)
		lineScoped = !strings.Contains(r.Regex, `\n`)
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return compiledRule{}, &RuleError{Rule: r.Name, Reason: "malformed regex: " + err.Error()}
	}
	if re.MatchString("") {
		return compiledRule{}, &RuleError{Rule: r.Name, Reason: "regex matches the empty string, so every command"}
	}
	return compiledRule{Rule: r, re: re, lineScoped: lineScoped}, nil
}

func newMatcher(rules []compiledRule) *matcher {
	m := &matcher{rules: rules}
	var lits []string
	litID := map[string]int{}
	for i, r := range rules {
		set := requiredLiterals(r.re.String())
		if set == nil {
			m.always = append(m.always, i)
			continue
		}
		for _, l := range set {
			id, ok := litID[l]
			if !ok {
				id = len(lits)
				litID[l] = id
				lits = append(lits, l)
				m.byLit = append(m.byLit, nil)
			}
			m.byLit[id] = append(m.byLit[id], int32(i))
		}
	}
	m.ac = newACMachine(lits)
	return m
}

// scan returns, in rule order, the indices of the rules that match text.
func (m *matcher) scan(text string) []int {
	n := len(m.rules)
	matched := make([]bool, n)
	// triedLine[r] is 1 + the start of the last line rule r was confirmed
	// on; -1 once a whole-text rule has been run.
	triedLine := make([]int, n)
	ac := m.ac
	lineStart, lineEnd := 0, -1
	state := int32(0)
	for i := 0; i < len(text); i++ {
		c := text[i]
		if c == '\n' {
			lineStart, lineEnd = i+1, -1
		}
		state = ac.next[int(state)*ac.ncols+int(ac.class[c])]
		if !ac.hasOut[state] {
			continue
		}
		for _, lit := range ac.out[state] {
			for _, ri := range m.byLit[lit] {
				r := &m.rules[ri]
				if matched[ri] {
					continue
				}
				if !r.lineScoped {
					if triedLine[ri] != -1 {
						triedLine[ri] = -1
						matched[ri] = r.re.MatchString(text)
					}
					continue
				}
				if triedLine[ri] == lineStart+1 {
					continue
				}
				triedLine[ri] = lineStart + 1
				if lineEnd < 0 {
					lineEnd = len(text)
					if k := strings.IndexByte(text[i:], '\n'); k >= 0 {
						lineEnd = i + k
					}
				}
				matched[ri] = r.re.MatchString(text[lineStart:lineEnd])
			}
		}
	}
	for _, ri := range m.always {
		matched[ri] = m.rules[ri].re.MatchString(text)
	}
	var out []int
	for i, ok := range matched {
		if ok {
			out = append(out, i)
		}
	}
	return out
}

// scanEachRule is the reference the set scan must agree with: every rule's
// regexp run over the whole text, one after the other.
func (m *matcher) scanEachRule(text string) []int {
	var out []int
	for i, r := range m.rules {
		if r.re.MatchString(text) {
			out = append(out, i)
		}
	}
	return out
}
