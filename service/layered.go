package service

import (
	"context"
	"encoding/json"
	"errors"

	"connectrpc.com/connect"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/core/layer"
	"github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

// Reason codes of the layered sessions' errors (ErrorDetail.reason_code).
const (
	// ReasonLayeredMode: the command asks for the other mode (layered or
	// live) than its session's first command fixed.
	ReasonLayeredMode = "layered_mode"
	// ReasonLayeredUnavailable: layered sessions cannot run here (the
	// message says why: the driver, privileges, overlayfs, the OS).
	ReasonLayeredUnavailable = "layered_unavailable"
	// ReasonNoLayer: the session has no layer (no layered command ran in
	// it, or it was discarded).
	ReasonNoLayer = "no_layer"
	// ReasonLayerMounted: the layer is mounted by another process.
	ReasonLayerMounted = "layer_mounted"
	// ReasonBadPath: a path given to Diff or Apply is not a clean
	// workspace-relative path.
	ReasonBadPath = "bad_path"
)

// layerError maps the layered sessions' errors to a status, or returns
// nil when err is none of them.
func layerError(err error) error {
	switch {
	case errors.Is(err, core.ErrLayeredMode):
		return withDetail(connect.CodeFailedPrecondition, err, &hostv1.ErrorDetail{ReasonCode: ReasonLayeredMode})
	case errors.Is(err, core.ErrLayeredUnavailable), errors.Is(err, layer.ErrUnsupported):
		return withDetail(connect.CodeFailedPrecondition, err, &hostv1.ErrorDetail{ReasonCode: ReasonLayeredUnavailable})
	case errors.Is(err, core.ErrNoLayer):
		return withDetail(connect.CodeNotFound, err, &hostv1.ErrorDetail{ReasonCode: ReasonNoLayer, Field: "session"})
	case errors.Is(err, layer.ErrLayerMounted):
		return withDetail(connect.CodeFailedPrecondition, err, &hostv1.ErrorDetail{ReasonCode: ReasonLayerMounted})
	case errors.Is(err, layer.ErrBadPath):
		return withDetail(connect.CodeInvalidArgument, err, &hostv1.ErrorDetail{ReasonCode: ReasonBadPath, Field: "paths"})
	}
	return nil
}

// layerCallError is the status of a failed Changes, Diff, Apply or Discard.
func (s *Server) layerCallError(ctx context.Context, err error) error {
	if le := layerError(err); le != nil {
		return le
	}
	_, rerr := s.result(ctx, nil, err)
	return rerr
}

// Changes implements the service.
func (s *Server) Changes(ctx context.Context, req *connect.Request[hostv1.ChangesRequest]) (*connect.Response[hostv1.ChangesResponse], error) {
	if err := s.fileSession(req.Msg.GetSession()); err != nil {
		return nil, err
	}
	ch, err := s.host.Changes(ctx, req.Msg.GetSession())
	if err != nil {
		return nil, s.layerCallError(ctx, err)
	}
	resp := &hostv1.ChangesResponse{Changes: make([]*hostv1.Change, 0, len(ch))}
	for _, c := range ch {
		resp.Changes = append(resp.Changes, &hostv1.Change{Path: c.Path, Kind: c.Kind, Type: c.Type, OldType: c.OldType,
			Mode: c.Mode, OldMode: c.OldMode, Size: c.Size, Target: c.Target})
	}
	return connect.NewResponse(resp), nil
}

// Diff implements the service.
func (s *Server) Diff(ctx context.Context, req *connect.Request[hostv1.DiffRequest]) (*connect.Response[hostv1.DiffResponse], error) {
	if err := s.fileSession(req.Msg.GetSession()); err != nil {
		return nil, err
	}
	d, err := s.host.Diff(ctx, req.Msg.GetSession(), req.Msg.GetPaths()...)
	if err != nil {
		return nil, s.layerCallError(ctx, err)
	}
	return connect.NewResponse(&hostv1.DiffResponse{Diff: d}), nil
}

// Apply implements the service: what was applied, refused (with reasons)
// and in conflict is the answer, not an error.
func (s *Server) Apply(ctx context.Context, req *connect.Request[hostv1.ApplyRequest]) (*connect.Response[hostv1.ApplyResponse], error) {
	if err := s.fileSession(req.Msg.GetSession()); err != nil {
		return nil, err
	}
	res, err := s.host.Apply(ctx, req.Msg.GetSession(), req.Msg.GetPaths(), layer.ApplyOptions{AllowLarge: req.Msg.GetAllowLarge()})
	if err != nil {
		return nil, s.layerCallError(ctx, err)
	}
	resp := &hostv1.ApplyResponse{Applied: res.Applied, Conflicts: res.Conflicts, Refused: make([]*hostv1.Refusal, 0, len(res.Refused))}
	for _, r := range res.Refused {
		resp.Refused = append(resp.Refused, &hostv1.Refusal{Path: r.Path, Reason: r.Reason, Detail: r.Detail})
	}
	if res.Git != nil {
		b, _ := json.Marshal(res.Git)
		resp.GitJson = string(b)
	}
	return connect.NewResponse(resp), nil
}

// Discard implements the service.
func (s *Server) Discard(ctx context.Context, req *connect.Request[hostv1.DiscardRequest]) (*connect.Response[hostv1.DiscardResponse], error) {
	if err := s.fileSession(req.Msg.GetSession()); err != nil {
		return nil, err
	}
	if err := s.host.Discard(ctx, req.Msg.GetSession()); err != nil {
		return nil, s.layerCallError(ctx, err)
	}
	return connect.NewResponse(&hostv1.DiscardResponse{}), nil
}
