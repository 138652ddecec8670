package commandpolicy

import (
	"regexp"
	"sync"
)

// lazyRegexp is a curated rule's pattern, compiled when a command first
// needs it.
//
// Why: the CLI builds the policy for every command it runs (one process
// per command), and compiling every curated pattern and every variant was
// most of that build (about half of it, the literal extraction the rest:
// see curatedLiteralSets). A command reaches the regexp of a unit only when
// the literal prefilter finds one of its literals, so most are never
// compiled at all. Every curated pattern compiles and matches no empty
// string: TestCuratedPatternsCompile compiles them all. Should one ever
// fail at run time all the same, it counts as matching (the rule blocks or
// warns): a broken rule fails closed, never open. Custom rules are
// compiled when the policy is built, so that a bad one is reported there.
type lazyRegexp struct {
	pattern string
	once    sync.Once
	re      *regexp.Regexp
	err     error
}

// compiledRegexp wraps a regexp compiled already.
func compiledRegexp(re *regexp.Regexp) *lazyRegexp {
	l := &lazyRegexp{pattern: re.String(), re: re}
	l.once.Do(func() {})
	return l
}

func (l *lazyRegexp) get() (*regexp.Regexp, error) {
	l.once.Do(func() { l.re, l.err = regexp.Compile(l.pattern) })
	return l.re, l.err
}

// String is the pattern.
func (l *lazyRegexp) String() string { return l.pattern }

// MatchString reports whether s matches (true when the pattern does not
// compile: see above).
func (l *lazyRegexp) MatchString(s string) bool {
	re, err := l.get()
	return err != nil || re.MatchString(s)
}

// FindStringIndex is regexp's, nil when the pattern does not compile.
func (l *lazyRegexp) FindStringIndex(s string) []int {
	re, err := l.get()
	if err != nil {
		return nil
	}
	return re.FindStringIndex(s)
}
