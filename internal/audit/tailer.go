package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/lockd-dev/lockd/internal/keyspace"
)

// Where the tailer keeps its state, under keyspace.AuditPrefix.
const (
	electionPrefix   = keyspace.AuditPrefix + "election"
	checkpointPrefix = keyspace.AuditPrefix + "checkpoint/"
)

// Config configures a Tailer.
type Config struct {
	// Client is the etcd client of the cluster tailed (the election runs on
	// it too, for now).
	Client *clientv3.Client
	// Sink stores the rows.
	Sink Sink
	// Name identifies this candidate in the election (lockd's address).
	Name   string
	Logger *slog.Logger
	// Registerer receives the tailer's metrics (nil: none), unless Metrics
	// is set: the metrics of several tailers of one process (one per
	// cluster), registered once with NewMetrics.
	Registerer prometheus.Registerer
	Metrics    *Metrics
	Now        func() time.Time
	// BatchRows and BatchWait bound a batch: it is written when it has
	// BatchRows rows or its first row has waited BatchWait (defaults 5000,
	// 1s). A batch always holds whole revisions.
	BatchRows int
	BatchWait time.Duration
	// CompactionWindow is etcd's compaction retention: how far behind the
	// tailer may fall before revisions it has not read are compacted away.
	// The lag gauge is judged against half of it (default 1h).
	CompactionWindow time.Duration
	// ElectionTTL is the lease of the tailer's leadership (default 5s).
	ElectionTTL time.Duration
	// Retry is the pause before retrying a failed write or watch (default 500ms).
	Retry time.Duration
	// SinkPatience is how long a failing batch is retried before the
	// tailer drops its watch and resumes from the checkpoint (default 10s):
	// while the sink is down nothing piles up in memory; etcd keeps the
	// revisions until they are compacted (which is then a recorded gap).
	SinkPatience time.Duration
	// ProbeEvery is how often the store's head revision is read for the lag
	// metrics (default 1s).
	ProbeEvery time.Duration
}

func (c *Config) defaults() error {
	if c.Client == nil {
		return fmt.Errorf("%w: client: required", ErrConfig)
	}
	if c.Sink == nil {
		return fmt.Errorf("%w: sink: required", ErrConfig)
	}
	if c.Name == "" {
		c.Name = "lockd"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.BatchRows <= 0 {
		c.BatchRows = 5000
	}
	if c.BatchWait <= 0 {
		c.BatchWait = time.Second
	}
	if c.CompactionWindow <= 0 {
		c.CompactionWindow = time.Hour
	}
	if c.ElectionTTL <= 0 {
		c.ElectionTTL = 5 * time.Second
	}
	if c.Retry <= 0 {
		c.Retry = 500 * time.Millisecond
	}
	if c.ProbeEvery <= 0 {
		c.ProbeEvery = time.Second
	}
	if c.SinkPatience <= 0 {
		c.SinkPatience = 10 * time.Second
	}
	return nil
}

// Tailer copies a cluster's lock history into a Sink: a singleton through
// an etcd election, it reads the checkpoint, watches from the revision after
// it with previous values, classifies each revision, writes rows in batches
// of whole revisions and then moves the checkpoint, fenced by its
// leadership. A crash replays from the checkpoint; the sink ignores rows it
// has. A compaction past the checkpoint is recorded as a gap, never skipped
// silently.
type Tailer struct {
	cfg Config
	m   *metrics

	mu      sync.Mutex
	leading bool
	cluster uint64
	done    int64 // every row of every revision up to here is stored
	head    int64 // the store's revision at the last probe (0: none yet)
	// headCluster is the store's cluster ID at the last probe: a restored
	// store answers with a new one before its revisions reach the history's.
	headCluster uint64
	probes      uint64 // probes answered, to tell one made after a point
	// pendingSince is when the oldest row read but not yet stored was
	// read (zero: none).
	pendingSince time.Time
	samples      []sample
}

type sample struct {
	rev int64
	at  time.Time
}

// New validates cfg and returns a Tailer; Run starts it.
func New(cfg Config) (*Tailer, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	m := cfg.Metrics
	if m == nil {
		m = newMetrics(cfg.Registerer)
	}
	return &Tailer{cfg: cfg, m: m}, nil
}

// Run campaigns and tails while elected, again after losing the election or
// an error, until ctx ends.
func (t *Tailer) Run(ctx context.Context) error {
	go t.probe(ctx)
	for ctx.Err() == nil {
		if err := t.lead(ctx); err != nil && ctx.Err() == nil {
			t.cfg.Logger.Warn("audit tailer stopped; campaigning again", "err", err)
			sleep(ctx, t.cfg.Retry)
		}
	}
	return nil
}

// Leading reports whether this tailer is the elected one.
func (t *Tailer) Leading() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.leading
}

// Stored returns the cluster tailed and the revision up to which every row
// is stored.
func (t *Tailer) Stored() (uint64, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cluster, t.done
}

func (t *Tailer) lead(ctx context.Context) error {
	// The cluster, for the leader gauge: a candidate says 0.
	resp, err := t.cfg.Client.Get(ctx, electionPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("audit: read the cluster: %w", err)
	}
	cluster := hex(resp.Header.ClusterId)
	t.m.leader.WithLabelValues(cluster).Set(0)
	sess, err := concurrency.NewSession(t.cfg.Client, concurrency.WithTTL(int((t.cfg.ElectionTTL+time.Second-1)/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("audit: election session: %w", err)
	}
	defer sess.Close()
	el := concurrency.NewElection(sess, electionPrefix)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // Campaign does not end when the session dies
		select {
		case <-sess.Done():
			cancel()
		case <-cctx.Done():
		}
	}()
	if err := el.Campaign(cctx, t.cfg.Name); err != nil {
		return fmt.Errorf("audit: campaign: %w", err)
	}
	t.setLeading(cluster, true)
	defer t.setLeading(cluster, false)
	t.cfg.Logger.Info("audit tailer elected", "name", t.cfg.Name, "cluster", cluster)
	f := fence{key: el.Key(), rev: el.Rev()}
	for cctx.Err() == nil {
		err := t.tail(cctx, f)
		if errors.Is(err, ErrDeposed) {
			return err
		}
		if err != nil && cctx.Err() == nil {
			t.cfg.Logger.Warn("audit tail broke; resuming from the checkpoint", "err", err)
			sleep(cctx, t.cfg.Retry)
		}
	}
	if sess.Ctx().Err() == nil {
		return nil
	}
	return fmt.Errorf("%w: the election session ended", ErrDeposed)
}

func (t *Tailer) setLeading(cluster string, v bool) {
	t.mu.Lock()
	t.leading = v
	t.mu.Unlock()
	t.m.leader.WithLabelValues(cluster).Set(b2f(v))
}

// fence is the leader key: a checkpoint write compares its create revision.
type fence struct {
	key string
	rev int64
}

func checkpointKey(cluster uint64) string { return checkpointPrefix + strconv.FormatUint(cluster, 16) }

// tail streams from the checkpoint until an error.
func (t *Tailer) tail(ctx context.Context, f fence) error {
	cli := t.cfg.Client
	resp, err := cli.Txn(ctx).Then(clientv3.OpGet(keyspace.EpochKey)).Commit()
	if err != nil {
		return err
	}
	cluster, head := resp.Header.ClusterId, resp.Header.Revision
	cp, err := t.checkpoint(ctx, cluster)
	if err != nil {
		return err
	}
	var st *stream
	from := cp + 1
	if cp == 0 {
		// First tail of this cluster: the history starts where its epoch
		// did, so the advance that made a restored or rebuilt store usable
		// (and the holds it deleted) is in it; else at a snapshot now.
		st, from, err = t.start(ctx, cluster, resp.Responses[0].GetResponseRange().Kvs, head)
		if err != nil {
			return err
		}
		if err := t.saveCheckpoint(ctx, f, cluster, from-1); err != nil {
			return err
		}
		t.cfg.Logger.Info("audit history starts", "cluster", hex(cluster), "revision", from)
	} else {
		st, _, err = t.streamAt(ctx, cluster, cp)
		switch {
		case errors.Is(err, rpctypes.ErrFutureRev):
			st, from, err = t.gap(ctx, f, cluster, head+1, fmt.Sprintf("the store (revision %d) is behind the checkpoint (%d): restored or rebuilt under the same cluster ID", head, cp))
			if err != nil {
				return err
			}
		case errors.Is(err, rpctypes.ErrCompacted):
			st, from, err = t.gap(ctx, f, cluster, cp+1, "the checkpoint's revision was compacted before the tailer resumed")
			if err != nil {
				return err
			}
		case err != nil:
			return err
		}
	}
	t.setStored(cluster, from-1)
	t.m.window.WithLabelValues(hex(cluster)).Set(t.cfg.CompactionWindow.Seconds())
	// The counters are exported at 0 from the start, not from their first
	// increment: increase() and rate() see a first gap only as a step up
	// from a sample already scraped.
	t.m.gaps.WithLabelValues(hex(cluster))
	t.m.rows.WithLabelValues(hex(cluster))

	for {
		err := t.watch(ctx, f, st, from)
		var c compacted
		if !errors.As(err, &c) {
			return err
		}
		st, from, err = t.gap(ctx, f, cluster, t.storedRev()+1, fmt.Sprintf("etcd compacted up to revision %d before the tailer read it", c.rev))
		if err != nil {
			return err
		}
	}
}

// start is where the first tail of a cluster begins: at the revision its
// epoch record was written for this cluster (an advance or the first
// epoch), when etcd still has the revision before it; else just after head.
func (t *Tailer) start(ctx context.Context, cluster uint64, epochKVs []*mvccpb.KeyValue, head int64) (*stream, int64, error) {
	now := func() (*stream, int64, error) {
		st, _, err := t.streamAt(ctx, cluster, head)
		return st, head + 1, err
	}
	if len(epochKVs) == 0 {
		return now()
	}
	_, recCluster, err := keyspace.DecodeEpoch(epochKVs[0].Value)
	at := epochKVs[0].ModRevision
	if err != nil || recCluster != cluster || at <= 1 {
		return now() // sealed: the advance is still to come
	}
	st, _, err := t.streamAt(ctx, cluster, at-1)
	if err != nil {
		return now() // compacted: a snapshot now
	}
	return st, at, nil
}

// streamAt is the classifier's state as the store had it at rev (0: now),
// and that revision: the epoch in force, and the sessions a force-release
// asked to revoke that were still there (the revoke comes in a later
// revision than the force record; their holds end by it and are forced,
// not expired). A tailer resuming from a checkpoint reads them back here:
// the tailer that read the force record kept them only in its memory.
// Force records live ForceRecordTTL (a day), far longer than a restart.
// A revision etcd compacted is rpctypes.ErrCompacted, whichever read
// meets it.
func (t *Tailer) streamAt(ctx context.Context, cluster uint64, rev int64) (*stream, int64, error) {
	cli := t.cfg.Client
	resp, err := cli.Txn(ctx).Then(
		clientv3.OpGet(keyspace.EpochKey, clientv3.WithRev(rev)),
		clientv3.OpGet(keyspace.ForceRecordPrefix, clientv3.WithPrefix(), clientv3.WithRev(rev)),
	).Commit()
	if err != nil {
		return nil, 0, err
	}
	if rev == 0 {
		rev = resp.Header.Revision
	}
	st := newStream(cluster, epochOf(resp.Responses[0].GetResponseRange().Kvs))
	asked, at := map[int64]keyspace.Force{}, map[int64]int64{} // by session: the latest record, as classify keeps it
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		f, err := keyspace.DecodeForce(kv.Value)
		if err != nil {
			t.cfg.Logger.Warn("audit: a force record did not decode; if it revokes a session, that session's holds are recorded as expired",
				"cluster", hex(cluster), "key", string(kv.Key), "revision", rev)
			continue
		}
		if f.RevokeSession && f.Session != 0 && kv.ModRevision > at[f.Session] {
			asked[f.Session], at[f.Session] = f, kv.ModRevision
		}
	}
	for id, f := range asked {
		sk := keyspace.SessionKey(id)
		if f.Home != 0 {
			sk = keyspace.ClusterSessionKey(f.Home) // id is its lease on this cluster
		}
		sr, err := cli.Get(ctx, sk, clientv3.WithRev(rev), clientv3.WithCountOnly())
		if err != nil {
			return nil, 0, err
		}
		if sr.Count > 0 { // else revoked already, at or before rev
			st.revoking[id] = f
		}
	}
	return st, rev, nil
}

type compacted struct{ rev int64 }

func (c compacted) Error() string { return fmt.Sprintf("audit: watch compacted at revision %d", c.rev) }

// gap records that revisions from..now are lost and snapshots again.
func (t *Tailer) gap(ctx context.Context, f fence, cluster uint64, from int64, why string) (*stream, int64, error) {
	st, head, err := t.streamAt(ctx, cluster, 0)
	if err != nil {
		return nil, 0, err
	}
	epoch := st.epoch
	row := Event{ClusterID: cluster, Epoch: epoch, Revision: head, Kind: KindGap, ObservedAt: t.cfg.Now().UTC(),
		GapFrom: from, GapTo: head, Reason: why}
	if err := t.write(ctx, []Event{row}); err != nil {
		return nil, 0, err
	}
	if err := t.saveCheckpoint(ctx, f, cluster, head); err != nil {
		return nil, 0, err
	}
	t.m.gaps.WithLabelValues(hex(cluster)).Inc()
	t.cfg.Logger.Error("audit gap recorded: revisions are missing from the history", "cluster", hex(cluster), "from", from, "to", head, "why", why)
	t.setStored(cluster, head)
	return st, head + 1, nil
}

// watch tails from rev until an error; a compaction comes back as compacted.
func (t *Tailer) watch(ctx context.Context, f fence, st *stream, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := t.cfg.Client.Watch(wctx, "/", clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(rev))
	var pending []Event
	var pendingRev int64
	var firstAt time.Time
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	// A store rebuilt under the same cluster ID starts its revisions again;
	// a watch resumed past them would wait, or skip what it never sees.
	behind := time.NewTicker(t.cfg.ProbeEvery)
	defer behind.Stop()
	var suspect int64       // a stored revision a probe was behind
	var suspectProbe uint64 // the probe that was
	_, _, probesBefore, _ := t.probed()

	flush := func() error {
		if pendingRev == 0 {
			return nil
		}
		if err := t.write(ctx, pending); err != nil {
			return err
		}
		if err := t.saveCheckpoint(ctx, f, st.clusterID, pendingRev); err != nil {
			return err
		}
		t.m.rows.WithLabelValues(hex(st.clusterID)).Add(float64(len(pending)))
		t.setStored(st.clusterID, pendingRev)
		t.setPending(time.Time{})
		pending, pendingRev = pending[:0], 0
		timer.Stop()
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			if err := flush(); err != nil {
				return err
			}
		case <-behind.C:
			head, headCluster, probes, stored := t.probed()
			if probes <= probesBefore+1 {
				continue // only a probe sent after the watch began
			}
			if headCluster != st.clusterID {
				// Restored under a new cluster ID: the watch, resumed at the
				// old store's revision, would wait until the new store
				// passed it, and only then see the ID.
				t.m.storeResets.Inc()
				t.cfg.Logger.Error("audit: the store's cluster ID changed (restored?); the history goes on with the new store's own, "+
					"and changes of the old store after the last one stored were not read, if there were any",
					"cluster", hex(st.clusterID), "store_cluster", hex(headCluster), "stored", stored)
				return fmt.Errorf("audit: the store's cluster ID changed from %s to %s", hex(st.clusterID), hex(headCluster))
			}
			// A probe answered before the watch's last event can be behind
			// it: only a later probe still behind a stored revision counts.
			switch {
			case head >= stored:
				suspect = 0
				continue
			case suspect == 0 || head >= suspect:
				suspect, suspectProbe = stored, probes
				continue
			case probes <= suspectProbe+1:
				continue // no probe sent after that one was answered yet
			}
			t.m.storeResets.Inc()
			t.cfg.Logger.Error("audit: the store went back (rebuilt under the same cluster ID?); the history goes on from a new snapshot, "+
				"and changes of the old store after the last one stored were not read, if there were any",
				"cluster", hex(st.clusterID), "stored", stored, "store_revision", head)
			return fmt.Errorf("audit: the store's revision %d is behind the history's %d", head, stored)
		case wr, ok := <-wch:
			if !ok {
				return errors.New("audit: watch closed")
			}
			if wr.CompactRevision != 0 {
				return compacted{rev: wr.CompactRevision}
			}
			if err := wr.Err(); err != nil {
				return err
			}
			if wr.Header.ClusterId != st.clusterID {
				return fmt.Errorf("audit: the store's cluster ID changed from %s to %s (restored?); starting its own history",
					hex(st.clusterID), hex(wr.Header.ClusterId))
			}
			// Events of one revision are never split across responses.
			evs := wr.Events
			for len(evs) > 0 {
				r := evs[0].Kv.ModRevision
				n := 1
				for n < len(evs) && evs[n].Kv.ModRevision == r {
					n++
				}
				bad := st.bad
				rows := st.classify(r, evs[:n], t.cfg.Now().UTC())
				if st.bad > bad {
					t.cfg.Logger.Warn("audit: records at this revision did not decode; their rows carry what the key and its lease say",
						"cluster", hex(st.clusterID), "revision", r, "records", st.bad-bad)
				}
				evs = evs[n:]
				if len(rows) == 0 {
					if pendingRev == 0 {
						t.setStored(st.clusterID, r) // nothing to store for it
					} else {
						pendingRev = r
					}
					continue
				}
				if pendingRev == 0 {
					firstAt = t.cfg.Now()
					t.setPending(firstAt)
					timer.Reset(t.cfg.BatchWait)
				}
				pending = append(pending, rows...)
				pendingRev = r
				if len(pending) >= t.cfg.BatchRows {
					if err := flush(); err != nil {
						return err
					}
				}
			}
			if pendingRev != 0 && t.cfg.Now().Sub(firstAt) >= t.cfg.BatchWait {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
}

// write stores rows, retrying for SinkPatience: a slow or failing sink
// slows the tailer, it never drops a row. Past the patience it returns the
// error and the tailer resumes from its checkpoint.
func (t *Tailer) write(ctx context.Context, rows []Event) error {
	giveUp := time.Now().Add(t.cfg.SinkPatience)
	for {
		err := t.cfg.Sink.Write(ctx, rows)
		if err == nil {
			return nil
		}
		t.m.sinkErrors.Inc()
		t.cfg.Logger.Warn("audit sink write failed; retrying", "rows", len(rows), "err", err)
		if time.Now().After(giveUp) {
			return fmt.Errorf("%w: %d rows not stored for %s; resuming from the checkpoint: %w", ErrSink, len(rows), t.cfg.SinkPatience, err)
		}
		if !sleep(ctx, t.cfg.Retry) {
			return ctx.Err()
		}
	}
}

func (t *Tailer) checkpoint(ctx context.Context, cluster uint64) (int64, error) {
	resp, err := t.cfg.Client.Get(ctx, checkpointKey(cluster))
	if err != nil {
		return 0, err
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	rev, err := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("audit: checkpoint %q is malformed", resp.Kvs[0].Value)
	}
	return rev, nil
}

// saveCheckpoint moves the checkpoint to rev, only while this tailer's
// leader key is the one it was elected with.
func (t *Tailer) saveCheckpoint(ctx context.Context, f fence, cluster uint64, rev int64) error {
	resp, err := t.cfg.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(f.key), "=", f.rev)).
		Then(clientv3.OpPut(checkpointKey(cluster), strconv.FormatInt(rev, 10))).
		Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: the leader key %s is gone; the checkpoint stays at its last value", ErrDeposed, f.key)
	}
	t.m.checkpoint.WithLabelValues(hex(cluster)).Set(float64(rev))
	return nil
}

func (t *Tailer) setStored(cluster uint64, rev int64) {
	t.mu.Lock()
	t.cluster, t.done = cluster, max(rev, 0)
	t.mu.Unlock()
}

func (t *Tailer) setPending(at time.Time) {
	t.mu.Lock()
	t.pendingSince = at
	t.mu.Unlock()
}

// probed is the store's revision and cluster ID at the last probe, the
// number of probes answered so far, and the stored revision.
func (t *Tailer) probed() (head int64, cluster uint64, probes uint64, stored int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.head, t.headCluster, t.probes, t.done
}

func (t *Tailer) storedRev() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.done
}

// probe reads the store's head revision every ProbeEvery and sets the lag
// metrics: revisions not yet stored, and how long the oldest of them has
// been in the store.
func (t *Tailer) probe(ctx context.Context) {
	tick := time.NewTicker(t.cfg.ProbeEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !t.Leading() {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, t.cfg.ProbeEvery)
		resp, err := t.cfg.Client.Get(pctx, keyspace.EpochKey, clientv3.WithCountOnly())
		cancel()
		if err != nil {
			continue
		}
		lagRev, lagFor := t.lag(resp.Header.ClusterId, resp.Header.Revision, t.cfg.Now())
		c := hex(resp.Header.ClusterId)
		t.m.lagRevisions.WithLabelValues(c).Set(float64(lagRev))
		t.m.lagSeconds.WithLabelValues(c).Set(lagFor.Seconds())
		t.m.pastHalf.WithLabelValues(c).Set(b2f(lagFor >= t.cfg.CompactionWindow/2))
		t.m.storeRev.WithLabelValues(c).Set(float64(resp.Header.Revision)) // last: the lag above is as of it
	}
}

// lag records a head sample of the store (cluster) and returns its lag
// against the stored revision. Of a store other than the one the history
// is on (restored under a new cluster ID), nothing is stored yet.
func (t *Tailer) lag(cluster uint64, head int64, now time.Time) (int64, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cluster != t.headCluster {
		t.samples = nil
	}
	t.head, t.headCluster = head, cluster
	t.probes++
	done := t.done
	if cluster != t.cluster {
		done = 0
	}
	t.samples = append(t.samples, sample{rev: head, at: now})
	// Samples at or below the stored revision are done with; keep the
	// oldest one above it (it says since when the tailer has been behind).
	i := 0
	for i < len(t.samples) && t.samples[i].rev <= done {
		i++
	}
	t.samples = t.samples[i:]
	if head <= done || len(t.samples) == 0 {
		return 0, 0
	}
	// The probe's samples say it to the probe's interval; rows read but
	// not stored yet say it to the moment.
	lagFor := now.Sub(t.samples[0].at)
	if !t.pendingSince.IsZero() && cluster == t.cluster {
		lagFor = max(lagFor, now.Sub(t.pendingSince))
	}
	return head - done, lagFor
}

func epochOf(kvs []*mvccpb.KeyValue) uint32 {
	if len(kvs) == 0 {
		return 0
	}
	e, _, err := keyspace.DecodeEpoch(kvs[0].Value)
	if err != nil {
		return 0
	}
	return e
}

func hex(id uint64) string { return strconv.FormatUint(id, 16) }

func b2f(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

func sleep(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}
