package archive

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/parquet-go/parquet-go"

	"github.com/lockd-dev/lockd/internal/audit"
	"github.com/lockd-dev/lockd/internal/testserver"
)

// memSource is the archive's input, not the thing under test: a small
// in-memory Source that answers Query by ClusterID, Since/Until,
// FromRevision/ToRevision, Kinds and Limit, in the Sink's order (cluster,
// epoch, revision, key), each identity once. failQueries makes that many
// Queries fail first.
type memSource struct {
	mu          sync.Mutex
	rows        []audit.Event
	failQueries int
	queries     int
}

func (m *memSource) Write(_ context.Context, rows []audit.Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range rows {
		if !slices.ContainsFunc(m.rows, func(o audit.Event) bool { return sameIdentity(o, r) }) {
			m.rows = append(m.rows, r)
		}
	}
	slices.SortFunc(m.rows, func(a, b audit.Event) int {
		switch {
		case a.ClusterID != b.ClusterID:
			return cmpNum(a.ClusterID, b.ClusterID)
		case a.Epoch != b.Epoch:
			return cmpNum(a.Epoch, b.Epoch)
		case a.Revision != b.Revision:
			return cmpNum(a.Revision, b.Revision)
		}
		return strings.Compare(a.Key, b.Key)
	})
	return nil
}

func (m *memSource) Query(_ context.Context, f audit.Filter) ([]audit.Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.queries++
	if m.failQueries > 0 {
		m.failQueries--
		return nil, errors.New("memSource: failing on purpose")
	}
	var out []audit.Event
	for _, r := range m.rows {
		switch {
		case f.ClusterID != 0 && r.ClusterID != f.ClusterID,
			!f.Since.IsZero() && r.ObservedAt.Before(f.Since),
			!f.Until.IsZero() && !r.ObservedAt.Before(f.Until),
			f.FromRevision != 0 && r.Revision < f.FromRevision,
			f.ToRevision != 0 && r.Revision > f.ToRevision,
			len(f.Kinds) > 0 && !slices.Contains(f.Kinds, r.Kind):
			continue
		}
		out = append(out, r)
		if f.Limit > 0 && len(out) == f.Limit {
			break
		}
	}
	return out, nil
}

func (m *memSource) Close() error { return nil }

func sameIdentity(a, b audit.Event) bool {
	return a.ClusterID == b.ClusterID && a.Epoch == b.Epoch && a.Revision == b.Revision && a.Key == b.Key
}

func cmpNum[T int64 | uint64 | uint32](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

const cluster = 0xabc123

var hour = time.Date(2026, 3, 4, 5, 0, 0, 0, time.UTC)

// hourRows are cluster's rows of hour: a grant, a handoff, an expiry, a
// force-release and a gap, at revisions 100 to 104.
func hourRows(hour time.Time) []audit.Event {
	at := func(d time.Duration) time.Time { return hour.Add(d) }
	return []audit.Event{
		{ClusterID: cluster, Epoch: 3, Revision: 100, Key: "team/db/primary", Kind: audit.KindGrant, Class: "team/db",
			ObservedAt: at(time.Minute), Holder: "spiffe://x/a", Session: 7, Token: 41, AcquiredAt: at(time.Minute - time.Millisecond)},
		{ClusterID: cluster, Epoch: 3, Revision: 101, Key: "team/db/primary", Kind: audit.KindHandoff, Class: "team/db",
			ObservedAt: at(2 * time.Minute), Holder: "spiffe://x/b", Session: 8, Token: 42, AcquiredAt: at(2 * time.Minute),
			EndedHolder: "spiffe://x/a", EndedSession: 7, EndedToken: 41, EndedAcquiredAt: at(time.Minute - time.Millisecond),
			Duration: time.Minute + time.Millisecond},
		{ClusterID: cluster, Epoch: 3, Revision: 102, Key: "team/q/x", Kind: audit.KindExpiry, Class: "team/q",
			ObservedAt: at(10 * time.Minute), EndedHolder: "spiffe://x/c", EndedSession: 9, EndedToken: 5,
			EndedAcquiredAt: at(-time.Hour), Duration: time.Hour + 10*time.Minute},
		{ClusterID: cluster, Epoch: 3, Revision: 103, Key: "team/db/primary", Kind: audit.KindForceRelease, Class: "team/db",
			ObservedAt: at(30 * time.Minute), EndedHolder: "spiffe://x/b", EndedSession: 8, EndedToken: 42,
			EndedAcquiredAt: at(2 * time.Minute), Duration: 28 * time.Minute,
			Requester: "alice", Approver: "bob", Reason: "INC-7: holder wedged"},
		{ClusterID: cluster, Epoch: 3, Revision: 104, Kind: audit.KindGap, ObservedAt: at(59*time.Minute + 59*time.Second),
			GapFrom: 104, GapTo: 104},
	}
}

// otherRows are rows the archive of cluster's hour must leave out: the
// hour before and after, and another cluster's row in the hour.
func otherRows(hour time.Time) []audit.Event {
	return []audit.Event{
		{ClusterID: cluster, Epoch: 3, Revision: 99, Key: "a", Kind: audit.KindGrant, ObservedAt: hour.Add(-time.Nanosecond)},
		{ClusterID: cluster, Epoch: 3, Revision: 105, Key: "a", Kind: audit.KindRelease, ObservedAt: hour.Add(time.Hour)},
		{ClusterID: 0xdef, Epoch: 1, Revision: 100, Key: "b", Kind: audit.KindForceRelease, ObservedAt: hour.Add(time.Minute),
			Requester: "carol", Approver: "dan", Reason: "other cluster"},
	}
}

func newSource(t *testing.T, rows ...[]audit.Event) *memSource {
	t.Helper()
	s := &memSource{}
	for _, r := range rows {
		if err := s.Write(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func testConfig(m *testserver.MinIO, src Source) Config {
	return Config{
		Client:         m.Client,
		Bucket:         "audit-archive",
		ForceBucket:    "audit-force",
		ForceMode:      ModeGovernance,
		ForceRetention: time.Hour,
		Source:         src,
		Logger:         slog.New(slog.DiscardHandler),
	}
}

func newArchiver(t *testing.T, cfg Config) *Archiver {
	t.Helper()
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.EnsureBuckets(context.Background()); err != nil {
		t.Fatal(err)
	}
	return a
}

func listNames(t *testing.T, c *minio.Client, bucket string) []string {
	t.Helper()
	var names []string
	for obj := range c.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Recursive: true}) {
		if obj.Err != nil {
			t.Fatalf("list %s: %v", bucket, obj.Err)
		}
		names = append(names, obj.Key)
	}
	return names
}

func download(t *testing.T, c *minio.Client, bucket, name string) []byte {
	t.Helper()
	obj, err := c.GetObject(context.Background(), bucket, name, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	b, err := io.ReadAll(obj)
	if err != nil {
		t.Fatalf("get %s/%s: %v", bucket, name, err)
	}
	return b
}

func readParquet(t *testing.T, b []byte) []audit.Event {
	t.Helper()
	rows, err := parquet.Read[Row](bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatalf("parquet.Read: %v", err)
	}
	events := make([]audit.Event, len(rows))
	for i, r := range rows {
		events[i] = r.Event()
	}
	return events
}

func TestArchiveHourWritesParquetAndForceRecords(t *testing.T) {
	m := testserver.StartMinIO(t)
	ctx := context.Background()
	src := newSource(t, hourRows(hour), otherRows(hour))
	a := newArchiver(t, testConfig(m, src))

	start := time.Now()
	names, err := a.ArchiveHour(ctx, cluster, hour.Add(17*time.Minute)) // any time in the hour
	if err != nil {
		t.Fatal(err)
	}
	wantParquet := "abc123/2026-03-04/05-r100-r104.parquet"
	wantForce := "abc123/r103-team%2Fdb%2Fprimary.json"
	if !slices.Equal(names, []string{wantParquet, wantForce}) {
		t.Fatalf("names = %q, want %q", names, []string{wantParquet, wantForce})
	}
	if got := listNames(t, m.Client, "audit-archive"); !slices.Equal(got, []string{wantParquet}) {
		t.Fatalf("archive bucket holds %q, want %q", got, wantParquet)
	}
	if got := listNames(t, m.Client, "audit-force"); !slices.Equal(got, []string{wantForce}) {
		t.Fatalf("force bucket holds %q, want %q", got, wantForce)
	}

	// The file is Parquet with exactly the hour's rows of the cluster.
	data := download(t, m.Client, "audit-archive", wantParquet)
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatalf("OpenFile: %v", err)
	}
	if f.NumRows() != 5 {
		t.Errorf("footer rows = %d, want 5", f.NumRows())
	}
	var cols []string
	for _, fl := range f.Schema().Fields() {
		cols = append(cols, fl.Name())
	}
	for _, c := range []string{"cluster_id", "revision", "kind", "observed_at_unix_nanos", "requester", "gap_to"} {
		if !slices.Contains(cols, c) {
			t.Errorf("schema lacks column %s: %q", c, cols)
		}
	}
	got := readParquet(t, data)
	want := hourRows(hour)
	if len(got) != len(want) {
		t.Fatalf("file has %d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}

	// The force-release is one JSON object under retention.
	var rec ForceRecord
	if err := json.Unmarshal(download(t, m.Client, "audit-force", wantForce), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Requester != "alice" || rec.Approver != "bob" || rec.Reason != "INC-7: holder wedged" ||
		rec.Revision != 103 || rec.Key != "team/db/primary" || rec.ClusterID != "abc123" || rec.Kind != "force-release" ||
		!rec.ObservedAt.Equal(hour.Add(30*time.Minute)) {
		t.Errorf("force record = %+v", rec)
	}
	mode, until, err := m.Client.GetObjectRetention(ctx, "audit-force", wantForce, "")
	if err != nil {
		t.Fatalf("GetObjectRetention: %v", err)
	}
	if mode == nil || *mode != minio.Governance {
		t.Errorf("retention mode = %v, want GOVERNANCE", mode)
	}
	if until == nil || until.Before(start.Add(time.Hour-2*time.Second)) || until.After(time.Now().Add(time.Hour+time.Second)) {
		t.Errorf("retain until = %v, want about %v", until, start.Add(time.Hour))
	}

	// Again: the same names, one Parquet file, no second locked version.
	again, err := a.ArchiveHour(ctx, cluster, hour)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again, names) {
		t.Errorf("second archive names = %q, want %q", again, names)
	}
	if got := listNames(t, m.Client, "audit-archive"); !slices.Equal(got, []string{wantParquet}) {
		t.Errorf("after rewrite the archive bucket holds %q", got)
	}
	versions := 0
	for obj := range m.Client.ListObjects(ctx, "audit-force", minio.ListObjectsOptions{Recursive: true, WithVersions: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		versions++
	}
	if versions != 1 {
		t.Errorf("force bucket has %d versions after a rewrite, want 1", versions)
	}

	// A row that reached the Source late: the hour's file is replaced by
	// one with the new range, the old one removed.
	late := audit.Event{ClusterID: cluster, Epoch: 3, Revision: 106, Key: "team/q/y", Kind: audit.KindGrant,
		ObservedAt: hour.Add(59 * time.Minute), Holder: "h", Session: 1, Token: 1, AcquiredAt: hour.Add(59 * time.Minute)}
	if err := src.Write(ctx, []audit.Event{late}); err != nil {
		t.Fatal(err)
	}
	names, err = a.ArchiveHour(ctx, cluster, hour)
	if err != nil {
		t.Fatal(err)
	}
	if names[0] != "abc123/2026-03-04/05-r100-r106.parquet" {
		t.Errorf("after a late row the file is %s", names[0])
	}
	if got := listNames(t, m.Client, "audit-archive"); !slices.Equal(got, []string{"abc123/2026-03-04/05-r100-r106.parquet"}) {
		t.Errorf("after a late row the archive bucket holds %q", got)
	}
	if n := len(readParquet(t, download(t, m.Client, "audit-archive", names[0]))); n != 6 {
		t.Errorf("replaced file has %d rows, want 6", n)
	}

	// An hour without rows writes nothing.
	names, err = a.ArchiveHour(ctx, cluster, hour.Add(5*time.Hour))
	if err != nil || len(names) != 0 {
		t.Errorf("empty hour: names %q, err %v", names, err)
	}
}

func TestForceRecordRetentionRefusesRemoval(t *testing.T) {
	m := testserver.StartMinIO(t)
	ctx := context.Background()
	cfg := testConfig(m, newSource(t, hourRows(hour)))
	cfg.ForceRetention = 3 * time.Second
	a := newArchiver(t, cfg)
	names, err := a.ArchiveHour(ctx, cluster, hour)
	if err != nil {
		t.Fatal(err)
	}
	name := names[len(names)-1]
	if !strings.HasSuffix(name, ".json") {
		t.Fatalf("no force record among %q", names)
	}
	info, err := m.Client.StatObject(ctx, "audit-force", name, minio.StatObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if info.VersionID == "" {
		t.Fatal("force record has no version ID: the bucket is not versioned")
	}
	_, until, err := m.Client.GetObjectRetention(ctx, "audit-force", name, info.VersionID)
	if err != nil || until == nil {
		t.Fatalf("GetObjectRetention: %v %v", until, err)
	}

	err = m.Client.RemoveObject(ctx, "audit-force", name, minio.RemoveObjectOptions{VersionID: info.VersionID})
	if err == nil {
		t.Fatalf("RemoveObject of version %s under retention until %v succeeded", info.VersionID, until)
	}
	if time.Now().After(*until) {
		t.Fatalf("retention ended (%v) before the removal was tried: the test proves nothing", until)
	}
	if _, err := m.Client.StatObject(ctx, "audit-force", name, minio.StatObjectOptions{VersionID: info.VersionID}); err != nil {
		t.Fatalf("version gone after a refused removal: %v", err)
	}

	wait := time.Until(*until) + 1500*time.Millisecond
	if wait > 10*time.Second {
		t.Fatalf("retention ends in %v, longer than the test waits", wait)
	}
	time.Sleep(wait)
	if err := m.Client.RemoveObject(ctx, "audit-force", name, minio.RemoveObjectOptions{VersionID: info.VersionID}); err != nil {
		t.Fatalf("RemoveObject after retention ended: %v", err)
	}
	_, err = m.Client.StatObject(ctx, "audit-force", name, minio.StatObjectOptions{VersionID: info.VersionID})
	if code := minio.ToErrorResponse(err).Code; code != "NoSuchVersion" && code != "NoSuchKey" {
		t.Errorf("stat of the removed version: %v (code %q), want NoSuchVersion", err, code)
	}
}

func TestEnsureBuckets(t *testing.T) {
	m := testserver.StartMinIO(t)
	ctx := context.Background()
	a := newArchiver(t, testConfig(m, newSource(t)))
	// Twice is fine.
	if err := a.EnsureBuckets(ctx); err != nil {
		t.Fatalf("second EnsureBuckets: %v", err)
	}
	if status, _, _, _, err := m.Client.GetObjectLockConfig(ctx, "audit-force"); err != nil || status != "Enabled" {
		t.Errorf("force bucket object lock = %q, %v", status, err)
	}

	// StartMinIO's own bucket has no object lock.
	cfg := testConfig(m, newSource(t))
	cfg.ForceBucket = m.Bucket
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = b.EnsureBuckets(ctx)
	if !errors.Is(err, ErrNoObjectLock) || !strings.Contains(err.Error(), m.Bucket) {
		t.Errorf("EnsureBuckets with an unlocked force bucket: %v, want ErrNoObjectLock naming %s", err, m.Bucket)
	}
}

func TestArchiveHourRefusesFileThatDoesNotVerify(t *testing.T) {
	m := testserver.StartMinIO(t)
	src := newSource(t, hourRows(hour))
	a := newArchiver(t, testConfig(m, src))
	a.encode = func(rows []Row) ([]byte, error) {
		b, err := encodeParquet(rows)
		return b[:len(b)-3], err
	}
	_, err := a.ArchiveHour(context.Background(), cluster, hour)
	if !errors.Is(err, ErrVerify) {
		t.Fatalf("ArchiveHour with a truncated file: %v, want ErrVerify", err)
	}
	if got := listNames(t, m.Client, "audit-archive"); len(got) != 0 {
		t.Errorf("a file that did not verify was uploaded: %q", got)
	}
	if got := listNames(t, m.Client, "audit-force"); len(got) != 0 {
		t.Errorf("force records were uploaded with a file that did not verify: %q", got)
	}

	// One more row than the file holds: the count check refuses it.
	a.encode = func(rows []Row) ([]byte, error) { return encodeParquet(rows[1:]) }
	if _, err := a.ArchiveHour(context.Background(), cluster, hour); !errors.Is(err, ErrVerify) {
		t.Fatalf("ArchiveHour with a short file: %v, want ErrVerify", err)
	}
}

func TestRunArchivesLastCompleteHourOfEveryCluster(t *testing.T) {
	m := testserver.StartMinIO(t)
	// The clock is real (MinIO refuses a retain-until in its past) but
	// stopped, so the last complete hour cannot change under the test.
	now := time.Now()
	last := now.UTC().Truncate(time.Hour).Add(-time.Hour)
	src := newSource(t, hourRows(last), otherRows(last))
	src.failQueries = 1 // the first tick fails; the next must retry
	cfg := testConfig(m, src)
	cfg.Now = func() time.Time { return now }
	cfg.Logger = slog.New(slog.NewTextHandler(tWriter{t}, nil))
	a := newArchiver(t, cfg)

	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx, 50*time.Millisecond) }()
	day, hh := last.Format(time.DateOnly), last.Format("15")
	want := []string{"abc123/" + day + "/" + hh + "-r100-r104.parquet", "def/" + day + "/" + hh + "-r100-r100.parquet"}
	deadline := time.Now().Add(15 * time.Second)
	wantForce := []string{"abc123/r103-team%2Fdb%2Fprimary.json", "def/r100-b.json"}
	var got, gotForce []string
	for time.Now().Before(deadline) {
		// The force records are written after the Parquet file.
		got, gotForce = listNames(t, m.Client, "audit-archive"), listNames(t, m.Client, "audit-force")
		if slices.Equal(got, want) && slices.Equal(gotForce, wantForce) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-ran:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if !slices.Equal(got, want) {
		t.Fatalf("archive bucket holds %q, want %q", got, want)
	}
	if !slices.Equal(gotForce, wantForce) {
		t.Errorf("force bucket holds %q, want %q", gotForce, wantForce)
	}
	src.mu.Lock()
	queries := src.queries
	src.mu.Unlock()
	if queries < 2 {
		t.Errorf("Run queried %d times: the failed tick was not retried", queries)
	}
	if err := a.Run(context.Background(), 0); !errors.Is(err, audit.ErrConfig) {
		t.Errorf("Run with every 0: %v, want ErrConfig", err)
	}
}

// tWriter sends the Archiver's log to the test's.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func TestVerifyParquetRefusesBadFiles(t *testing.T) {
	var rows []Row
	for _, e := range hourRows(hour) {
		rows = append(rows, RowOf(e))
	}
	good, err := encodeParquet(rows)
	if err != nil {
		t.Fatal(err)
	}
	if err := verifyParquet(good, rows); err != nil {
		t.Fatalf("a good file does not verify: %v", err)
	}

	// Every truncation loses the footer or its trailing magic.
	for n := range len(good) {
		if err := verifyParquet(good[:n], rows); !errors.Is(err, ErrVerify) {
			t.Fatalf("file truncated to %d of %d bytes: verify = %v, want ErrVerify", n, len(good), err)
		}
	}
	corrupt := func(name string, mutate func([]byte)) {
		b := bytes.Clone(good)
		mutate(b)
		if err := verifyParquet(b, rows); !errors.Is(err, ErrVerify) {
			t.Errorf("%s: verify = %v, want ErrVerify", name, err)
		}
	}
	corrupt("leading magic", func(b []byte) { b[0] = 'X' })
	corrupt("trailing magic", func(b []byte) { b[len(b)-1] = 'X' })
	corrupt("footer length", func(b []byte) { b[len(b)-8] ^= 0xff })
	corrupt("zeroed body", func(b []byte) { clear(b[4 : len(b)-8]) })

	if err := verifyParquet(good, rows[:4]); !errors.Is(err, ErrVerify) {
		t.Errorf("row count mismatch: verify = %v, want ErrVerify", err)
	}
	changed := slices.Clone(rows)
	changed[2].Reason = "not what was written"
	if err := verifyParquet(good, changed); !errors.Is(err, ErrVerify) {
		t.Errorf("row content mismatch: verify = %v, want ErrVerify", err)
	}

	// A file of another schema with the same row count.
	type other struct {
		Revision int64  `parquet:"revision"`
		Key      string `parquet:"key"`
	}
	var buf bytes.Buffer
	if err := parquet.Write(&buf, []other{{1, "a"}, {2, "b"}, {3, "c"}, {4, "d"}, {5, "e"}}); err != nil {
		t.Fatal(err)
	}
	if err := verifyParquet(buf.Bytes(), rows); !errors.Is(err, ErrVerify) || !strings.Contains(err.Error(), "columns") {
		t.Errorf("other schema: verify = %v, want ErrVerify about columns", err)
	}
}

func TestValidateNamesTheField(t *testing.T) {
	m := &minio.Client{}
	good := Config{Client: m, Bucket: "audit-archive", ForceBucket: "audit-force", ForceMode: ModeCompliance,
		ForceRetention: 24 * time.Hour, Source: &memSource{}}
	if err := good.Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		field string
		rule  string
	}{
		{"no client", func(c *Config) { c.Client = nil }, "Client", "must be set"},
		{"no source", func(c *Config) { c.Source = nil }, "Source", "must be set"},
		{"no bucket", func(c *Config) { c.Bucket = "" }, "Bucket", "must be set"},
		{"bad bucket", func(c *Config) { c.Bucket = "Audit_Archive" }, "Bucket", "valid bucket name"},
		{"no force bucket", func(c *Config) { c.ForceBucket = "" }, "ForceBucket", "must be set"},
		{"bad force bucket", func(c *Config) { c.ForceBucket = "ab" }, "ForceBucket", "valid bucket name"},
		{"same buckets", func(c *Config) { c.ForceBucket = c.Bucket }, "ForceBucket", "must differ from Bucket"},
		{"bad mode", func(c *Config) { c.ForceMode = "compliance" }, "ForceMode", "must be COMPLIANCE or GOVERNANCE"},
		{"no mode", func(c *Config) { c.ForceMode = "" }, "ForceMode", "must be COMPLIANCE or GOVERNANCE"},
		{"no retention", func(c *Config) { c.ForceRetention = 0 }, "ForceRetention", "at least 1s"},
		{"short retention", func(c *Config) { c.ForceRetention = 500 * time.Millisecond }, "ForceRetention", "at least 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.edit(&c)
			err := c.Validate()
			if !errors.Is(err, audit.ErrConfig) {
				t.Fatalf("Validate = %v, want audit.ErrConfig", err)
			}
			if !strings.Contains(err.Error(), "archive: "+tc.field+" ") || !strings.Contains(err.Error(), tc.rule) {
				t.Errorf("Validate = %q, want it to name %s and %q", err, tc.field, tc.rule)
			}
			if _, err := New(c); !errors.Is(err, audit.ErrConfig) {
				t.Errorf("New = %v, want audit.ErrConfig", err)
			}
		})
	}
	if _, err := (&Archiver{cfg: good}).ArchiveHour(context.Background(), 0, hour); !errors.Is(err, audit.ErrConfig) {
		t.Errorf("ArchiveHour of cluster 0: %v, want ErrConfig", err)
	}
}

// TestParquetCarriesUnprotectedGrants: an unprotected grant's row keeps its
// flag, arbiter and spool sequence through the archive's Parquet file, in
// columns of their own.
func TestParquetCarriesUnprotectedGrants(t *testing.T) {
	grant := audit.Event{ClusterID: cluster, Epoch: 3, Revision: 120, Key: "team/db/primary", Kind: audit.KindUnprotected, Class: "team/db",
		ObservedAt: hour.Add(40 * time.Minute), Holder: "spiffe://x/batch", Session: 11, AcquiredAt: hour.Add(5 * time.Minute),
		Unprotected: true, Arbiter: "lockd-1.lockd:7420", SpoolSeq: 1<<63 + 5}
	events := []audit.Event{hourRows(hour)[0], grant}
	rows := []Row{RowOf(events[0]), RowOf(events[1])}
	data, err := encodeParquet(rows)
	if err != nil {
		t.Fatal(err)
	}
	if err := verifyParquet(data, rows); err != nil {
		t.Fatalf("verify: %v", err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var cols []string
	for _, fl := range f.Schema().Fields() {
		cols = append(cols, fl.Name())
	}
	for _, c := range []string{"unprotected", "arbiter", "spool_seq"} {
		if !slices.Contains(cols, c) {
			t.Errorf("schema lacks column %s: %q", c, cols)
		}
	}
	got := readParquet(t, data)
	if !slices.Equal(got, events) {
		t.Fatalf("read back:\n got %+v\nwant %+v", got, events)
	}
}
