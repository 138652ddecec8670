package alephsandbox_test

import (
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/core/proxy"
)

// The managed proxy plugs into the pipeline through core.NetworkMediator;
// this fails to compile if the two drift apart.
var _ core.NetworkMediator = (*proxy.Mediator)(nil)
