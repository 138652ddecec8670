package driverapi

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/aleph-sandbox/aleph-sandbox/driverapi/proto/alephv1"
)

// OpenLayeredView across go-plugin (protocol 1.7): a stream both ways, so
// that its end can say when the driver has let go of the view. The host
// sends the request and later closes its side; the driver answers the
// view, waits for that close (or the host's cancel), releases the view and
// ends the stream. A server stream that the host cancels would say nothing
// back: the host would release its own locks while the driver might still
// hold the overlay's descriptor and the upper's flock, and the session's
// next command would be refused for nothing.

func (s *driverServer) OpenLayeredView(stream pb.OsSandboxDriver_OpenLayeredViewServer) error {
	o, ok := s.impl.(LayeredViewOpener)
	if !ok {
		return status.Error(codes.Unimplemented, "this driver does not implement OpenLayeredView")
	}
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	r := LayeredViewRequest{SessionID: req.GetSessionId(), Workspace: req.GetWorkspace()}
	if l := req.GetLayered(); l != nil {
		r.Layered = LayeredWorkspace{Upper: l.GetUpper(), Work: l.GetWork(), Lock: l.GetLock(), UserNS: l.GetUserNs()}
	}
	if err := r.validate(); err != nil {
		return toStatus(err)
	}
	// The view lives until the host closes its side or the stream ends.
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	go func() {
		defer cancel()
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
		}
	}()
	lv, err := o.OpenLayeredView(ctx, r)
	if err != nil {
		return toStatus(err)
	}
	serr := stream.Send(&pb.LayeredViewResponse{Mounted: lv.Mounted, Path: lv.Path, Dev: lv.Dev, Ino: lv.Ino})
	if serr != nil {
		cancel()
	}
	<-ctx.Done()
	if lv.Ended != nil {
		<-lv.Ended
	}
	return serr
}

// validate checks what a driver relies on.
func (r LayeredViewRequest) validate() error {
	if r.SessionID == "" {
		return &InvalidSpecError{Field: "session_id", Reason: "empty"}
	}
	if r.Workspace == "" || r.Workspace[0] != '/' {
		return &InvalidSpecError{Field: "workspace", Reason: "not an absolute path"}
	}
	return r.Layered.Validate()
}

// layeredViewEndWait bounds how long the host waits for the driver to say
// it released a view; past it the stream is cancelled (the driver's side
// ends with it all the same) and Ended closes.
const layeredViewEndWait = 30 * time.Second

// OpenLayeredView asks the driver to mount the layer's overlay for the
// host (LayeredViewOpener). Callers check Supports(CallLayeredViewOpen)
// first. The stream is not the caller's ctx: it is closed from this side
// when ctx ends, and Ended closes when the driver has ended it.
func (d *driverClient) OpenLayeredView(ctx context.Context, req LayeredViewRequest) (LayeredView, error) {
	sctx, scancel := context.WithCancel(context.WithoutCancel(ctx))
	// Until the view is answered, ctx's end cancels the call itself.
	stop := context.AfterFunc(ctx, scancel)
	st, err := d.c.OpenLayeredView(sctx)
	if err != nil {
		stop()
		scancel()
		return LayeredView{}, d.callError("OpenLayeredView", CallLayeredViewOpen, err)
	}
	l := req.Layered
	if err := st.Send(&pb.OpenLayeredViewRequest{SessionId: req.SessionID, Workspace: req.Workspace,
		Layered: &pb.LayeredWorkspace{Upper: l.Upper, Work: l.Work, Lock: l.Lock, UserNs: l.UserNS}}); err != nil {
		stop()
		scancel()
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return LayeredView{}, ctx.Err()
		}
		// The driver's refusal, if any, comes with Recv.
		if _, rerr := st.Recv(); rerr != nil {
			err = rerr
		}
		return LayeredView{}, d.callError("OpenLayeredView", CallLayeredViewOpen, err)
	}
	r, err := st.Recv()
	if !stop() || err != nil {
		scancel()
		if ctx.Err() != nil {
			return LayeredView{}, ctx.Err()
		}
		return LayeredView{}, d.callError("OpenLayeredView", CallLayeredViewOpen, err)
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer scancel()
		<-ctx.Done()
		_ = st.CloseSend()
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				if _, err := st.Recv(); err != nil {
					return
				}
			}
		}()
		t := time.NewTimer(layeredViewEndWait)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			scancel()
			<-done
		}
	}()
	return LayeredView{Mounted: r.GetMounted(), Path: r.GetPath(), Dev: r.GetDev(), Ino: r.GetIno(), Ended: ended}, nil
}
