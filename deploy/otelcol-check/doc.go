// Package otelcolcheck checks deploy/otel-collector.yaml, the OpenTelemetry
// Collector configuration shipped for lockd: that the collector's own
// config machinery loads and validates it with the components it names,
// and that its redaction processor, built from that file, masks lock
// tokens in every text form and leaves lockd's other attributes alone.
//
// It is a module of its own so that the collector's dependency tree stays
// out of lockd's go.mod:
//
//	cd deploy/otelcol-check && go test ./...
package otelcolcheck
