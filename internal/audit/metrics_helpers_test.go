package audit_test

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func strconvHex(v uint64) string { return strconv.FormatUint(v, 16) }

// gathered is one series of a registry, as a collector testutil can read:
// the metric named name with cluster="<cluster>" (0 when absent).
type gathered struct {
	reg           *prometheus.Registry
	name, cluster string
}

func (g gathered) Describe(ch chan<- *prometheus.Desc) {
	ch <- prometheus.NewDesc(g.name, "test view", nil, nil)
}

func (g gathered) Collect(ch chan<- prometheus.Metric) {
	v := 0.0
	mfs, _ := g.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != g.name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelIs(m, "cluster", g.cluster) {
				v = m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(g.name, "test view", nil, nil), prometheus.GaugeValue, v)
}

func labelIs(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}
