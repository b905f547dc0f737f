package tracing

import (
	"errors"
	"testing"
)

func TestEnabled(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"nothing set", nil, false},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, true},
		{"traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4317"}, true},
		{"exporter otlp", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{"exporter none wins", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, false},
		{"sdk disabled wins", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false},
		{"only a sampler", map[string]string{"OTEL_TRACES_SAMPLER": "always_on"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Enabled(func(k string) string { return tc.env[k] }); got != tc.want {
				t.Errorf("Enabled = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFromEnvRefusesWhatItCannotExport(t *testing.T) {
	for _, tc := range []struct{ key, value string }{
		{"OTEL_TRACES_EXPORTER", "zipkin"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "thrift"},
	} {
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
		t.Setenv(tc.key, tc.value)
		tp, err := FromEnv(t.Context(), "lockd")
		if !errors.Is(err, ErrConfig) || tp != nil {
			t.Errorf("%s=%s: FromEnv = %v, %v; want ErrConfig", tc.key, tc.value, tp, err)
		}
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "")
	tp, err := FromEnv(t.Context(), "lockd")
	if err != nil || tp == nil {
		t.Fatalf("an OTLP endpoint: FromEnv = %v, %v", tp, err)
	}
	_ = tp.Shutdown(t.Context())
}
