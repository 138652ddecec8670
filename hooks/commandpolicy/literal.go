package commandpolicy

import (
	"regexp/syntax"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"
)

// maxExactSet bounds the cross products built while looking for literals.
const maxExactSet = 64

// requiredLiterals returns a set of case-folded strings such that every match
// of pattern contains at least one of them, or nil when no useful set exists
// (the rule must then be tried on every scan). It is the basis of the
// prefilter: a rule is only confirmed with its regexp where one of its
// literals occurs.
func requiredLiterals(pattern string) []string {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil
	}
	set := required(re.Simplify())
	if minLen(set) == 0 {
		return nil
	}
	return prune(dedupe(set))
}

// prune drops literals that contain another literal of the set: the shorter
// one already flags every place the longer one would.
func prune(set []string) []string {
	var out []string
	for i, s := range set {
		redundant := false
		for j, t := range set {
			if i != j && len(t) < len(s) && strings.Contains(s, t) {
				redundant = true
				break
			}
		}
		if !redundant {
			out = append(out, s)
		}
	}
	return out
}

// requiredLiteralSets returns, best first, the literal sets of pattern's
// top-level parts: every match contains a member of each set. The first set
// drives the prefilter; the others are cheap checks before the regexp runs.
func requiredLiteralSets(pattern string) [][]string {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil
	}
	re = re.Simplify()
	best := required(re)
	if minLen(best) == 0 {
		return nil
	}
	sets := [][]string{prune(dedupe(best))}
	if re.Op == syntax.OpConcat {
		for _, s := range concatSets(re) {
			s = prune(dedupe(s))
			if !slices.Equal(s, sets[0]) {
				sets = append(sets, s)
			}
		}
	}
	return sets
}

func minLen(set []string) int {
	if len(set) == 0 {
		return 0
	}
	m := len(set[0])
	for _, s := range set[1:] {
		if len(s) < m {
			m = len(s)
		}
	}
	return m
}

func dedupe(set []string) []string {
	sort.Strings(set)
	out := set[:0]
	for i, s := range set {
		if i == 0 || s != set[i-1] {
			out = append(out, s)
		}
	}
	return out
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// exact returns every string re can match when that set is small and finite.
func exact(re *syntax.Regexp) ([]string, bool) {
	switch re.Op {
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText,
		syntax.OpEndText, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return []string{""}, true
	case syntax.OpLiteral:
		s := string(re.Rune)
		if re.Flags&syntax.FoldCase != 0 && !isASCII(s) {
			// The prefilter folds ASCII only.
			return nil, false
		}
		return []string{lowerASCII(s)}, true
	case syntax.OpCharClass:
		var set []string
		seen := map[string]bool{}
		for i := 0; i+1 < len(re.Rune); i += 2 {
			lo, hi := re.Rune[i], re.Rune[i+1]
			if hi-lo > 8 {
				return nil, false
			}
			for r := lo; r <= hi; r++ {
				// The normaliser folds the Kelvin sign and the long s, the two
				// non-ASCII runes that case-fold onto ASCII letters.
				// Control characters other than newline never survive
				// normalisation either (blanks become a space).
				if r == 0x212A || r == 0x17F || r < 0x20 && r != '\n' {
					continue
				}
				if r >= utf8.RuneSelf {
					return nil, false
				}
				s := lowerASCII(string(r))
				if !seen[s] {
					seen[s] = true
					set = append(set, s)
				}
			}
		}
		if len(set) == 0 || len(set) > 8 {
			return nil, false
		}
		return set, true
	case syntax.OpCapture:
		return exact(re.Sub[0])
	case syntax.OpQuest:
		s, ok := exact(re.Sub[0])
		if !ok {
			return nil, false
		}
		return append(s, ""), true
	case syntax.OpConcat:
		acc := []string{""}
		for _, sub := range re.Sub {
			s, ok := exact(sub)
			if !ok {
				return nil, false
			}
			acc = cross(acc, s)
			if acc == nil {
				return nil, false
			}
		}
		return acc, true
	case syntax.OpAlternate:
		var acc []string
		for _, sub := range re.Sub {
			s, ok := exact(sub)
			if !ok {
				return nil, false
			}
			acc = append(acc, s...)
			if len(acc) > maxExactSet {
				return nil, false
			}
		}
		return acc, true
	}
	return nil, false
}

func cross(a, b []string) []string {
	if len(a)*len(b) > maxExactSet {
		return nil
	}
	out := make([]string, 0, len(a)*len(b))
	for _, x := range a {
		for _, y := range b {
			out = append(out, x+y)
		}
	}
	return out
}

// better reports whether candidate set a is a better prefilter than b:
// longer shortest literal first, then fewer literals.
func better(a, b []string) bool {
	if minLen(a) != minLen(b) {
		return minLen(a) > minLen(b)
	}
	return len(a) < len(b)
}

// concatSets returns the literal sets of a concatenation: runs of
// consecutive finite children multiplied out into longer literals, and the
// required set of every other child. Every match contains a member of each.
func concatSets(re *syntax.Regexp) [][]string {
	var sets [][]string
	consider := func(s []string) {
		if minLen(s) > 0 {
			sets = append(sets, s)
		}
	}
	run := []string{""}
	for _, sub := range re.Sub {
		if s, ok := exact(sub); ok {
			if c := cross(run, s); c != nil {
				run = c
				continue
			}
			consider(run)
			run = s
			continue
		}
		consider(run)
		run = []string{""}
		consider(required(sub))
	}
	consider(run)
	return sets
}

// required returns a set of strings one of which occurs in every match of re.
func required(re *syntax.Regexp) []string {
	if s, ok := exact(re); ok && minLen(s) > 0 {
		return s
	}
	switch re.Op {
	case syntax.OpCapture, syntax.OpPlus:
		return required(re.Sub[0])
	case syntax.OpRepeat:
		if re.Min >= 1 {
			return required(re.Sub[0])
		}
	case syntax.OpAlternate:
		var acc []string
		for _, sub := range re.Sub {
			s := required(sub)
			if minLen(s) == 0 {
				return nil
			}
			acc = append(acc, s...)
		}
		return acc
	case syntax.OpConcat:
		var best []string
		for _, set := range concatSets(re) {
			if best == nil || better(set, best) {
				best = set
			}
		}
		return best
	}
	return nil
}
