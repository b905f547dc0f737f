package lockd

import (
	"log/slog"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/lockd-dev/lockd/internal/identity"
)

// validateEdges checks EdgeIdentities: each a SPIFFE ID, and none with
// InsecureLoopback (which takes the caller from an asserted header, not
// from mTLS, so there is no edge to trust).
func (o *Config) validateEdges(add func(string, ...any)) {
	if len(o.EdgeIdentities) > 0 && o.InsecureLoopback {
		add("--edge-identity: cannot be combined with --insecure-loopback (an edge is recognised by its mTLS certificate)")
	}
	for _, e := range o.EdgeIdentities {
		if _, err := spiffeid.FromString(e); err != nil {
			add("--edge-identity %q: must be a SPIFFE ID (the edge proxy's, e.g. spiffe://example.org/ns/lockd/sa/envoy): %v", e, err)
		}
	}
}

// extractor is how the gRPC boundary identifies callers: mTLS (the peer, or
// the caller an edge forwards), or the asserted header of
// --insecure-loopback. cfg has been validated.
func extractor(cfg *Config, logger *slog.Logger) identity.Extractor {
	ext := identity.Extractor{Insecure: cfg.InsecureLoopback}
	for _, e := range cfg.EdgeIdentities {
		ext.Edges = append(ext.Edges, spiffeid.RequireFromString(e))
	}
	if len(ext.Edges) > 0 {
		logger.Info("requests from the edge are made for the caller in its "+identity.XFCCHeader+
			" header, and refused without one; the edge itself is never a caller", "edge_identities", cfg.EdgeIdentities)
	}
	return ext
}
