package pausetest

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func inspectReq(key string) *lockv1.InspectRequest { return &lockv1.InspectRequest{Key: key} }
