package lockd

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// loadArbiterID returns this lockd's arbiter ID, kept in <dataDir>/arbiter-id
// and created on first start: it names the lockd's unprotected grants and
// their history rows, whose spool sequence numbers are per arbiter, so it
// must not change while the data dir (and its spool) lives.
func loadArbiterID(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "arbiter-id")
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		id := strings.TrimSpace(string(b))
		if id == "" || strings.ContainsAny(id, "/ \t") {
			return "", fmt.Errorf("%s: not an arbiter ID (%q); remove the file to get a new one only if the spool beside it is empty", path, id)
		}
		return id, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("read the arbiter ID: %w", err)
	}
	var r [8]byte
	_, _ = rand.Read(r[:])
	id := hex.EncodeToString(r[:])
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write the arbiter ID: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("write the arbiter ID: %w", err)
	}
	return id, nil
}
