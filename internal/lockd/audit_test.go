package lockd

import (
	"testing"
	"time"
)

func TestAuditConfigNamesTheFlagAndTheRule(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*AuditConfig)
		want string // "" is valid
	}{
		{"the default", func(*AuditConfig) {}, ""},
		{"on with ClickHouse", func(a *AuditConfig) { a.Mode, a.ClickHouse = AuditOn, "clickhouse://ch:9000/lockd_audit" }, ""},
		{"an unknown mode", func(a *AuditConfig) { a.Mode = "yes" }, "--audit: must be one of auto, on, off"},
		{"not a clickhouse URL", func(a *AuditConfig) { a.ClickHouse = "http://ch:8123" }, "--audit-clickhouse: must be clickhouse://"},
		{"no window", func(a *AuditConfig) { a.CompactionWindow = 0 }, "--audit-compaction-window: must be positive"},
		{"buckets without an endpoint", func(a *AuditConfig) { a.Archive.Bucket = "b" }, "--audit-archive-endpoint: required"},
		{"an endpoint without buckets", func(a *AuditConfig) { a.Archive.Endpoint = "minio:9000" }, "--audit-archive-bucket and --audit-force-bucket: both required"},
		{"a bad retention mode", func(a *AuditConfig) {
			a.Archive.Endpoint, a.Archive.Bucket, a.Archive.ForceBucket, a.Archive.ForceMode = "minio:9000", "h", "f", "LEGAL"
		}, "--audit-force-mode: must be COMPLIANCE or GOVERNANCE"},
		{"a retention under a second", func(a *AuditConfig) {
			a.Archive.Endpoint, a.Archive.Bucket, a.Archive.ForceBucket, a.Archive.ForceRetention = "minio:9000", "h", "f", time.Millisecond
		}, "--audit-force-retention: must be at least 1s"},
	}
	var cases []configCase
	for _, tt := range tests {
		mod := tt.mod
		cases = append(cases, configCase{tt.name, func(c *Config) { mod(&c.Audit) }, tt.want})
	}
	checkConfigCases(t, cases)
}
