package renewal

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// etcd's counters the run reads.
const (
	// leaseRenewed counts renewals seen by etcd's leader (lessor.Renew).
	leaseRenewed = "etcd_debugging_lease_renewed_total"
	// proposalsCommitted is the committed Raft index: every consensus
	// write moves it, a keepalive does not.
	proposalsCommitted = "etcd_server_proposals_committed_total"
	// leaseExpired counts leases etcd revoked at expiry.
	leaseExpired = "etcd_debugging_server_lease_expired_total"
	// putTotal and txnTotal count MVCC writes, for the notes.
	putTotal = "etcd_mvcc_put_total"
	txnTotal = "etcd_mvcc_txn_total"
)

var wanted = []string{leaseRenewed, proposalsCommitted, leaseExpired, putTotal, txnTotal}

// scrape reads etcd's Prometheus text metrics at url+"/metrics" and returns
// the wanted series, each summed over its labels.
func scrape(ctx context.Context, url string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(url, "/")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("renewal: %s/metrics: %s", url, resp.Status)
	}
	return parseMetrics(resp.Body, wanted)
}

// parseMetrics reads the Prometheus text format and sums, for each name,
// the samples of that exact metric name (any labels).
func parseMetrics(r io.Reader, names []string) (map[string]float64, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end < 0 || !want[line[:end]] {
			continue
		}
		rest := line[end:]
		if rest[0] == '{' {
			i := strings.LastIndexByte(rest, '}')
			if i < 0 {
				continue
			}
			rest = rest[i+1:]
		}
		f := strings.Fields(rest) // value [timestamp]
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		out[line[:end]] += v
	}
	return out, sc.Err()
}
