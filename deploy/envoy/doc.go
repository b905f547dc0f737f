// Command envoy writes envoy.yaml, the Envoy bootstrap that fronts lockd:
// SPIFFE mTLS for callers from the SPIRE agent's SDS, the caller's SPIFFE
// ID forwarded to lockd in x-forwarded-client-cert, a local rate limit per
// caller identity, and ring-hash routing on the x-lock-key header, so that
// every waiter for a key reaches the same lockd.
//
// The configuration is built as go-control-plane proto objects and written
// as YAML; its test validates every message with the protoc-gen-validate
// rules Envoy itself enforces, unpacks every typed_config, and checks that
// the committed envoy.yaml is what the generator writes. Envoy itself is
// not run here. Regenerate after a change:
//
//	cd deploy/envoy && go generate
//
// lockd behind it must be started with --edge-identity set to Envoy's
// SPIFFE ID (docs/operating.md, "Behind Envoy").
//
// It is a module of its own so that go-control-plane's dependency tree
// stays out of lockd's go.mod.
package main

//go:generate go run . -out envoy.yaml
