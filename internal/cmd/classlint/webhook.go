package classlint

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/internal/admission"
	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/cli"
)

// Webhook paths.
const (
	// webhookPath is where the API server posts AdmissionReviews.
	webhookPath = "/validate"
	// healthPath answers probes.
	healthPath = "/healthz"
)

// webhookShutdownTimeout bounds how long in-flight reviews may take to
// finish after SIGTERM.
const webhookShutdownTimeout = 10 * time.Second

// classesMaxAge is how long the webhook uses the classes it read from
// --classes before reading the directory again. A sync tool publishes a
// new checkout in one step (git-sync swaps a symlink), so a read sees one
// commit; reviews arriving together share a read.
const classesMaxAge = 2 * time.Second

// WebhookOptions are the options of class-lint webhook.
type WebhookOptions struct {
	// Listen is the address to serve HTTPS on.
	Listen string
	// CertFile and KeyFile hold the serving certificate and its key, in
	// PEM; they are read again when they change.
	CertFile, KeyFile string
	// ClassesDir, when set, is a checkout of the class repository's class
	// directory: the other classes a LockClass's keys are checked against.
	ClassesDir string
	// Now is the clock for waiver expiry.
	Now func() time.Time
	// ErrOut receives the logs.
	ErrOut io.Writer
}

func newWebhookCmd(stderr io.Writer) *cobra.Command {
	opts := WebhookOptions{Listen: ":8443", Now: time.Now, ErrOut: stderr}
	cmd := &cobra.Command{
		Use:   "webhook --tls-cert FILE --tls-key FILE",
		Short: "Serve the class rules as a Kubernetes validating admission webhook",
		Long: `webhook serves HTTPS: the API server posts AdmissionReviews (admission.k8s.io/v1)
for LockClass, LockGrant and PauseTestResult objects to ` + webhookPath + `, and the
webhook denies an object that breaks a rule lockd applies at load or whose
advisory waiver has lapsed, with the rule ids and messages of class-lint
check. DELETE is always allowed. ` + healthPath + ` answers probes.

With --classes DIR (a checkout of the class directory kept current next to
the webhook, for example by a git-sync sidecar), a LockClass is also checked
against the other classes of its namespace there: it is denied when it claims
a prefix another class claims, or carves keys out of another class without
naming it in spec.nestedIn (key-ownership). The directory is read again at
most every ` + classesMaxAge.String() + `; while it cannot be read, every LockClass is denied. Without
--classes that check is not made, and every LockClass review carries a
warning saying so.

The rules that need the rest of the class repository (pause-test results for
fenced classes, overlapping grants, CODEOWNERS) are not applied: class-lint
check covers them in CI. docs/admission.md explains what is enforced and how
to deploy the webhook (deploy/ has the manifests).

The certificate and key are read again when either file changes, so a
certificate renewed by cert-manager is served without a restart. SIGTERM or
SIGINT stops the server after the reviews in flight are answered.

Exit status: 0 after a clean shutdown, 2 when the certificate cannot be loaded
or the address cannot be listened on.`,
		Example: `  class-lint webhook --listen :8443 --tls-cert /tls/tls.crt --tls-key /tls/tls.key --classes /git/lock-classes/classes`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.CertFile == "" || opts.KeyFile == "" {
				return cli.Usagef("--tls-cert and --tls-key are required: the API server calls webhooks over HTTPS only")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if code := webhookRun(ctx, opts); code != ExitOK {
				return &cli.ExitError{Code: code, Silent: true} // logged
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Listen, "listen", opts.Listen, "address to serve HTTPS on")
	f.StringVar(&opts.CertFile, "tls-cert", "", "PEM serving certificate (chain), read again when it changes (required)")
	f.StringVar(&opts.KeyFile, "tls-key", "", "PEM private key of the serving certificate (required)")
	f.StringVar(&opts.ClassesDir, "classes", "", "class directory (one folder per namespace) to check a LockClass's keys against the other classes; kept current by a sync tool such as git-sync")
	f.Var(&nowFlag{now: &opts.Now}, "now", "validate as of this RFC 3339 time instead of the clock (for tests)")
	_ = f.MarkHidden("now")
	return cmd
}

// webhookRun serves until ctx is done and returns the exit code.
func webhookRun(ctx context.Context, opts WebhookOptions) int {
	log := slog.New(slog.NewTextHandler(opts.ErrOut, nil))
	certs := &certLoader{certFile: opts.CertFile, keyFile: opts.KeyFile, log: log}
	if _, err := certs.GetCertificate(nil); err != nil {
		log.Error("cannot load the serving certificate", "err", err)
		return ExitUsage
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		log.Error("cannot listen", "err", err)
		return ExitUsage
	}

	var hopts []admission.Option
	if opts.ClassesDir == "" {
		log.Warn("key ownership across LockClasses is not checked: a class claiming another class's keys is admitted with a warning; " +
			"pass --classes DIR, a checkout of the class repository, to check it")
	} else {
		peers := &dirPeers{dir: opts.ClassesDir, maxAge: classesMaxAge}
		if _, err := peers.Classes(ctx, ""); err != nil {
			log.Warn("cannot read the classes yet: every LockClass is denied until they can be read", "classes", opts.ClassesDir, "err", err)
		} else {
			log.Info("checking key ownership against the classes", "classes", opts.ClassesDir)
		}
		hopts = append(hopts, admission.WithPeers(peers))
	}

	mux := http.NewServeMux()
	mux.Handle(webhookPath, admission.NewHandler(opts.Now, log, hopts...))
	mux.HandleFunc(healthPath, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	srv := &http.Server{
		Handler:           mux,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.GetCertificate},
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       90 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.With("component", "http").Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(ln, "", "") }()
	log.Info("serving admission webhook", "addr", "https://"+ln.Addr().String()+webhookPath)

	select {
	case err := <-served:
		log.Error("server stopped", "err", err)
		return ExitUsage
	case <-ctx.Done():
	}
	log.Info("shutting down: answering the reviews in flight")
	sctx, cancel := context.WithTimeout(context.Background(), webhookShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("shutdown", "err", err)
	}
	log.Info("stopped")
	return ExitOK
}

// certLoader serves a key pair from two PEM files and loads it again when
// either file's size or modification time changes. A Kubernetes Secret
// volume (where cert-manager's renewals land) replaces both files at once;
// a pair that does not load — a writer caught halfway — is retried on the
// next handshake while the previous pair is still served.
type certLoader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu     sync.Mutex
	cert   *tls.Certificate
	stamp  [2]fileStamp // of the files cert was loaded from
	failed [2]fileStamp // of the files that last failed to load, to log once
}

type fileStamp struct {
	size    int64
	modTime time.Time
}

func (l *certLoader) stamps() ([2]fileStamp, error) {
	var st [2]fileStamp
	for i, name := range []string{l.certFile, l.keyFile} {
		fi, err := os.Stat(name)
		if err != nil {
			return st, err
		}
		st[i] = fileStamp{size: fi.Size(), modTime: fi.ModTime()}
	}
	return st, nil
}

// GetCertificate is the tls.Config callback.
func (l *certLoader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st, err := l.stamps()
	if err == nil && l.cert != nil && st == l.stamp {
		return l.cert, nil
	}
	if err == nil {
		var c tls.Certificate
		if c, err = tls.LoadX509KeyPair(l.certFile, l.keyFile); err == nil {
			if c.Leaf == nil {
				c.Leaf, _ = x509.ParseCertificate(c.Certificate[0])
			}
			l.cert, l.stamp = &c, st
			if c.Leaf != nil {
				l.log.Info("loaded serving certificate", "file", l.certFile, "subject", c.Leaf.Subject.String(),
					"serial", c.Leaf.SerialNumber.String(), "notAfter", c.Leaf.NotAfter.UTC().Format(time.RFC3339))
			}
			return l.cert, nil
		}
	}
	err = fmt.Errorf("loading %s and %s: %w (check that both files hold the PEM certificate and its key)", l.certFile, l.keyFile, err)
	if l.cert == nil {
		return nil, err
	}
	if st != l.failed {
		l.failed = st
		l.log.Warn("keeping the previous serving certificate", "err", err)
	}
	return l.cert, nil
}

var _ admission.RegionPeers = (*dirPeers)(nil)

// dirPeers serves the classes of a class directory as the webhook's peers:
// it reads the directory with class.Inspect, keeping what it read for
// maxAge. Every class that can be decoded counts, rule violations or not:
// its spec.keys are what the repository claims.
type dirPeers struct {
	dir    string
	maxAge time.Duration
	now    func() time.Time // time.Now when nil

	mu    sync.Mutex
	read  time.Time // when byNS was read; zero when never
	byNS  map[string][]*class.Class
	homes []class.Home
}

// Classes returns the classes of namespace, reading the directory again
// when what was read is older than maxAge. A read that fails is not kept:
// the next review tries again. Each class's Source is its path relative to
// the directory, as a reviewer finds it in the repository.
func (p *dirPeers) Classes(_ context.Context, namespace string) ([]*class.Class, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.refresh(); err != nil {
		return nil, err
	}
	return p.byNS[namespace], nil
}

// Homes returns the directory's LockNamespaces and the namespaces with a
// LockClass, read as Classes reads them.
func (p *dirPeers) Homes(context.Context) ([]class.Home, []string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.refresh(); err != nil {
		return nil, nil, err
	}
	return p.homes, slices.Sorted(maps.Keys(p.byNS)), nil
}

// refresh reads the directory again when what was read is older than
// maxAge (p.mu held).
func (p *dirPeers) refresh() error {
	now := time.Now
	if p.now != nil {
		now = p.now
	}
	if p.byNS != nil && now().Sub(p.read) < p.maxAge {
		return nil
	}
	t, err := class.Inspect(p.dir, time.Time{})
	if err != nil {
		return fmt.Errorf("--classes %s: %w", p.dir, err)
	}
	byNS := make(map[string][]*class.Class)
	for _, c := range t.Classes {
		cp := *c
		if rel, err := filepath.Rel(p.dir, c.Source); err == nil {
			cp.Source = filepath.ToSlash(rel)
		}
		byNS[c.Namespace] = append(byNS[c.Namespace], &cp)
	}
	p.byNS, p.homes, p.read = byNS, t.Homes, now()
	return nil
}
