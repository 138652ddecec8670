package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/cmd/aleph-sandbox/internal/termsafe"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/core/layer"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// The layered session tools' names (docs/mcp.md).
const (
	ToolChanges = "changes"
	ToolDiff    = "diff"
	ToolApply   = "apply"
)

// ChangesArgs are changes's arguments: none, the session is the server's.
type ChangesArgs struct{}

// ChangesResult is changes's structured result.
type ChangesResult struct {
	Changes []layer.Change `json:"changes"`
	LayerError
}

// DiffArgs are diff's arguments.
type DiffArgs struct {
	Paths []string `json:"paths,omitempty" jsonschema:"only changes at or below these workspace-relative paths (default: all)"`
}

// DiffResult is diff's structured result.
type DiffResult struct {
	Diff string `json:"diff"`
	LayerError
}

// ApplyArgs are apply's arguments.
type ApplyArgs struct {
	Paths []string `json:"paths,omitempty" jsonschema:"only changes at or below these workspace-relative paths (default: all)"`
}

// ApplyResult is apply's structured result: what was applied, refused
// (with reasons) and in conflict; Command is set when the apply was
// refused because the user did not approve it.
type ApplyResult struct {
	layer.ApplyResult
	// Command is the CLI command the user can run to apply the changes
	// when the tool was refused.
	Command string `json:"command,omitempty"`
	LayerError
}

// LayerError is what a layered session tool reports when it failed or was
// refused: the error and a reason code (not_approved, no_layer, bad_path,
// layer_failed).
type LayerError struct {
	Error      string `json:"error,omitempty"`
	ReasonCode string `json:"reason_code,omitempty"`
}

// Reason codes of LayerError.
const (
	// ReasonNotApproved: apply was not approved by the user (declined, or
	// the client cannot ask).
	ReasonNotApproved = "not_approved"
	ReasonNoLayer     = "no_layer"
	ReasonBadPath     = "bad_path"
	ReasonLayerFailed = "layer_failed"
)

func layerError(err error) LayerError {
	le := LayerError{Error: err.Error(), ReasonCode: ReasonLayerFailed}
	switch {
	case errors.Is(err, core.ErrNoLayer):
		le.ReasonCode = ReasonNoLayer
	case errors.Is(err, layer.ErrBadPath):
		le.ReasonCode = ReasonBadPath
	}
	return le
}

// maxShownChanges bounds the changes an apply question lists; the rest
// is counted.
const maxShownChanges = 40

var (
	annotateChanges = &mcp.ToolAnnotations{Title: "List a layered session's changes",
		ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: boolPtr(false)}
	annotateDiff = &mcp.ToolAnnotations{Title: "Diff a layered session's changes",
		ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: boolPtr(false)}
	annotateApply = &mcp.ToolAnnotations{Title: "Apply a layered session's changes to the host (the user approves)",
		DestructiveHint: boolPtr(true), OpenWorldHint: boolPtr(false)}
)

// applyCommand is the CLI command that applies the session's changes, for
// the user to run when the tool was refused: with --host when this server
// sends its calls to a service, whose process holds the session's layer.
func applyCommand(host string, hostOptions []string, session string, paths []string) string {
	parts := []string{"aleph-sandbox", "session", "apply"}
	if host != "" {
		parts = append(parts, "--host", shellQuote(host))
		for _, o := range hostOptions {
			parts = append(parts, shellQuote(o))
		}
	}
	parts = append(parts, shellQuote(session))
	for _, p := range paths {
		parts = append(parts, shellQuote(p))
	}
	return strings.Join(parts, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:@+,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// applyPrefix names an apply question by what it shows (the paths asked
// and the changes listed), so that an answer counts only for the changes
// its user saw: a command run between the question and the answer that
// changes the layer makes the server ask again.
func applyPrefix(session string, paths []string, changes []layer.Change) string {
	b, _ := json.Marshal(struct {
		S string
		P []string
		C []layer.Change
	}{session, paths, changes})
	return "apply-" + driverapi.Digest(b)[:16] + "-"
}

// applyQuestion is the elicitation shown to the user: the changes that
// would reach the host, escaped (paths are the sandbox's, and must not
// add lines or reorder the question).
func applyQuestion(session string, changes []layer.Change) *mcp.ElicitParams {
	var b strings.Builder
	fmt.Fprintf(&b, "aleph-sandbox: apply %d change(s) of sandbox session %s to your files?", len(changes), termsafe.Escape(session))
	for i, c := range changes {
		if i == maxShownChanges {
			fmt.Fprintf(&b, "\n  ... and %d more (aleph-sandbox session changes %s)", len(changes)-i, termsafe.Escape(session))
			break
		}
		fmt.Fprintf(&b, "\n  %s %s", c.Kind, termsafe.Escape(c.Path))
	}
	b.WriteString("\nWhat must never reach the host (tool configs, git internals, set-id files, links out) is refused whatever the answer.")
	return &mcp.ElicitParams{
		Mode:    "form",
		Message: b.String(),
		RequestedSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"approve": map[string]any{"type": "boolean", "title": "Apply", "description": "apply these changes to the host's files"},
			},
			"required": []string{"approve"},
		},
	}
}

// addLayerTools registers changes, diff and apply on the server's session.
// changes and diff are read-only; apply changes the user's files, so it
// runs only when the user accepts it by elicitation, showing the changes;
// otherwise it is refused with the CLI command the user can run. The
// server's --yes does not answer it: approving elevations of sandboxed
// commands is not approving writes to the host.
func addLayerTools(s *mcp.Server, cfg Config, lh alephsandbox.LayerHost, asked *askedSet) {
	mcp.AddTool(s, &mcp.Tool{
		Name: ToolChanges,
		Description: "List what a layered session (run_command with layered: true) changed in its workspace: added, modified, deleted, type changes, modes. " +
			"The user's files are untouched until the user applies the changes.",
		Annotations: annotateChanges,
	}, func(ctx context.Context, _ *mcp.CallToolRequest, _ ChangesArgs) (*mcp.CallToolResult, ChangesResult, error) {
		res := ChangesResult{Changes: []layer.Change{}}
		ch, err := lh.Changes(ctx, cfg.Session)
		if err != nil {
			res.LayerError = layerError(err)
			return toolError("changes: "+err.Error(), res), res, nil
		}
		res.Changes = append(res.Changes, ch...)
		var b strings.Builder
		for _, c := range ch {
			fmt.Fprintf(&b, "%s\t%s\n", c.Kind, c.Path)
		}
		if len(ch) == 0 {
			b.WriteString("(no changes)")
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}}, res, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        ToolDiff,
		Description: "A unified diff of a layered session's text changes (binary files named), all or those at or below paths.",
		Annotations: annotateDiff,
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in DiffArgs) (*mcp.CallToolResult, DiffResult, error) {
		var res DiffResult
		d, err := lh.Diff(ctx, cfg.Session, in.Paths...)
		if err != nil {
			res.LayerError = layerError(err)
			return toolError("diff: "+err.Error(), res), res, nil
		}
		res.Diff = d
		text := d
		if text == "" {
			text = "(no changes)"
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, res, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name: ToolApply,
		Description: "Bring a layered session's changes (all, or those at or below paths) to the user's files. " +
			"The user is asked and sees the changes; without the user's approval it is refused, with the command the user can run instead. " +
			"Tool configs, git internals, set-id files and links leading out are never applied.",
		Annotations: annotateApply,
	}, func(ctx context.Context, req *mcp.CallToolRequest, in ApplyArgs) (*mcp.CallToolResult, ApplyResult, error) {
		res := ApplyResult{}
		ch, err := lh.Changes(ctx, cfg.Session)
		if err != nil {
			res.LayerError = layerError(err)
			return toolError("apply: "+err.Error(), res), res, nil
		}
		shown := slices.DeleteFunc(slices.Clone(ch), func(c layer.Change) bool { return !underAny(c.Path, in.Paths) })
		if len(shown) == 0 {
			if len(in.Paths) > 0 {
				// Paths that match nothing may be bad ones: the layer
				// says so (bad_path) as apply itself would.
				if _, err := lh.Diff(ctx, cfg.Session, in.Paths...); err != nil {
					res.LayerError = layerError(err)
					return toolError("apply: "+err.Error(), res), res, nil
				}
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "nothing to apply"}}}, res, nil
		}
		refuse := func(why string) (*mcp.CallToolResult, ApplyResult, error) {
			res.Command = applyCommand(cfg.Host, cfg.HostOptions, cfg.Session, in.Paths)
			res.LayerError = LayerError{Error: "apply " + why, ReasonCode: ReasonNotApproved}
			return toolError(fmt.Sprintf("apply %s: nothing was applied. The user can review the changes and apply them with: %s", why, res.Command), res), res, nil
		}
		if !canElicit(req.Session) {
			return refuse("needs the user's approval and this client cannot ask the user")
		}
		prefix := applyPrefix(cfg.Session, in.Paths, shown)
		if r, ok := asked.takePrefix(prefix, req.Params.InputResponses); ok {
			er, _ := r.(*mcp.ElicitResult)
			if er == nil || er.Action != "accept" {
				return refuse("was declined by the user")
			}
			if v, _ := er.Content["approve"].(bool); !v {
				return refuse("was not approved by the user")
			}
			ar, err := lh.Apply(ctx, cfg.Session, in.Paths, layer.ApplyOptions{})
			if err != nil {
				res.LayerError = layerError(err)
				return toolError("apply: "+err.Error(), res), res, nil
			}
			res.ApplyResult = ar
			return applySummary(res), res, nil
		}
		id := prefix + randomHex()
		asked.add(id)
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{id: applyQuestion(cfg.Session, shown)}}, ApplyResult{}, nil
	})
}

// applySummary is the text form of an apply's result; something refused
// or in conflict makes it a tool error, as it makes the CLI's exit 1.
func applySummary(res ApplyResult) *mcp.CallToolResult {
	var b strings.Builder
	fmt.Fprintf(&b, "applied %d, refused %d, conflicts %d", len(res.Applied), len(res.Refused), len(res.Conflicts))
	for _, p := range res.Applied {
		b.WriteString("\napplied\t" + p)
	}
	for _, r := range res.Refused {
		b.WriteString("\nrefused\t" + r.Path + "\t" + r.Reason)
	}
	for _, p := range res.Conflicts {
		b.WriteString("\nconflict\t" + p)
	}
	r := &mcp.CallToolResult{IsError: !res.Clean(), Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}}
	if r.IsError {
		r.StructuredContent = res
	}
	return r
}

// underAny reports whether p is at or below one of paths (all when none).
func underAny(p string, paths []string) bool {
	if len(paths) == 0 {
		return true
	}
	for _, q := range paths {
		q = strings.Trim(q, "/")
		if q == "" || q == "." || p == q || strings.HasPrefix(p, q+"/") {
			return true
		}
	}
	return false
}
