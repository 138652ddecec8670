package core

import "context"

type sessionKey struct{}

// WithSession returns a context carrying the session id. Execute uses it when
// Command.SessionID is empty, so code that runs commands need not thread the
// id through every call.
func WithSession(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, sessionKey{}, id)
}

// SessionFrom returns the session id carried by ctx, if any.
func SessionFrom(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(sessionKey{}).(string)
	return id, ok && id != ""
}
