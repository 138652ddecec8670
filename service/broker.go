package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

// Broker answers the pipeline's approval requests (it is the runtime's
// core.ApprovalRequester). A request goes to the client that sent the
// command when it asked to answer its own (ExecuteRequest.answer_approvals),
// else to every client connected to Approvals; the first answer counts.
// With neither, it is denied, or approved when AutoApprove is set. The
// pipeline's approval gate bounds the wait (sandbox.approval_timeout_seconds).
type Broker struct {
	autoApprove bool
	digest      func(session string) string

	mu      sync.Mutex
	subs    map[chan *hostv1.ApprovalRequest]struct{}
	pending map[string]chan driverapi.ApprovalOutcome
	closed  chan struct{}
	once    sync.Once
}

// NewBroker returns a broker; autoApprove is `serve --yes`. digest, when
// set, gives each request the session's current policy digest.
func NewBroker(autoApprove bool, digest func(session string) string) *Broker {
	return &Broker{autoApprove: autoApprove, digest: digest,
		subs: map[chan *hostv1.ApprovalRequest]struct{}{}, pending: map[string]chan driverapi.ApprovalOutcome{}, closed: make(chan struct{})}
}

// SetDigest sets the digest source once the runtime exists (the runtime
// is built with the broker as its approver, so it comes second).
func (b *Broker) SetDigest(digest func(session string) string) {
	b.mu.Lock()
	b.digest = digest
	b.mu.Unlock()
}

// Close ends every Approvals stream; pending requests are denied.
func (b *Broker) Close() { b.once.Do(func() { close(b.closed) }) }

type ownKey struct{}

// withOwnApprover marks ctx as a command whose client answers its own
// requests through send.
func withOwnApprover(ctx context.Context, send func(*hostv1.ApprovalRequest) error) context.Context {
	return context.WithValue(ctx, ownKey{}, send)
}

func (b *Broker) subscribe() (chan *hostv1.ApprovalRequest, func()) {
	ch := make(chan *hostv1.ApprovalRequest, 16)
	b.mu.Lock()
	b.subs[ch] = struct{}{}
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		delete(b.subs, ch)
		b.mu.Unlock()
	}
}

// answer delivers a client's answer to request id: approved and once
// (ApproveRequest.once) is a yes for that command only, which the
// pipeline does not keep as a grant of the session.
func (b *Broker) answer(id string, approved, once bool) bool {
	b.mu.Lock()
	ch, ok := b.pending[id]
	delete(b.pending, id)
	b.mu.Unlock()
	if ok {
		o := driverapi.ApprovalDenied
		switch {
		case approved && once:
			o = driverapi.ApprovalApprovedOnce
		case approved:
			o = driverapi.ApprovalApproved
		}
		ch <- o // buffered: the asker may have given up already
	}
	return ok
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "apr-" + hex.EncodeToString(b[:])
}

// RequestApproval implements core.ApprovalRequester.
func (b *Broker) RequestApproval(ctx context.Context, req driverapi.ApprovalRequest) (driverapi.ApprovalOutcome, error) {
	if b.autoApprove {
		return driverapi.ApprovalApproved, nil
	}
	msg := &hostv1.ApprovalRequest{
		Id: newID(), Session: req.SessionID, CommandId: req.CommandID,
		Argv: append([]string{req.Program}, req.Args...), Summary: req.Summary,
		Requested: capsMsg(req.Requested), Baseline: capsMsg(req.Baseline),
	}
	answer := make(chan driverapi.ApprovalOutcome, 1)
	b.mu.Lock()
	if b.digest != nil {
		msg.PolicyDigest = b.digest(req.SessionID)
	}
	own, _ := ctx.Value(ownKey{}).(func(*hostv1.ApprovalRequest) error)
	var subs []chan *hostv1.ApprovalRequest
	if own == nil {
		for ch := range b.subs {
			subs = append(subs, ch)
		}
		if len(subs) == 0 {
			b.mu.Unlock()
			return driverapi.ApprovalDenied, nil
		}
	}
	b.pending[msg.Id] = answer
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.pending, msg.Id)
		b.mu.Unlock()
	}()
	if own != nil {
		if err := own(msg); err != nil {
			return driverapi.ApprovalDenied, nil
		}
	}
	for _, ch := range subs {
		select {
		case ch <- msg:
		default: // an approver that does not read its stream is skipped
		}
	}
	select {
	case o := <-answer:
		return o, nil
	case <-ctx.Done():
		return driverapi.ApprovalTimeout, nil
	case <-b.closed:
		return driverapi.ApprovalDenied, nil
	}
}
