//go:build linux

package gitimport

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestImportPackDeltas: packs the session's git wrote with offset deltas
// (gc) and with ref deltas (repack.useDeltaBaseOffset=false) are read,
// each object rebuilt and checked against its name, and imported.
func TestImportPackDeltas(t *testing.T) {
	requireGit(t)
	for _, tc := range []struct{ name, repack string }{
		{"ofs-delta", "git gc -q"},
		{"ref-delta", "git -c repack.useDeltaBaseOffset=false repack -q -a -d -f"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, hostRepo)
			s.session(t, `seq 1 2000 > big.txt && git add big.txt && git commit -qm big &&
for i in 1 2 3 4 5 6; do sed -i "s/^$((i*100))\$/changed $i/" big.txt && git commit -qam "edit $i"; done && `+tc.repack)
			packs, _ := filepath.Glob(filepath.Join(s.merged, ".git/objects/pack/pack-*.idx"))
			if len(packs) != 1 {
				t.Fatalf("packs %v", packs)
			}
			// The control: the pack really holds deltas.
			if v := sh(t, s.merged, "git verify-pack -v "+packs[0]); !strings.Contains(v, "chain length = ") {
				t.Fatalf("the session's pack holds no deltas:\n%s", v)
			}
			res := s.run(t, nil)
			if !updated(res, "refs/heads/main") || len(res.Refused) > 0 || res.Objects < 14 {
				t.Fatalf("result %+v", res)
			}
			if got, want := sh(t, s.host, "git rev-parse HEAD:big.txt"), sh(t, s.merged, "git rev-parse HEAD:big.txt"); got != want {
				t.Fatalf("big.txt %s, want %s", got, want)
			}
			sh(t, s.host, "git fsck --strict --no-dangling")
		})
	}
}
