package testserver

import (
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// TestStartPrometheusScrapesAndAnswers: a target's gauge comes back from an
// instant query, a bad query is an error, and the server is gone after the
// test.
func TestStartPrometheusScrapesAndAnswers(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "testserver_answer", Help: "A value to scrape."})
	reg.MustRegister(g)
	g.Set(42)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })

	var url string
	t.Run("started", func(t *testing.T) {
		url = StartPrometheus(t, l.Addr().String())
		start := time.Now()
		var v model.Value
		require.Eventually(t, func() bool {
			v, err = QueryPrometheus(t.Context(), url, `testserver_answer{job="lockd"}`)
			return err == nil && len(v.(model.Vector)) == 1
		}, 10*time.Second, 250*time.Millisecond, "last: %v, %v", v, err)
		require.Equal(t, model.SampleValue(42), v.(model.Vector)[0].Value)
		t.Logf("first sample queryable %v after Prometheus was ready", time.Since(start).Round(100*time.Millisecond))

		_, err = QueryPrometheus(t.Context(), url, `rate(testserver_answer[`)
		require.ErrorContains(t, err, "parse error")
	})
	_, err = http.Get(url + "/-/ready")
	require.Error(t, err, "killed when the test ended")
}

func TestPrometheusBinaryMissing(t *testing.T) {
	saved := prometheusBin
	t.Cleanup(func() { prometheusBin = saved })
	prometheusBin = filepath.Join(t.TempDir(), "prometheus")
	t.Setenv("PATH", t.TempDir())
	_, err := PrometheusBinary()
	require.ErrorContains(t, err, "bash ci/tools.sh apt")
}
