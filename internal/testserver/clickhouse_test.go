package testserver

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// clickHouseQuery runs query over ClickHouse's HTTP interface.
func clickHouseQuery(client *http.Client, addr, query string) (string, error) {
	resp, err := client.Post("http://"+addr+"/", "text/plain", strings.NewReader(query))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", &httpError{resp.Status, string(body)}
	}
	return strings.TrimSpace(string(body)), err
}

type httpError struct{ status, body string }

func (e *httpError) Error() string { return e.status + ": " + e.body }

func TestStartClickHouse(t *testing.T) {
	client := &http.Client{Timeout: 5 * time.Second}
	var c *ClickHouse
	t.Run("started", func(t *testing.T) {
		c = StartClickHouseServer(t)
		require.Equal(t, "clickhouse://"+c.TCPAddr+"/lockd_audit", c.URL)
		require.True(t, strings.HasPrefix(c.TCPAddr, "127.0.0.1:"), c.TCPAddr)
		v, err := clickHouseQuery(client, c.HTTPAddr, "SELECT version()")
		require.NoError(t, err)
		t.Logf("ClickHouse %s at %s", v, c.URL)

		// Data written before a stop is there after the restart.
		_, err = clickHouseQuery(client, c.HTTPAddr, "CREATE TABLE default.t (x UInt8) ENGINE = MergeTree ORDER BY x")
		require.NoError(t, err)
		_, err = clickHouseQuery(client, c.HTTPAddr, "INSERT INTO default.t VALUES (7)")
		require.NoError(t, err)
		c.Stop()
		_, err = clickHouseQuery(client, c.HTTPAddr, "SELECT 1")
		require.Error(t, err, "stopped")
		c.Restart()
		got, err := clickHouseQuery(client, c.HTTPAddr, "SELECT sum(x) FROM default.t")
		require.NoError(t, err)
		require.Equal(t, "7", got)
	})
	_, err := clickHouseQuery(client, c.HTTPAddr, "SELECT 1")
	require.Error(t, err, "stopped when the test ended")
}

func TestStartClickHouseURL(t *testing.T) {
	url := StartClickHouse(t)
	require.True(t, strings.HasPrefix(url, "clickhouse://127.0.0.1:"), url)
	require.True(t, strings.HasSuffix(url, "/lockd_audit"), url)
}

func TestClickHouseBinaryMissing(t *testing.T) {
	saved := clickHouseSbin
	t.Cleanup(func() { clickHouseSbin = saved })
	clickHouseSbin = filepath.Join(t.TempDir(), "clickhouse-server")
	t.Setenv("PATH", t.TempDir())
	_, err := ClickHouseBinary()
	require.ErrorContains(t, err, "bash ci/tools.sh apt")
}
