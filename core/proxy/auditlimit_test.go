package proxy

import (
	"fmt"
	"testing"
)

// accounted is how many decisions a list of records stands for.
func accounted(ds []Decision) int {
	n := 0
	for _, d := range ds {
		if d.Suppressed > 0 {
			n += d.Suppressed
		} else {
			n++
		}
	}
	return n
}

func TestAuditLimiter(t *testing.T) {
	deny := func(host string) Decision {
		return Decision{Host: host, Port: 443, Protocol: ProtocolConnect, ReasonCode: ReasonHostNotAllowed, Detail: "no entry"}
	}
	cases := []struct {
		name          string
		perKey, total int
		feed          []Decision
		wantOneByOne  int
		wantSummaries []Decision // Host, Suppressed compared
	}{
		{
			name: "under both bounds: every decision one by one", perKey: 5, total: 100,
			feed:         []Decision{deny("a"), deny("a"), deny("b")},
			wantOneByOne: 3,
		},
		{
			name: "repeats past the per-target bound are counted", perKey: 3, total: 100,
			feed:          repeat(deny("a"), 10),
			wantOneByOne:  3,
			wantSummaries: []Decision{{Host: "a", Suppressed: 7}},
		},
		{
			name: "distinct targets past the total are counted per target", perKey: 3, total: 4,
			feed:          distinct(6),
			wantOneByOne:  4,
			wantSummaries: []Decision{{Host: "h4.example", Suppressed: 1}, {Host: "h5.example", Suppressed: 1}},
		},
		{
			name: "targets beyond the counted keys fall into one catch-all", perKey: 1, total: 2,
			feed:          distinct(auditKeys + 10),
			wantOneByOne:  2,
			wantSummaries: nil, // checked by count below
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []Decision
			a := newAuditLimiter(func(d Decision) { got = append(got, d) }, tc.perKey, tc.total, "s", "c")
			for _, d := range tc.feed {
				a.record(d)
			}
			if len(got) != tc.wantOneByOne {
				t.Fatalf("%d records one by one before close, want %d", len(got), tc.wantOneByOne)
			}
			a.flush()
			if n := accounted(got); n != len(tc.feed) {
				t.Fatalf("records account for %d decisions, %d were made", n, len(tc.feed))
			}
			sums := got[tc.wantOneByOne:]
			for _, d := range sums {
				if d.Suppressed == 0 || d.SessionID != "s" || d.CommandID != "c" || d.Allowed || d.ReasonCode != ReasonHostNotAllowed {
					t.Fatalf("summary %+v", d)
				}
			}
			if tc.wantSummaries != nil {
				if len(sums) != len(tc.wantSummaries) {
					t.Fatalf("summaries %+v, want %+v", sums, tc.wantSummaries)
				}
				for i, w := range tc.wantSummaries {
					if sums[i].Host != w.Host || sums[i].Suppressed != w.Suppressed || sums[i].Port != 443 {
						t.Fatalf("summary %d = %+v, want host %q suppressed %d", i, sums[i], w.Host, w.Suppressed)
					}
				}
			}
			if tc.name == "targets beyond the counted keys fall into one catch-all" {
				last := sums[len(sums)-1]
				if last.Host != "" || last.Port != 0 || last.Suppressed != 10 {
					t.Fatalf("catch-all summary %+v, want 10 decisions with no host", last)
				}
				if len(sums) != auditKeys-2+1 {
					t.Fatalf("%d summaries, want one per counted key past the total and one catch-all", len(sums))
				}
			}
		})
	}
}

func repeat(d Decision, n int) []Decision {
	out := make([]Decision, n)
	for i := range out {
		out[i] = d
	}
	return out
}

func distinct(n int) []Decision {
	out := make([]Decision, n)
	for i := range out {
		out[i] = Decision{Host: fmt.Sprintf("h%d.example", i), Port: 443, Protocol: ProtocolConnect, ReasonCode: ReasonHostNotAllowed}
	}
	return out
}

// TestAuditFloodBounded: a client looping on a denied CONNECT gets its
// first attempts recorded one by one and the rest as one summary when the
// proxy closes; an allowed connect in the middle of the flood is still
// recorded on its own.
func TestAuditFloodBounded(t *testing.T) {
	echo := echoServer(t, "127.0.0.1:0")
	p, log := startProxy(t, []string{echo}, fakeResolver{}, func(c *Config) { c.Limits.AuditPerTarget = 5 })
	const flood = 40
	for i := 0; i < flood; i++ {
		c := dialProxy(t, p, true)
		resp, _ := connect(t, c, "denied.example:443")
		if resp.StatusCode != 403 {
			t.Fatalf("attempt %d: %s", i, resp.Status)
		}
		c.Close()
		if i == flood/2 {
			c := dialProxy(t, p, true)
			if resp, _ := connect(t, c, echo); resp.StatusCode != 200 {
				t.Fatalf("control CONNECT to the listed echo server: %s", resp.Status)
			}
			c.Close()
		}
	}
	before := log.all()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	all := log.all()
	var denied, allowed, summaries int
	for _, d := range before {
		switch {
		case d.Allowed && d.ReasonCode == ReasonAllowed:
			allowed++
		case !d.Allowed && d.Host == "denied.example":
			denied++
		}
	}
	for _, d := range all[len(before):] {
		summaries++
		if d.Host != "denied.example" || d.Port != 443 || d.Allowed || d.ReasonCode != ReasonHostNotAllowed || d.Suppressed != flood-5 {
			t.Fatalf("summary %+v, want %d suppressed denials of denied.example:443", d, flood-5)
		}
	}
	if denied != 5 || allowed != 1 || summaries != 1 {
		t.Fatalf("before close: %d denials, %d allowed; %d summaries at close (want 5, 1, 1)", denied, allowed, summaries)
	}
	if n := accounted(all); n != flood+1 {
		t.Fatalf("records account for %d decisions, %d were made", n, flood+1)
	}
}
