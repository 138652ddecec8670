package commandpolicy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// compiledRule is a Rule ready to confirm candidates.
type compiledRule struct {
	Rule
	re *lazyRegexp
	// variants are the top-level alternatives of a curated rule compiled
	// on their own: each has its own literals, so a candidate runs only the
	// alternative that can match there, and smaller programs run faster.
	variants []*lazyRegexp
	// lineScoped rules cannot match across a newline, so a candidate is
	// confirmed on its own line only; other rules are run on the whole text
	// once.
	lineScoped bool
	// curated rules are written in lower case and run on the ASCII
	// lower-cased text, which spares the regexp engine case folding; custom
	// rules run on the text as it is, with the flags they were written with.
	curated bool
}

// matcher evaluates a rule set in one pass over the text: an Aho-Corasick
// automaton over every rule's required literals finds the candidate
// positions, and only the rules owning a literal that occurs are confirmed
// with their own regexp, each at most once per line. Unlike an alternation
// of all rules in one regexp (leftmost-first: a rule matching at the same
// place as an earlier one is hidden), every matching rule is reported.
type matcher struct {
	rules  []compiledRule
	units  []unit
	ac     *acMachine
	byLit  [][]int32 // literal id -> unit indices
	always []int     // units with no usable literal: run on every text
}

// unit is one variant of one rule: what a literal hit confirms.
type unit struct {
	rule int
	re   *lazyRegexp
	// needs are further literal sets every match contains one of; a
	// window lacking one is rejected without running the regexp.
	needs [][]string
}

// ruleHit is a matching rule and where it matched.
type ruleHit struct {
	rule       int
	start, end int // the window (a line, or the whole text) it matched in
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

// ruleAction is the one reading of a rule's action, for New and
// CheckConfig alike: "block" or "warn", and "deny" as "block".
func ruleAction(a string) (action string, ok bool) {
	switch a {
	case Block, Warn:
		return a, true
	case "deny":
		return Block, true
	}
	return "", false
}

func compileRule(r Rule, curated bool) (compiledRule, error) {
	if strings.TrimSpace(r.Name) == "" {
		return compiledRule{}, &RuleError{Rule: r.Name, Reason: "has no name"}
	}
	action, ok := ruleAction(r.Action)
	if !ok {
		return compiledRule{}, &RuleError{Rule: r.Name, Reason: fmt.Sprintf("action %q is neither %q nor %q", r.Action, Block, Warn)}
	}
	r.Action = action
	if r.Regex == "" {
		return compiledRule{}, &RuleError{Rule: r.Name, Reason: "empty regex"}
	}
	if curated {
		// Compiled on first use (lazyRegexp): the tests compile them all.
		re := &lazyRegexp{pattern: `(?m)` + confineToLine(r.Regex)}
		cr := compiledRule{Rule: r, re: re, lineScoped: !r.spansLines, curated: true, variants: []*lazyRegexp{re}}
		if parts := splitTopAlternation(confineToLine(r.Regex)); len(parts) > 1 {
			cr.variants = cr.variants[:0]
			for _, p := range parts {
				cr.variants = append(cr.variants, &lazyRegexp{pattern: `(?m)` + p})
			}
		}
		return cr, nil
	}
	re, err := regexp.Compile(r.Regex)
	if err != nil {
		return compiledRule{}, &RuleError{Rule: r.Name, Reason: "malformed regex: " + err.Error()}
	}
	if re.MatchString("") {
		return compiledRule{}, &RuleError{Rule: r.Name, Reason: "regex matches the empty string, so every command"}
	}
	lre := compiledRegexp(re)
	return compiledRule{Rule: r, re: lre, variants: []*lazyRegexp{lre}}, nil
}

// splitTopAlternation splits "(?:a|b|c)" into a, b, c when the whole
// pattern is one group whose alternatives are separated at its top level;
// otherwise it returns nil.
func splitTopAlternation(p string) []string {
	if !strings.HasPrefix(p, "(?:") || !strings.HasSuffix(p, ")") {
		return nil
	}
	var parts []string
	depth, start, inClass := 0, 3, false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\':
			i++
		case inClass:
			if c == ']' {
				inClass = false
			}
		case c == '[':
			inClass = true
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth == 0 && i != len(p)-1 {
				return nil // the first group closes before the end
			}
		case c == '|' && depth == 1:
			parts = append(parts, p[start:i])
			start = i + 1
		}
	}
	if depth != 0 {
		return nil
	}
	return append(parts, p[start:len(p)-1])
}

func newMatcher(rules []compiledRule) *matcher {
	m := &matcher{rules: rules}
	var lits []string
	litID := map[string]int{}
	for ri, r := range rules {
		for _, v := range r.variants {
			m.units = append(m.units, unit{rule: ri, re: v})
		}
	}
	table := curatedLiteralSets()
	for i := range m.units {
		u := &m.units[i]
		sets, ok := table[u.re.String()]
		if !ok || !m.rules[u.rule].curated {
			sets = requiredLiteralSets(u.re.String())
		}
		var set []string
		if len(sets) > 0 {
			set, u.needs = sets[0], sets[1:]
			// The most selective checks first: a window is usually
			// rejected by the first set it lacks.
			slices.SortStableFunc(u.needs, func(x, y []string) int {
				switch {
				case better(x, y):
					return -1
				case better(y, x):
					return 1
				}
				return 0
			})
		}
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

// scan returns, in rule order, the rules that match text.
func (m *matcher) scan(text string) []ruleHit {
	lower := lowerASCII(text) // same byte offsets as text
	nr, nu := len(m.rules), len(m.units)
	matched := make([]bool, nr)
	where := make([]ruleHit, nr)
	// tried[u] is 1 + the start of the last line unit u was confirmed on;
	// -1 once a whole-text unit has been run.
	tried := make([]int, nu)
	ac := m.ac
	lineStart, lineEnd := 0, -1
	state := int32(0)
	for i := 0; i < len(text); i++ {
		c := lower[i]
		if c == '\n' {
			lineStart, lineEnd = i+1, -1
		}
		state = ac.next[int(state)*ac.ncols+int(ac.class[c])]
		if !ac.hasOut[state] {
			continue
		}
		for _, lit := range ac.out[state] {
			for _, ui := range m.byLit[lit] {
				u := &m.units[ui]
				r := &m.rules[u.rule]
				if matched[u.rule] {
					continue
				}
				if !r.lineScoped {
					if tried[ui] != -1 {
						tried[ui] = -1
						if u.confirm(r, text, lower, 0, len(text)) {
							matched[u.rule], where[u.rule] = true, ruleHit{u.rule, 0, len(text)}
						}
					}
					continue
				}
				if tried[ui] == lineStart+1 {
					continue
				}
				tried[ui] = lineStart + 1
				if lineEnd < 0 {
					lineEnd = len(text)
					if k := strings.IndexByte(text[i:], '\n'); k >= 0 {
						lineEnd = i + k
					}
				}
				if u.confirm(r, text, lower, lineStart, lineEnd) {
					matched[u.rule], where[u.rule] = true, ruleHit{u.rule, lineStart, lineEnd}
				}
			}
		}
	}
	for _, ui := range m.always {
		u := m.units[ui]
		if !matched[u.rule] && u.confirm(&m.rules[u.rule], text, lower, 0, len(text)) {
			matched[u.rule], where[u.rule] = true, ruleHit{u.rule, 0, len(text)}
		}
	}
	var out []ruleHit
	for i, ok := range matched {
		if ok {
			out = append(out, where[i])
		}
	}
	return out
}

// confirm runs the unit on text[start:end] (its lower-cased copy for a
// curated rule) once the window holds a literal of each further set.
func (u *unit) confirm(r *compiledRule, text, lower string, start, end int) bool {
	lw := lower[start:end]
	for _, set := range u.needs {
		found := false
		for _, lit := range set {
			if strings.Contains(lw, lit) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	if r.curated {
		return u.re.MatchString(lw)
	}
	return u.re.MatchString(text[start:end])
}

// ruleIndices lists the rule indices of hits.
func ruleIndices(hits []ruleHit) []int {
	out := make([]int, len(hits))
	for i, h := range hits {
		out[i] = h.rule
	}
	return out
}

// scanEachRule is the reference the set scan must agree with: every rule's
// regexp run over the whole text, one after the other.
func (m *matcher) scanEachRule(text string) []int {
	lower := lowerASCII(text)
	var out []int
	for i, r := range m.rules {
		t := text
		if r.curated {
			t = lower
		}
		if r.re.MatchString(t) {
			out = append(out, i)
		}
	}
	return out
}
