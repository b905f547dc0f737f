package arbiter

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// watermark is what an arbiter remembers in its state file: the highest
// epoch it has served, the cluster ID that epoch was bound to, the highest
// store revision it read in that epoch, and the longest session TTL it has
// seen. A store behind it (a lower epoch, no epoch record, or the same
// epoch at a lower revision) is sealed at start.
type watermark struct {
	Epoch     uint32 `json:"epoch"`
	ClusterID uint64 `json:"clusterID,string"`
	Revision  int64  `json:"revision"`
	// MaxSessionTTL is in seconds.
	MaxSessionTTL int64 `json:"maxSessionTTLSeconds"`
}

// stateWriteEvery paces writes that only move the revision forward.
const stateWriteEvery = 10 * time.Second

func loadWatermark(path string) (watermark, error) {
	var w watermark
	if path == "" {
		return w, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return w, nil
	}
	if err != nil {
		return w, fmt.Errorf("%w: state file: %v", ErrInvalid, err)
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return w, fmt.Errorf("%w: state file %s is malformed (%v); it records the highest epoch served: "+
			"fix it by hand rather than delete it", ErrInvalid, path, err)
	}
	return w, nil
}

// rememberLocked records an unsealed state st read at store revision rev in
// the state file, when it moves the watermark. The caller holds epochMu.
func (c *cell) rememberLocked(st *epochState, rev int64) {
	if c.stateFile == "" || st.sealed {
		return
	}
	m, changed := c.mark, false
	if st.epoch > m.Epoch || (st.epoch == m.Epoch && st.clusterID != m.ClusterID) {
		m = watermark{Epoch: st.epoch, ClusterID: st.clusterID, Revision: rev, MaxSessionTTL: m.MaxSessionTTL}
		changed = true
	}
	if ttl := c.maxTTLSeen.Load(); ttl > m.MaxSessionTTL {
		m.MaxSessionTTL, changed = ttl, true
	}
	if rev > m.Revision {
		m.Revision = rev
		changed = changed || time.Since(c.markWritten) >= stateWriteEvery
	}
	if !changed {
		c.mark = m
		return
	}
	if err := writeWatermark(c.stateFile, m); err != nil {
		c.log.Warn("could not write the state file; the highest epoch served is not remembered across restarts",
			"path", c.stateFile, "err", err)
		return
	}
	c.mark, c.markWritten = m, time.Now()
}

// writeWatermark replaces the state file atomically and durably.
func writeWatermark(path string, m watermark) error {
	b, _ := json.Marshal(m)
	f, err := os.CreateTemp(filepath.Dir(path), ".epoch-state-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(append(b, '\n')); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// noteTTL records a session TTL seen, for the grace of the next advance.
func (c *cell) noteTTL(ttl time.Duration) {
	s := int64(ttl / time.Second)
	for {
		cur := c.maxTTLSeen.Load()
		if s <= cur || c.maxTTLSeen.CompareAndSwap(cur, s) {
			return
		}
	}
}
