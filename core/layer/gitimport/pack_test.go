//go:build linux

package gitimport

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"os"
	"os/exec"
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

// TestImportPackIndexLies: a pack index that names the session's commit
// at the offset of another object: the object read there does not hash
// to the name, the branch is refused, and nothing of it reaches the host.
// The control: the same pack with its true index imports.
func TestImportPackIndexLies(t *testing.T) {
	requireGit(t)
	for _, lie := range []bool{false, true} {
		s := newScenario(t, hostRepo)
		s.session(t, "echo s > s.txt && git add s.txt && git commit -qm session && git gc -q")
		head := sh(t, s.merged, "git rev-parse HEAD")
		idxs, _ := filepath.Glob(filepath.Join(s.upper, ".git/objects/pack/pack-*.idx"))
		if len(idxs) != 1 {
			t.Fatalf("idx %v", idxs)
		}
		if lie {
			b, err := os.ReadFile(idxs[0])
			must(t, err)
			n := int(binary.BigEndian.Uint32(b[8+255*4:]))
			names, offs := b[8+1024:], b[8+1024+24*n:]
			i := bytes.Index(names[:20*n], mustHex(head)) / 20
			// Another commit (its parent): the type fits, only the
			// content's hash tells.
			j := bytes.Index(names[:20*n], mustHex(sh(t, s.merged, "git rev-parse HEAD~1"))) / 20
			oi, oj := offs[4*i:4*i+4], offs[4*j:4*j+4]
			var tmp [4]byte
			copy(tmp[:], oi)
			copy(oi, oj)
			copy(oj, tmp[:])
			must(t, os.Remove(idxs[0]))
			must(t, os.WriteFile(idxs[0], b, 0o444))
		}
		res := s.run(t, nil)
		if !lie {
			if !updated(res, "refs/heads/main") {
				t.Fatalf("control: the sound pack did not import: %+v", res)
			}
			continue
		}
		if !refused(res, "refs/heads/main", ReasonInvalidObject) || updated(res, "refs/heads/main") {
			t.Fatalf("result %+v", res)
		}
		if exec.Command("git", "--git-dir="+filepath.Join(s.host, ".git"), "cat-file", "-e", head).Run() == nil {
			t.Fatal("the commit reached the host")
		}
	}
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}
