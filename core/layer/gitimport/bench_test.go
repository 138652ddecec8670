//go:build linux

package gitimport

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// benchSession is a session of 100 commits, each adding 9 files: 1,100
// new loose objects.
const benchSession = `for c in $(seq 1 100); do mkdir d$c && for f in 1 2 3 4 5 6 7 8 9; do echo "$c $f" > d$c/$f; done && git add d$c && git commit -qm "c$c"; done`

// BenchmarkImport1000LooseObjects: importing 100 commits of 1,100 new
// loose objects (read and verified in Go, streamed as one pack into the
// host's index-pack --strict, main fast-forwarded, index reset).
func BenchmarkImport1000LooseObjects(b *testing.B) {
	requireGit(b)
	s := newScenario(b, hostRepo)
	s.session(b, benchSession)
	fresh := filepath.Join(b.TempDir(), "fresh")
	sh(b, filepath.Dir(s.host), "cp -a ws "+fresh)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		must2(b, os.RemoveAll(s.host))
		sh(b, filepath.Dir(s.host), "cp -a "+fresh+" ws")
		b.StartTimer()
		res, err := (&Importer{}).Import(context.Background(), s.importReq("bench"))
		if err != nil || res.Objects < 1000 || !updated(res, "refs/heads/main") {
			b.Fatalf("%v %+v", err, res.Refused)
		}
	}
}

// BenchmarkHashObjectPerObject is the alternative not taken, for the
// ratio: the same objects written one `git hash-object -w` each.
func BenchmarkHashObjectPerObject(b *testing.B) {
	requireGit(b)
	s := newScenario(b, hostRepo)
	s.session(b, benchSession)
	ids := strings.Fields(sh(b, s.merged, "git rev-list --objects main ^"+s.base.Refs["refs/heads/main"]+" | cut -d' ' -f1"))
	type obj struct{ typ, data string }
	var objs []obj
	for _, id := range ids {
		objs = append(objs, obj{sh(b, s.merged, "git cat-file -t "+id), sh(b, s.merged, "git cat-file "+sh(b, s.merged, "git cat-file -t "+id)+" "+id)})
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, o := range objs {
			c := exec.Command("git", "--git-dir="+filepath.Join(s.host, ".git"), "hash-object", "-w", "--stdin", "-t", o.typ)
			c.Stdin = strings.NewReader(o.data)
			if out, err := c.CombinedOutput(); err != nil {
				b.Fatalf("%v %s", err, out)
			}
		}
	}
}

func must2(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}
