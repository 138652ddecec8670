package mcpserver_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aleph-sandbox/aleph-sandbox/cmd/aleph-sandbox/internal/mcpserver"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/core/layer"
)

// layerFake is a runner with a layered session of one added file; it
// counts the applies that reached it.
type layerFake struct {
	mu      sync.Mutex
	applied int
	// grows adds a change on every call of Changes after the first: a
	// layer that a command changes while the user is asked.
	grows bool
	calls int
}

func (*layerFake) Execute(context.Context, core.Command) (*core.Output, error) {
	return nil, core.ErrNoLayer
}

func (f *layerFake) Changes(context.Context, string) ([]layer.Change, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	ch := []layer.Change{{Path: "made.txt", Kind: "added", Type: "file", Mode: 0o644, Size: 8}}
	if f.grows && f.calls > 1 {
		ch = append(ch, layer.Change{Path: "later.txt", Kind: "added", Type: "file", Mode: 0o644, Size: 1})
	}
	return ch, nil
}

func (*layerFake) Diff(context.Context, string, ...string) (string, error) { return "+layered\n", nil }

func (f *layerFake) Apply(context.Context, string, []string, layer.ApplyOptions) (layer.ApplyResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied++
	return layer.ApplyResult{Applied: []string{"made.txt"}}, nil
}

func (*layerFake) Discard(context.Context, string) error { return nil }

func (f *layerFake) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied
}

// A client that cannot be asked gets apply refused with the CLI command,
// and the host's Apply is never called; the server's --yes (Fallback)
// does not answer for the user. The control: a client whose user accepts
// gets it applied.
func TestMCPApplyNeedsTheUser(t *testing.T) {
	apply := func(t *testing.T, pc pipeClient, f *layerFake) (*mcp.CallToolResult, mcpserver.ApplyResult) {
		t.Helper()
		srv := mcpserver.New(f, mcpserver.Config{Session: "s 1", Fallback: true})
		t.Cleanup(srv.Close)
		cs := connectPipeTo(t, srv, pc)
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: mcpserver.ToolApply, Arguments: map[string]any{}})
		if err != nil {
			t.Fatal(err)
		}
		var out mcpserver.ApplyResult
		b, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(b, &out)
		return res, out
	}
	t.Run("no elicitation", func(t *testing.T) {
		f := &layerFake{}
		res, out := apply(t, pipeClient{}, f)
		want := "aleph-sandbox session apply 's 1'"
		if !res.IsError || out.ReasonCode != mcpserver.ReasonNotApproved || out.Command != want || f.count() != 0 {
			t.Fatalf("apply without elicitation: %+v %+v, %d applies", res, out, f.count())
		}
		if tc, ok := res.Content[0].(*mcp.TextContent); !ok || !strings.Contains(tc.Text, want) {
			t.Errorf("the text does not name %q: %+v", want, res.Content)
		}
	})
	t.Run("accepted", func(t *testing.T) {
		f := &layerFake{}
		var asked []string
		res, out := apply(t, pipeClient{elicit: func(r *mcp.ElicitRequest) *mcp.ElicitResult {
			asked = append(asked, r.Params.Message)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}
		}}, f)
		if res.IsError || len(out.Applied) != 1 || f.count() != 1 {
			t.Fatalf("accepted apply: %+v %+v, %d applies", res, out, f.count())
		}
		if len(asked) != 1 || !strings.Contains(asked[0], "added made.txt") {
			t.Errorf("questions: %q", asked)
		}
	})
	t.Run("accepted without approve", func(t *testing.T) {
		f := &layerFake{}
		res, out := apply(t, pipeClient{elicit: func(*mcp.ElicitRequest) *mcp.ElicitResult {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": false}}
		}}, f)
		if !res.IsError || out.ReasonCode != mcpserver.ReasonNotApproved || f.count() != 0 {
			t.Fatalf("apply answered approve=false: %+v %+v, %d applies", res, out, f.count())
		}
	})
	t.Run("layer changed after the question", func(t *testing.T) {
		// The answer was to a question that did not show later.txt: the
		// user is asked again, and the second question shows it.
		f := &layerFake{grows: true}
		var asked []string
		res, out := apply(t, pipeClient{elicit: func(r *mcp.ElicitRequest) *mcp.ElicitResult {
			asked = append(asked, r.Params.Message)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}
		}}, f)
		if res.IsError || f.count() != 1 {
			t.Fatalf("apply: %+v %+v, %d applies", res, out, f.count())
		}
		if len(asked) != 2 || strings.Contains(asked[0], "later.txt") || !strings.Contains(asked[1], "added later.txt") {
			t.Errorf("questions: %q", asked)
		}
	})
}
