// Package archive copies lockd's audit history out of its Sink into object
// storage (S3 or MinIO): one Parquet file per cluster and hour, named by the
// revisions it holds, and every force-release as its own JSON record in a
// bucket with object locking, kept under retention so that nobody (in
// COMPLIANCE mode, not even the root user) can delete it before it expires.
//
// Object names:
//
//	Bucket:      <cluster hex>/<YYYY-MM-DD>/<HH>-r<first revision>-r<last revision>.parquet
//	ForceBucket: <cluster hex>/r<revision>-<path-escaped key>.json
//
// Dates and hours are UTC; the first and last revisions are those of the
// hour's first and last rows in the Sink's order (cluster, epoch, revision,
// key). Archiving an hour again writes the same names.
package archive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/lockd-dev/lockd/internal/audit"
)

// Errors. Every error of this package wraps one of these or audit.ErrConfig.
var (
	// ErrSource: reading the rows from the Source failed.
	ErrSource = errors.New("archive: source")
	// ErrEncode: the rows could not be written as Parquet.
	ErrEncode = errors.New("archive: encode")
	// ErrVerify: the Parquet file read back is not the file of the rows
	// written; it was not uploaded.
	ErrVerify = errors.New("archive: verify")
	// ErrStore: the object store refused or failed a request.
	ErrStore = errors.New("archive: object store")
	// ErrNoObjectLock: ForceBucket exists without object locking.
	ErrNoObjectLock = errors.New("archive: force bucket has no object lock")
)

// Retention modes of Config.ForceMode.
const (
	// ModeCompliance: nobody can shorten the retention or delete a locked
	// version before it ends.
	ModeCompliance = "COMPLIANCE"
	// ModeGovernance: a user with s3:BypassGovernanceRetention can, with the
	// bypass header; everyone else cannot.
	ModeGovernance = "GOVERNANCE"
)

// MinForceRetention is the shortest ForceRetention: S3 takes retain-until
// dates to the second.
const MinForceRetention = time.Second

// Source is where the archive reads the history (an audit.Sink).
type Source interface {
	Query(ctx context.Context, f audit.Filter) ([]audit.Event, error)
}

// Config configures an Archiver.
type Config struct {
	// Client is the object store.
	Client *minio.Client
	// Bucket holds the hourly Parquet files.
	Bucket string
	// ForceBucket holds the force-release records; it must have object
	// locking (EnsureBuckets makes it so) and differ from Bucket.
	ForceBucket string
	// ForceMode is the retention mode of a force-release record:
	// ModeCompliance or ModeGovernance.
	ForceMode string
	// ForceRetention is how long a force-release record is retained from
	// its upload; at least MinForceRetention.
	ForceRetention time.Duration
	// Source is the history to archive, read with Query only.
	Source Source
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Logger logs Run's failures; nil is slog.Default().
	Logger *slog.Logger
}

// Validate reports the first field that breaks its rule, wrapping
// audit.ErrConfig.
func (c Config) Validate() error {
	bad := func(field, rule string, args ...any) error {
		return fmt.Errorf("%w: archive: %s %s", audit.ErrConfig, field, fmt.Sprintf(rule, args...))
	}
	switch {
	case c.Client == nil:
		return bad("Client", "must be set")
	case c.Source == nil:
		return bad("Source", "must be set")
	case c.Bucket == "":
		return bad("Bucket", "must be set")
	case s3utils.CheckValidBucketNameStrict(c.Bucket) != nil:
		return bad("Bucket", "%q must be a valid bucket name: %v", c.Bucket, s3utils.CheckValidBucketNameStrict(c.Bucket))
	case c.ForceBucket == "":
		return bad("ForceBucket", "must be set")
	case s3utils.CheckValidBucketNameStrict(c.ForceBucket) != nil:
		return bad("ForceBucket", "%q must be a valid bucket name: %v", c.ForceBucket, s3utils.CheckValidBucketNameStrict(c.ForceBucket))
	case c.ForceBucket == c.Bucket:
		return bad("ForceBucket", "%q must differ from Bucket (it needs object locking)", c.ForceBucket)
	case c.ForceMode != ModeCompliance && c.ForceMode != ModeGovernance:
		return bad("ForceMode", "%q must be %s or %s", c.ForceMode, ModeCompliance, ModeGovernance)
	case c.ForceRetention < MinForceRetention:
		return bad("ForceRetention", "%v must be at least %v", c.ForceRetention, MinForceRetention)
	}
	return nil
}

// Archiver writes the archive. Its methods are safe for concurrent use, but
// two Archivers writing one hour at once may leave either's files.
type Archiver struct {
	cfg Config
	now func() time.Time
	log *slog.Logger
	// encode is encodeParquet; tests replace it to hand verify a bad file.
	encode func([]Row) ([]byte, error)
}

// New returns an Archiver for a valid cfg.
func New(cfg Config) (*Archiver, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Archiver{cfg: cfg, now: cfg.Now, log: cfg.Logger, encode: encodeParquet}
	if a.now == nil {
		a.now = time.Now
	}
	if a.log == nil {
		a.log = slog.Default()
	}
	return a, nil
}

// EnsureBuckets makes Bucket if it is missing, and ForceBucket with object
// locking (which turns on versioning) if it is missing. A ForceBucket that
// exists without object locking is an error wrapping ErrNoObjectLock: S3
// cannot add locking to a bucket that has none, so an operator must pick
// another bucket.
func (a *Archiver) EnsureBuckets(ctx context.Context) error {
	if err := a.makeBucket(ctx, a.cfg.Bucket, false); err != nil {
		return err
	}
	if err := a.makeBucket(ctx, a.cfg.ForceBucket, true); err != nil {
		return err
	}
	status, _, _, _, err := a.cfg.Client.GetObjectLockConfig(ctx, a.cfg.ForceBucket)
	if err != nil {
		if minio.ToErrorResponse(err).Code == "ObjectLockConfigurationNotFoundError" {
			return fmt.Errorf("%w: bucket %s exists without object locking; use a bucket made with it", ErrNoObjectLock, a.cfg.ForceBucket)
		}
		return fmt.Errorf("%w: object lock configuration of %s: %v", ErrStore, a.cfg.ForceBucket, err)
	}
	if status != "Enabled" {
		return fmt.Errorf("%w: bucket %s has object lock %q, not Enabled", ErrNoObjectLock, a.cfg.ForceBucket, status)
	}
	return nil
}

func (a *Archiver) makeBucket(ctx context.Context, bucket string, locking bool) error {
	ok, err := a.cfg.Client.BucketExists(ctx, bucket)
	if err != nil {
		return fmt.Errorf("%w: bucket %s: %v", ErrStore, bucket, err)
	}
	if ok {
		return nil
	}
	err = a.cfg.Client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{ObjectLocking: locking})
	if err != nil && minio.ToErrorResponse(err).Code != "BucketAlreadyOwnedByYou" {
		return fmt.Errorf("%w: make bucket %s: %v", ErrStore, bucket, err)
	}
	return nil
}

// ArchiveHour archives the rows of one cluster whose ObservedAt is in
// [hour, hour+1h), hour truncated to the hour in UTC: one verified Parquet
// file in Bucket and one retained JSON record per force-release in
// ForceBucket. An hour with no rows writes nothing. It returns the names of
// the hour's objects, the Parquet file first.
//
// Archiving an hour again writes the same names; a Parquet file of the same
// hour under another name (the hour had fewer rows when it was archived
// before) is removed after the new one is stored. A force-release record
// whose stored latest version has the same content is not uploaded again,
// so rewriting an hour does not pile up locked versions; one whose content
// differs (a store rebuilt empty reuses revisions) is uploaded as a new
// version and the old one stays, locked.
func (a *Archiver) ArchiveHour(ctx context.Context, clusterID uint64, hour time.Time) ([]string, error) {
	if clusterID == 0 {
		return nil, fmt.Errorf("%w: archive: ArchiveHour needs a cluster ID, not 0", audit.ErrConfig)
	}
	hour = hour.UTC().Truncate(time.Hour)
	rows, err := a.cfg.Source.Query(ctx, audit.Filter{ClusterID: clusterID, Since: hour, Until: hour.Add(time.Hour)})
	if err != nil {
		return nil, fmt.Errorf("%w: cluster %x hour %s: %v", ErrSource, clusterID, hour.Format(time.RFC3339), err)
	}
	return a.archive(ctx, clusterID, hour, rows)
}

// archive writes rows, already read for clusterID and hour.
func (a *Archiver) archive(ctx context.Context, clusterID uint64, hour time.Time, events []audit.Event) ([]string, error) {
	end := hour.Add(time.Hour)
	rows := make([]Row, 0, len(events))
	var force []audit.Event
	for _, e := range events {
		// The Source filtered already; a row outside is a Source bug that
		// must not land in another hour's file.
		if e.ClusterID != clusterID || e.ObservedAt.Before(hour) || !e.ObservedAt.Before(end) {
			return nil, fmt.Errorf("%w: cluster %x hour %s: the source returned a row of cluster %x at %s",
				ErrSource, clusterID, hour.Format(time.RFC3339), e.ClusterID, e.ObservedAt.Format(time.RFC3339Nano))
		}
		rows = append(rows, RowOf(e))
		if e.Kind == audit.KindForceRelease {
			force = append(force, e)
		}
	}
	if len(rows) == 0 {
		return nil, nil
	}
	data, err := a.encode(rows)
	if err != nil {
		return nil, err
	}
	name := ParquetName(clusterID, hour, rows[0].Revision, rows[len(rows)-1].Revision)
	if err := verifyParquet(data, rows); err != nil {
		return nil, fmt.Errorf("%w (%s not uploaded)", err, name)
	}
	_, err = a.cfg.Client.PutObject(ctx, a.cfg.Bucket, name, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: "application/vnd.apache.parquet"})
	if err != nil {
		return nil, fmt.Errorf("%w: put %s/%s: %v", ErrStore, a.cfg.Bucket, name, err)
	}
	names := []string{name}
	if err := a.removeSuperseded(ctx, clusterID, hour, name); err != nil {
		return names, err
	}
	for _, e := range force {
		fname, err := a.putForce(ctx, e)
		if err != nil {
			return names, err
		}
		names = append(names, fname)
	}
	return names, nil
}

// removeSuperseded removes the hour's Parquet files other than keep.
func (a *Archiver) removeSuperseded(ctx context.Context, clusterID uint64, hour time.Time, keep string) error {
	prefix := hourPrefix(clusterID, hour)
	for obj := range a.cfg.Client.ListObjects(ctx, a.cfg.Bucket, minio.ListObjectsOptions{Prefix: prefix}) {
		if obj.Err != nil {
			return fmt.Errorf("%w: list %s/%s: %v", ErrStore, a.cfg.Bucket, prefix, obj.Err)
		}
		if obj.Key == keep || !strings.HasSuffix(obj.Key, ".parquet") {
			continue
		}
		if err := a.cfg.Client.RemoveObject(ctx, a.cfg.Bucket, obj.Key, minio.RemoveObjectOptions{}); err != nil {
			return fmt.Errorf("%w: remove superseded %s/%s: %v", ErrStore, a.cfg.Bucket, obj.Key, err)
		}
	}
	return nil
}

// sha256Meta is the user metadata holding a force record's SHA-256.
const sha256Meta = "Lockd-Sha256"

// putForce uploads e's force record under retention, unless the latest
// version stored has the same content.
func (a *Archiver) putForce(ctx context.Context, e audit.Event) (string, error) {
	name := ForceName(e.ClusterID, e.Revision, e.Key)
	body, err := json.Marshal(ForceRecordOf(e))
	if err != nil {
		return "", fmt.Errorf("%w: force record %s: %v", ErrEncode, name, err)
	}
	sum := sha256.Sum256(body)
	digest := hex.EncodeToString(sum[:])
	info, err := a.cfg.Client.StatObject(ctx, a.cfg.ForceBucket, name, minio.StatObjectOptions{})
	switch {
	case err == nil && info.UserMetadata[sha256Meta] == digest:
		return name, nil
	case err != nil && minio.ToErrorResponse(err).Code != "NoSuchKey":
		return "", fmt.Errorf("%w: stat %s/%s: %v", ErrStore, a.cfg.ForceBucket, name, err)
	}
	_, err = a.cfg.Client.PutObject(ctx, a.cfg.ForceBucket, name, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{
		ContentType:     "application/json",
		UserMetadata:    map[string]string{sha256Meta: digest},
		Mode:            minio.RetentionMode(a.cfg.ForceMode),
		RetainUntilDate: a.now().Add(a.cfg.ForceRetention).UTC(),
		SendContentMd5:  true, // S3 requires an integrity header on a PUT with retention
	})
	if err != nil {
		return "", fmt.Errorf("%w: put %s/%s: %v", ErrStore, a.cfg.ForceBucket, name, err)
	}
	return name, nil
}

// ForceRecord is a force-release as stored in ForceBucket, one JSON object.
type ForceRecord struct {
	ClusterID       string    `json:"cluster_id"` // hex
	Epoch           uint32    `json:"epoch"`
	Revision        int64     `json:"revision"`
	Key             string    `json:"key"`
	Kind            string    `json:"kind"`
	Class           string    `json:"class"`
	ObservedAt      time.Time `json:"observed_at"`
	EndedHolder     string    `json:"ended_holder"`
	EndedSession    int64     `json:"ended_session"`
	EndedToken      uint64    `json:"ended_token"`
	EndedAcquiredAt time.Time `json:"ended_acquired_at"`
	DurationNanos   int64     `json:"duration_ns"`
	Requester       string    `json:"requester"`
	Approver        string    `json:"approver"`
	Reason          string    `json:"reason"`
}

// ForceRecordOf is e's force record.
func ForceRecordOf(e audit.Event) ForceRecord {
	return ForceRecord{
		ClusterID:       fmt.Sprintf("%x", e.ClusterID),
		Epoch:           e.Epoch,
		Revision:        e.Revision,
		Key:             e.Key,
		Kind:            string(e.Kind),
		Class:           e.Class,
		ObservedAt:      e.ObservedAt.UTC(),
		EndedHolder:     e.EndedHolder,
		EndedSession:    e.EndedSession,
		EndedToken:      e.EndedToken,
		EndedAcquiredAt: e.EndedAcquiredAt.UTC(),
		DurationNanos:   int64(e.Duration),
		Requester:       e.Requester,
		Approver:        e.Approver,
		Reason:          e.Reason,
	}
}

// hourPrefix is the name prefix of clusterID's Parquet files of hour.
func hourPrefix(clusterID uint64, hour time.Time) string {
	h := hour.UTC()
	return fmt.Sprintf("%x/%s/%02d-r", clusterID, h.Format(time.DateOnly), h.Hour())
}

// ParquetName is the name of clusterID's Parquet file of hour holding
// revisions first to last.
func ParquetName(clusterID uint64, hour time.Time, first, last int64) string {
	return fmt.Sprintf("%s%d-r%d.parquet", hourPrefix(clusterID, hour), first, last)
}

// ForceName is the name of the force record of key at revision.
func ForceName(clusterID uint64, revision int64, key string) string {
	return fmt.Sprintf("%x/r%d-%s.json", clusterID, revision, url.PathEscape(key))
}

// Run archives, at once and then every every, the last complete hour of
// each cluster that has rows in it, until ctx ends. A failure is logged and
// the hour is tried again at the next tick; an hour archived once is not
// archived again by this Run (rows written to the Source after that are
// picked up only by an ArchiveHour of that hour).
func (a *Archiver) Run(ctx context.Context, every time.Duration) error {
	if every <= 0 {
		return fmt.Errorf("%w: archive: Run's every %v must be positive", audit.ErrConfig, every)
	}
	done := map[uint64]time.Time{} // cluster → last hour archived
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		a.tick(ctx, done)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// tick archives the last complete hour of every cluster not in done for it.
func (a *Archiver) tick(ctx context.Context, done map[uint64]time.Time) {
	hour := a.now().UTC().Truncate(time.Hour).Add(-time.Hour)
	rows, err := a.cfg.Source.Query(ctx, audit.Filter{Since: hour, Until: hour.Add(time.Hour)})
	if err != nil {
		if ctx.Err() == nil {
			a.log.Error("audit archive: query", "hour", hour.Format(time.RFC3339), "err", err)
		}
		return
	}
	var order []uint64
	byCluster := map[uint64][]audit.Event{}
	for _, e := range rows {
		if _, ok := byCluster[e.ClusterID]; !ok {
			order = append(order, e.ClusterID)
		}
		byCluster[e.ClusterID] = append(byCluster[e.ClusterID], e)
	}
	for _, id := range order {
		if done[id].Equal(hour) {
			continue
		}
		names, err := a.archive(ctx, id, hour, byCluster[id])
		if err != nil {
			if ctx.Err() == nil {
				a.log.Error("audit archive: hour failed; retrying next tick",
					"cluster_id", fmt.Sprintf("%x", id), "hour", hour.Format(time.RFC3339), "err", err)
			}
			continue
		}
		done[id] = hour
		a.log.Info("audit archive: hour archived", "cluster_id", fmt.Sprintf("%x", id),
			"hour", hour.Format(time.RFC3339), "rows", len(byCluster[id]), "objects", names)
	}
}
