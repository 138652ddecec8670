package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"

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
	// pendingSession is the session of each pending request, by id: an
	// Approve is compared with its session header (sessionheader.go).
	pendingSession map[string]string
	// boxes hold the requests of calls that named an approval key, for
	// the Approvals stream opened with that key (the client's own
	// approver), whichever of the two comes first.
	boxes map[string]*approvalBox
	// settled remembers for a while the keys whose calls are over, so
	// that a stream connecting after its call settled ends at once
	// instead of waiting for a call that will not come.
	settled map[string]time.Time
	closed  chan struct{}
	once    sync.Once
}

// NewBroker returns a broker; autoApprove is `serve --yes`. digest, when
// set, gives each request the session's current policy digest.
func NewBroker(autoApprove bool, digest func(session string) string) *Broker {
	return &Broker{autoApprove: autoApprove, digest: digest,
		subs: map[chan *hostv1.ApprovalRequest]struct{}{}, pending: map[string]chan driverapi.ApprovalOutcome{},
		pendingSession: map[string]string{}, boxes: map[string]*approvalBox{}, settled: map[string]time.Time{}, closed: make(chan struct{})}
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

// approvalBox carries the approval requests of the calls naming one key
// to the Approvals stream opened with it. It lives while a call or a
// stream uses it; done is closed when a call using it ends, which ends
// the stream (the client's approver has nothing more to answer).
type approvalBox struct {
	ch    chan *hostv1.ApprovalRequest
	done  chan struct{}
	users int
}

// maxApprovalKey bounds an approval key, as a signal key is bounded.
const maxApprovalKey = 256

// settledMemory is how long a settled key is remembered.
const settledMemory = 5 * time.Minute

// box takes a use of key's box, created on first use; release gives it
// back (call true: a keyed call ended, which ends the stream).
func (b *Broker) box(key string) (*approvalBox, func(call bool)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	for k, t := range b.settled {
		if now.Sub(t) > settledMemory {
			delete(b.settled, k)
		}
	}
	bx := b.boxes[key]
	if bx == nil {
		bx = &approvalBox{ch: make(chan *hostv1.ApprovalRequest, 16), done: make(chan struct{})}
		if _, ok := b.settled[key]; ok {
			close(bx.done)
		}
		b.boxes[key] = bx
	}
	bx.users++
	var once sync.Once
	return bx, func(call bool) {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			if call {
				b.settled[key] = time.Now()
				select {
				case <-bx.done:
				default:
					close(bx.done)
				}
			}
			if bx.users--; bx.users == 0 && b.boxes[key] == bx {
				delete(b.boxes, key)
			}
		})
	}
}

// withApprovalKey routes ctx's approval requests to key's box, for the
// Approvals stream opened with the same key. A request waits there for
// that stream (within the approval timeout) if it is not connected yet.
func (b *Broker) withApprovalKey(ctx context.Context, key string) (context.Context, func()) {
	bx, release := b.box(key)
	send := func(m *hostv1.ApprovalRequest) error {
		select {
		case bx.ch <- m:
			return nil
		default:
			return errors.New("too many approval requests waiting for the approver")
		}
	}
	return withOwnApprover(ctx, send), func() { release(true) }
}

// answer delivers a client's answer to request id: approved and once
// (ApproveRequest.once) is a yes for that command only, which the
// pipeline does not keep as a grant of the session.
func (b *Broker) answer(id string, approved, once bool) bool {
	b.mu.Lock()
	ch, ok := b.pending[id]
	delete(b.pending, id)
	delete(b.pendingSession, id)
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
	b.pendingSession[msg.Id] = req.SessionID
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.pending, msg.Id)
		delete(b.pendingSession, msg.Id)
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

// pendingSessionOf is the session of the pending request id, if one is.
func (b *Broker) pendingSessionOf(id string) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.pendingSession[id]
	return s, ok
}
