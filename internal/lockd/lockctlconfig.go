package lockd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/lockd-dev/lockd/pkg/client/clientconfig"
)

const lockctlHeader = "# lockctl configuration for the lockd development server, written once by lockd.\n" +
	"# lockd never overwrites this file; delete it to have it written again.\n"

// writeLockctlConfig writes cfg, lockctl's config format, to path unless the file exists. It reports
// whether it wrote the file.
func writeLockctlConfig(path string, cfg clientconfig.Config) (bool, error) {
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return false, fmt.Errorf("encode %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	_, err = f.Write(append([]byte(lockctlHeader), data...))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	return true, nil
}
