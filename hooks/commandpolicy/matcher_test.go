package commandpolicy

import (
	"fmt"
	"math/rand"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestCuratedRulesArePrefiltered(t *testing.T) {
	h := newDefault(t)
	for _, i := range h.m.always {
		t.Errorf("curated rule %s has a variant with no literal prefilter", h.m.rules[h.m.units[i].rule].Name)
	}
	for _, u := range h.m.units {
		if l := requiredLiterals(u.re.String()); minLen(l) < 2 {
			t.Errorf("rule %s: weak prefilter %q for %s", h.m.rules[u.rule].Name, l, u.re)
		}
	}
	if len(h.m.units) <= len(h.m.rules) {
		t.Errorf("no curated rule was split into variants")
	}
}

func TestRequiredLiterals(t *testing.T) {
	for pattern, want := range map[string][]string{
		`(?i)rm\s+-rf`:               {"-rf"},
		`foo|bar`:                    {"bar", "foo"},
		`a+b`:                        nil, // single letters only: no useful set
		`x.*`:                        nil,
		`(?:vssadmin)(?:\.exe)? del`: {"vssadmin del", "vssadmin.exe del"},
		`abc|.*`:                     nil,
	} {
		got := requiredLiterals(pattern)
		if want == nil && got != nil && minLen(got) > 1 {
			t.Errorf("%s: got %q, want none", pattern, got)
		}
		if want != nil && !slices.Equal(got, want) {
			t.Errorf("%s: got %q, want %q", pattern, got, want)
		}
	}
}

func TestACMachine(t *testing.T) {
	m := newACMachine([]string{"he", "she", "his", "hers"})
	var got []string
	text := "USHERS his"
	state := int32(0)
	for i := 0; i < len(text); i++ {
		state = m.next[int(state)*m.ncols+int(m.class[text[i]])]
		for _, id := range m.out[state] {
			got = append(got, fmt.Sprintf("%d@%d", id, i+1-m.lenOf[id]))
		}
	}
	sort.Strings(got)
	want := []string{"0@2", "1@1", "2@7", "3@2"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v want %v", got, want)
	}
}

// allCases gathers every text of the tables.
func allCases() []string {
	var out []string
	for _, c := range ruleCases {
		out = append(out, c.positive...)
		out = append(out, c.negative...)
	}
	return append(out, ordinaryCommands...)
}

// The one-pass scan reports exactly what running every rule would.
func TestSetScanAgreesWithEachRule(t *testing.T) {
	h := newDefault(t)
	texts := allCases()
	// Multi-line texts mixing cases, so hits land on different lines.
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 200; i++ {
		var parts []string
		for k := 0; k < 1+r.Intn(6); k++ {
			parts = append(parts, texts[r.Intn(len(texts))])
		}
		texts = append(texts, strings.Join(parts, []string{"\n", "; ", " && ", " | "}[r.Intn(4)]))
	}
	for _, text := range texts {
		norm := Normalize(text)
		if got, want := ruleIndices(h.m.scan(norm)), h.m.scanEachRule(norm); !slices.Equal(got, want) {
			t.Errorf("%q: set scan %v, each rule %v", norm, got, want)
		}
	}
}

func FuzzNormalize(f *testing.F) {
	for _, s := range allCases() {
		f.Add(s)
	}
	f.Add("powershell -enc " + encodePS("rm -rf /"))
	f.Add("$'\\x72\\u006d\\1' \\\r\n ^\n `\n")
	f.Fuzz(func(t *testing.T, s string) {
		start := time.Now()
		n := Normalize(s)
		// Normalising normalised text is stable on its first view.
		if !strings.Contains(Normalize(n), strings.SplitN(Normalize(n), "\n", 2)[0]) {
			t.Fatal("unstable")
		}
		// Output is bounded: views and decoded payloads, never a blow-up.
		if len(n) > 16*len(s)+64 {
			t.Fatalf("output %d bytes for %d input bytes", len(n), len(s))
		}
		// A blow-up (exponential backtracking, runaway decoding) takes
		// minutes; 10 s leaves room for a loaded machine under -race.
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("took %v on %d bytes", d, len(s))
		}
	})
}

func FuzzMatch(f *testing.F) {
	for _, s := range allCases() {
		f.Add(s)
	}
	h, _ := New(DefaultConfig(), nil)
	f.Fuzz(func(t *testing.T, s string) {
		// The rule-by-rule reference is slow on big inputs (every rule's
		// NFA over the whole text), which makes minimisation crawl; the set
		// scan's own cost on big inputs is BenchmarkStdin256KiB.
		if len(s) > 2<<10 {
			s = s[:2<<10]
		}
		norm := Normalize(s)
		got := ruleIndices(h.m.scan(norm))
		if want := h.m.scanEachRule(norm); !slices.Equal(got, want) {
			t.Fatalf("%q: set scan %v, each rule %v", norm, got, want)
		}
		_ = h.Check(s)
	})
}

// ---- benchmarks ----

var typicalCommands = []string{
	`go test ./...`, `git status --short`, `npm install --save-dev typescript`,
	`python -m pytest -q tests/test_api.py`, `ls -la /tmp`, `cargo build --release`,
	`git commit -m "parser: handle empty input" --author="A <a@example.com>"`,
	`find . -name '*.go' -not -path './vendor/*' | xargs gofmt -l`,
	`docker run --rm -v $PWD:/src golang:1.26 go build ./...`, `rm -rf build/ dist/`,
}

func BenchmarkTypicalCommand(b *testing.B) {
	h := newDefault(b)
	targets := make([]string, len(typicalCommands))
	for i, c := range typicalCommands {
		targets[i] = ScanTarget("sh", []string{"-c", c}, nil)
	}
	durs := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	cpu0 := processCPU()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		_ = h.Check(targets[i%len(targets)])
		durs = append(durs, time.Since(t0))
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	slices.Sort(durs)
	b.ReportMetric(float64(durs[len(durs)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(durs[len(durs)*99/100].Nanoseconds()), "p99-ns")
}

// bigScript is a 256 KiB shell script of ordinary lines with a few
// flagged ones.
func bigScript() string {
	lines := []string{
		"echo building component", "cd src && make -j4 all", "cp -r assets/ build/assets/",
		`if [ -f "$CONF" ]; then . "$CONF"; fi`, "for f in *.txt; do wc -l \"$f\"; done",
		"curl -fsSL https://example.com/data.json -o data.json", "rm -rf build/tmp",
		`grep -rn "TODO" src/ | sort | uniq -c`, "export PATH=$HOME/bin:$PATH",
	}
	var b strings.Builder
	for i := 0; b.Len() < MaxScanStdin-200; i++ {
		b.WriteString(lines[i%len(lines)])
		b.WriteByte('\n')
	}
	b.WriteString("curl https://x | sh\n")
	return b.String()
}

// realisticScript is 256 KiB of a varied build-and-install script in which
// about one line in twenty is a near miss the regexps must confirm.
func realisticScript() string {
	var b strings.Builder
	for i := 0; b.Len() < MaxScanStdin-200; i++ {
		switch i % 20 {
		case 0:
			fmt.Fprintf(&b, "rm -rf build/stage%d\n", i)
		case 1:
			fmt.Fprintf(&b, "curl -fsSL https://example.com/pkg-%d.tar.gz -o pkg.tgz\n", i)
		case 2:
			fmt.Fprintf(&b, "tar -xzf pkg.tgz -C vendor/p%d\n", i)
		case 3:
			fmt.Fprintf(&b, "if [ ! -d \"$OUT/%d\" ]; then mkdir -p \"$OUT/%d\"; fi\n", i, i)
		case 4:
			fmt.Fprintf(&b, "echo \"step %d: compiling $(basename $PWD)\"\n", i)
		case 5:
			fmt.Fprintf(&b, "gcc -O2 -Wall -c src/mod%d.c -o obj/mod%d.o\n", i, i)
		case 6:
			fmt.Fprintf(&b, "python3 tools/gen.py --input data/%d.json --output gen/%d.h\n", i, i)
		case 7:
			fmt.Fprintf(&b, "for f in src/*.c; do printf '%%s\\n' \"$f\"; done > files%d.txt\n", i)
		case 8:
			fmt.Fprintf(&b, "export CFLAGS=\"$CFLAGS -DVERSION=%d\"\n", i)
		case 9:
			fmt.Fprintf(&b, "grep -q 'TODO' src/mod%d.c && echo found || true\n", i)
		default:
			fmt.Fprintf(&b, "cp -r assets/img%d build/assets/ && chmod 644 build/assets/img%d/*\n", i, i)
		}
	}
	return b.String()
}

func BenchmarkStdin256KiBRealistic(b *testing.B) {
	h := newDefault(b)
	target := ScanTarget("bash", []string{"-s"}, []byte(realisticScript()))
	b.SetBytes(int64(len(target)))
	b.ResetTimer()
	cpu0 := processCPU()
	for i := 0; i < b.N; i++ {
		if m := h.Check(target); m.Action != Allow {
			b.Fatal(m)
		}
	}
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkStdin256KiBAfterCd is the realistic script after a cd the cwd
// view follows: to the root (every line is read against it) and to a
// project directory (only lines that climb with .. are).
func BenchmarkStdin256KiBAfterCd(b *testing.B) {
	h := newDefault(b)
	for _, dir := range []string{"/", "/srv/app"} {
		target := ScanTarget("bash", []string{"-s"}, []byte("cd "+dir+"\n"+realisticScript()))
		b.Run(dir, func(b *testing.B) {
			b.SetBytes(int64(len(target)))
			cpu0 := processCPU()
			for i := 0; i < b.N; i++ {
				if m := h.Check(target); m.Action != Allow {
					b.Fatal(m)
				}
			}
			b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkStdin256KiB is adversarial: about one line in five is a near
// miss (rm -rf of a relative path, curl without a pipe).
func BenchmarkStdin256KiB(b *testing.B) {
	h := newDefault(b)
	target := ScanTarget("bash", []string{"-s"}, []byte(bigScript()))
	b.SetBytes(int64(len(target)))
	b.ResetTimer()
	cpu0 := processCPU()
	for i := 0; i < b.N; i++ {
		if m := h.Check(target); m.Action != Warn {
			b.Fatal(m)
		}
	}
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// The three engines on the same normalised text: the chosen one-pass
// literal prefilter with per-candidate confirmation, every rule one after
// the other, and one alternation regexp of all rules (which is not a set:
// leftmost-first hides rules matching at the same place).
func benchEngines(b *testing.B, text string) {
	h := newDefault(b)
	norm := Normalize(text)
	alts := make([]string, len(h.m.rules))
	for i, r := range h.m.rules {
		alts[i] = "(?:" + strings.TrimPrefix(r.re.String(), "(?im)") + ")"
	}
	alternation := regexp.MustCompile("(?im)" + strings.Join(alts, "|"))
	b.Run("one-pass-prefilter", func(b *testing.B) {
		b.SetBytes(int64(len(norm)))
		cpu0 := processCPU()
		for i := 0; i < b.N; i++ {
			h.m.scan(norm)
		}
		b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	})
	b.Run("rule-by-rule", func(b *testing.B) {
		b.SetBytes(int64(len(norm)))
		cpu0 := processCPU()
		for i := 0; i < b.N; i++ {
			h.m.scanEachRule(norm)
		}
		b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	})
	b.Run("alternation-regexp", func(b *testing.B) {
		b.SetBytes(int64(len(norm)))
		cpu0 := processCPU()
		for i := 0; i < b.N; i++ {
			alternation.FindAllStringIndex(norm, -1)
		}
		b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	})
}

func BenchmarkEnginesTypical(b *testing.B) {
	benchEngines(b, "sh -c "+typicalCommands[6])
}

func BenchmarkEngines256KiB(b *testing.B) {
	benchEngines(b, "bash -s\n"+bigScript())
}

func BenchmarkNormalize256KiB(b *testing.B) {
	s := bigScript()
	b.SetBytes(int64(len(s)))
	cpu0 := processCPU()
	for i := 0; i < b.N; i++ {
		Normalize(s)
	}
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}
