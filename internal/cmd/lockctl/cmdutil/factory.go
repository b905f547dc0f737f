// Package cmdutil holds what lockctl's commands share: the Factory of lazy
// dependencies, config resolution, usage errors and exit codes.
package cmdutil

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/client/clientconfig"
)

// Factory builds a command's dependencies on first use, so that --help,
// completion and flag errors never read config or dial lockd. Tests
// replace any field.
type Factory struct {
	IOStreams *iostreams.IOStreams
	// Now is the clock for relative times.
	Now func() time.Time

	// Set by the root command's persistent flags before any command runs.
	ConfigFlag  string
	ContextName string
	Output      printer.Format

	// ConfigLookup resolves the config file; defaults to the real
	// environment with ConfigFlag.
	ConfigLookup func() ConfigLookup
	// Config loads the resolved config file and returns it with its path.
	Config func() (*clientconfig.Config, string, error)
	// Client dials lockd with the selected context.
	Client func() (*client.Client, error)

	mu     sync.Mutex
	target string
}

// New returns a Factory wired to the process's streams, environment and
// file system.
func New() *Factory {
	f := &Factory{IOStreams: iostreams.System(), Now: time.Now, Output: printer.FormatTable}
	f.ConfigLookup = func() ConfigLookup { return SystemConfigLookup(f.ConfigFlag) }
	var (
		once sync.Once
		cfg  *clientconfig.Config
		path string
		err  error
	)
	f.Config = func() (*clientconfig.Config, string, error) {
		once.Do(func() { cfg, path, err = loadConfig(f.ConfigLookup()) })
		return cfg, path, err
	}
	f.Client = func() (*client.Client, error) {
		cfg, path, err := f.Config()
		if err != nil {
			return nil, err
		}
		cx, err := cfg.Context(f.ContextName)
		if err != nil {
			return nil, contextError(cfg, path, f.ContextName)
		}
		f.mu.Lock()
		f.target = cx.Server
		f.mu.Unlock()
		opts, err := cx.Options()
		if err != nil {
			return nil, fmt.Errorf("context %q in %s: %w", cx.Name, path, err)
		}
		if tok := Getenv(EnvOperatorToken); tok != "" {
			opts = append(opts, client.WithOperatorToken(tok))
		}
		c, err := client.New(opts...)
		if err != nil {
			return nil, fmt.Errorf("context %q in %s: %w", cx.Name, path, err)
		}
		return c, nil
	}
	return f
}

// Target is the lockd address of the client built so far ("" if none):
// error messages name it.
func (f *Factory) Target() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.target
}

// Printer returns the printer for the selected output format.
func (f *Factory) Printer() *printer.Printer {
	return &printer.Printer{
		Format: f.Output,
		Out:    f.IOStreams.Out,
		ErrOut: f.IOStreams.ErrOut,
		TTY:    f.IOStreams.IsStdoutTTY(),
		Color:  f.IOStreams.ColorEnabled(),
		Now:    f.Now,
	}
}

// Describe is [Describe] for lockd at f's target, plus, for a
// WRONG_REGION refusal, the contexts of the resolved config that serve the
// region it names.
func (f *Factory) Describe(err error) string {
	msg := Describe(err, f.Target())
	if hint := f.servingHint(err); hint != "" {
		msg += "\n" + hint
	}
	return msg
}

// servingHint names the contexts for the region a WRONG_REGION refusal
// names: "" when err is not one, or the config cannot be read.
func (f *Factory) servingHint(err error) string {
	region, endpoint, ok := client.Region(err)
	if !ok {
		return ""
	}
	cfg, _, cerr := f.Config()
	if cerr != nil {
		return ""
	}
	names := cfg.Serving(region, endpoint)
	if len(names) == 0 {
		return fmt.Sprintf("no context of yours serves region %s: add one (server: its lockd, region: %s)", region, region)
	}
	return fmt.Sprintf("region %s is served by context %s: lockctl --context %s …", region, strings.Join(names, ", "), names[0])
}

// ContextNames lists the contexts of the resolved config (completion).
func (f *Factory) ContextNames() []string {
	cfg, _, err := f.Config()
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(cfg.Contexts))
	for _, cx := range cfg.Contexts {
		names = append(names, cx.Name)
	}
	return names
}

func loadConfig(l ConfigLookup) (*clientconfig.Config, string, error) {
	path, _, err := ResolveConfigPath(l)
	if err != nil {
		return nil, "", err
	}
	cfg, err := clientconfig.Load(path)
	if err != nil {
		return nil, path, fmt.Errorf("%w\nfix the file, or point --config / $%s at another one", err, EnvConfig)
	}
	return cfg, path, nil
}

func contextError(cfg *clientconfig.Config, path, name string) error {
	names := make([]string, 0, len(cfg.Contexts))
	for _, cx := range cfg.Contexts {
		names = append(names, cx.Name)
	}
	slices.Sort(names)
	known := "it has no contexts"
	if len(names) > 0 {
		known = "it has: " + strings.Join(names, ", ")
	}
	if name == "" {
		if cfg.CurrentContext == "" {
			return fmt.Errorf("%s sets no current-context: pass --context (%s)", path, known)
		}
		name = cfg.CurrentContext
		return fmt.Errorf("current-context %q is not in %s: pass --context (%s)", name, path, known)
	}
	return fmt.Errorf("no context %q in %s (%s)", name, path, known)
}

// Getenv is os.Getenv, for flag defaults.
var Getenv = os.Getenv
