package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/core/layer"
	"github.com/aleph-sandbox/aleph-sandbox/service"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

var _ alephsandbox.LayerHost = (*Pipeline)(nil)

// layerErr is a layered call's error status as the runtime's error of the
// same meaning (core.ErrNoLayer, layer.ErrBadPath, ...), wrapped with the
// service's message, so a front end tells them apart as it does
// in-process.
func layerErr(err error) error {
	var sentinel error
	switch Detail(err).GetReasonCode() {
	case service.ReasonNoLayer:
		sentinel = core.ErrNoLayer
	case service.ReasonBadPath:
		sentinel = layer.ErrBadPath
	case service.ReasonLayerMounted:
		sentinel = layer.ErrLayerMounted
	case service.ReasonLayeredMode:
		sentinel = core.ErrLayeredMode
	case service.ReasonLayeredUnavailable:
		sentinel = core.ErrLayeredUnavailable
	default:
		return err
	}
	msg := err.Error()
	var ce *connect.Error
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	return fmt.Errorf("%w (%s)", sentinel, msg)
}

// Changes implements alephsandbox.LayerHost.
func (h *Pipeline) Changes(ctx context.Context, session string) ([]layer.Change, error) {
	resp, err := h.C.Changes(ctx, connect.NewRequest(&hostv1.ChangesRequest{Session: session}))
	if err != nil {
		return nil, layerErr(err)
	}
	out := make([]layer.Change, 0, len(resp.Msg.GetChanges()))
	for _, c := range resp.Msg.GetChanges() {
		out = append(out, layer.Change{Path: c.GetPath(), Kind: c.GetKind(), Type: c.GetType(), OldType: c.GetOldType(),
			Mode: c.GetMode(), OldMode: c.GetOldMode(), Size: c.GetSize(), Target: c.GetTarget()})
	}
	return out, nil
}

// Diff implements alephsandbox.LayerHost.
func (h *Pipeline) Diff(ctx context.Context, session string, paths ...string) (string, error) {
	resp, err := h.C.Diff(ctx, connect.NewRequest(&hostv1.DiffRequest{Session: session, Paths: paths}))
	if err != nil {
		return "", layerErr(err)
	}
	return resp.Msg.GetDiff(), nil
}

// Apply implements alephsandbox.LayerHost.
func (h *Pipeline) Apply(ctx context.Context, session string, paths []string, opt layer.ApplyOptions) (layer.ApplyResult, error) {
	resp, err := h.C.Apply(ctx, connect.NewRequest(&hostv1.ApplyRequest{Session: session, Paths: paths, AllowLarge: opt.AllowLarge}))
	if err != nil {
		return layer.ApplyResult{}, layerErr(err)
	}
	m := resp.Msg
	res := layer.ApplyResult{Applied: m.GetApplied(), Conflicts: m.GetConflicts(), Refused: make([]layer.Refusal, 0, len(m.GetRefused()))}
	for _, r := range m.GetRefused() {
		res.Refused = append(res.Refused, layer.Refusal{Path: r.GetPath(), Reason: r.GetReason(), Detail: r.GetDetail()})
	}
	if g := m.GetGitJson(); g != "" {
		res.Git = &layer.GitImportResult{}
		if err := json.Unmarshal([]byte(g), res.Git); err != nil {
			return res, fmt.Errorf("apply: the service's git import result: %w", err)
		}
	}
	return res, nil
}

// Discard implements alephsandbox.LayerHost.
func (h *Pipeline) Discard(ctx context.Context, session string) error {
	if _, err := h.C.Discard(ctx, connect.NewRequest(&hostv1.DiscardRequest{Session: session})); err != nil {
		return layerErr(err)
	}
	return nil
}
