// Package kubetest starts a real kube-apiserver on loopback for tests: the
// binary `bash ci/tools.sh kube` builds into the tools cache, on an etcd
// embedded in the test process, with a self-signed serving certificate and
// one bearer token in group system:masters. Tests talk to it with client-go
// (RESTConfig) or with commands that take --kubeconfig (Kubeconfig).
//
// It is an API server and nothing else: no controller manager, scheduler or
// kubelet run, so nothing acts on objects (no pod starts, a deleted
// namespace stays Terminating, no garbage collector deletes dependents, no
// service account token is minted for a pod). The default admission plugins
// run but ServiceAccount; authorization is RBAC, with the test's token in
// system:masters, which RBAC never refuses; API Priority and Fairness is
// off.
//
// A missing binary fails the test with the command that builds it; nothing
// is skipped.
package kubetest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Version is the kube-apiserver release `bash ci/tools.sh kube` builds and
// Start runs.
const Version = "v1.37.2"

const (
	// readyTimeout bounds the wait for a started kube-apiserver's /readyz.
	readyTimeout = 60 * time.Second
	// stopTimeout is how long Stop waits after SIGTERM before it kills.
	stopTimeout = 10 * time.Second
	// etcdReadyTimeout bounds the wait for the embedded etcd.
	etcdReadyTimeout = 30 * time.Second
	// logTailBytes is how much of the server's log a failure shows.
	logTailBytes = 4 << 10
)

// Binary returns the kube-apiserver binary the tests run: $LOCKD_KUBE_APISERVER
// if set (it must exist), else $LOCKD_TOOLS/bin/kube-apiserver (LOCKD_TOOLS
// defaults to $HOME/.cache/lockd-tools), else kube-apiserver on PATH. The
// error says how to build it.
func Binary() (string, error) {
	if p := os.Getenv("LOCKD_KUBE_APISERVER"); p != "" {
		if !isExecutable(p) {
			return "", fmt.Errorf("kubetest: LOCKD_KUBE_APISERVER=%s is not an executable file", p)
		}
		return p, nil
	}
	tools := os.Getenv("LOCKD_TOOLS")
	if tools == "" {
		home, _ := os.UserHomeDir()
		tools = filepath.Join(home, ".cache", "lockd-tools")
	}
	if p := filepath.Join(tools, "bin", "kube-apiserver"); isExecutable(p) {
		return p, nil
	}
	if p, err := exec.LookPath("kube-apiserver"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("kubetest: kube-apiserver not found ($LOCKD_KUBE_APISERVER, %s, PATH): "+
		"build it with `bash ci/tools.sh kube` (k8s.io/kubernetes %s from the Go module proxy into $LOCKD_TOOLS/bin; about 10 minutes on a quiet machine, once)",
		filepath.Join(tools, "bin", "kube-apiserver"), Version)
}

// APIServer is a running kube-apiserver and the etcd it stores into. Its
// methods that take no testing.TB fail the test Start was given, so call
// them from the test's goroutine.
type APIServer struct {
	t        testing.TB
	bin      string
	dir      string
	args     []string
	url      string
	token    string
	caPEM    []byte
	kubecfg  string
	logPath  string
	logShown bool // a failure already showed the log's tail

	mu      sync.Mutex
	proc    *exec.Cmd
	exited  chan struct{} // closed when proc has exited
	waitErr error         // proc's exit, once exited is closed
}

// Start starts an etcd in the test process and a kube-apiserver child
// process on a free port of 127.0.0.1 storing into it, waits until the
// server's /readyz answers ok (at most 60 s), and stops both when the test
// ends. Everything it writes (certificates, keys, token file, kubeconfig,
// the server's log, etcd's data) is in a t.TempDir. It fails the test if
// the binary is missing (see Binary) or the server does not become ready;
// the failure shows the tail of the server's log.
func Start(t testing.TB) *APIServer {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	s := &APIServer{t: t, bin: bin, dir: t.TempDir()}
	s.logPath = filepath.Join(s.dir, "kube-apiserver.log")

	etcdURL, err := startEtcd(t, filepath.Join(s.dir, "etcd"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.writeCredentials(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() && !s.logShown {
			t.Logf("kubetest: kube-apiserver log (tail):\n%s", s.logTail())
		}
	})
	for attempt := range 3 {
		port, err := freePort()
		if err != nil {
			t.Fatalf("kubetest: %v", err)
		}
		s.url = fmt.Sprintf("https://127.0.0.1:%d", port)
		s.args = s.flags(port, etcdURL)
		err = s.start()
		if err == nil {
			break
		}
		// Another process may have taken the free port before the server
		// bound it: try another.
		tail := s.logTail()
		if attempt == 2 || !strings.Contains(tail, "address already in use") {
			s.logShown = true
			t.Fatalf("%v; kube-apiserver log (tail):\n%s", err, tail)
		}
	}
	if err := s.writeKubeconfig(); err != nil {
		t.Fatal(err)
	}
	return s
}

// URL returns the server's base URL, https://127.0.0.1:<port>.
func (s *APIServer) URL() string { return s.url }

// RESTConfig returns a new client-go configuration for the server: its URL,
// the token of group system:masters, and its serving certificate as the
// only trusted CA. QPS and Burst are raised above client-go's defaults so
// tests are not throttled by the client.
func (s *APIServer) RESTConfig() *rest.Config {
	return &rest.Config{
		Host:            s.url,
		BearerToken:     s.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: bytes.Clone(s.caPEM)},
		QPS:             200,
		Burst:           400,
	}
}

// Kubeconfig returns the path of a kubeconfig file for the server (context
// "kubetest", the same credentials as RESTConfig), for commands that take
// --kubeconfig.
func (s *APIServer) Kubeconfig() string { return s.kubecfg }

// Stop stops the kube-apiserver process (SIGTERM, then SIGKILL after 10 s)
// and leaves etcd running, so the objects stay for Restart. Requests fail
// until then. Stopping a stopped server does nothing.
func (s *APIServer) Stop() {
	s.mu.Lock()
	proc, exited := s.proc, s.exited
	s.proc = nil
	s.mu.Unlock()
	if proc == nil {
		return
	}
	_ = proc.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(stopTimeout):
		_ = proc.Process.Kill()
		<-exited
	}
}

// Restart stops the kube-apiserver if it runs, starts it again on the same
// port with the same flags and etcd, and waits until it is ready; it fails
// the test if it does not become ready.
func (s *APIServer) Restart() {
	s.t.Helper()
	s.Stop()
	if err := s.start(); err != nil {
		s.logShown = true
		s.t.Fatalf("%v; kube-apiserver log (tail):\n%s", err, s.logTail())
	}
}

// flags are the kube-apiserver command line: loopback only, etcd at
// etcdURL, the credentials writeCredentials made.
func (s *APIServer) flags(port int, etcdURL string) []string {
	f := func(name string) string { return filepath.Join(s.dir, name) }
	return []string{
		// Loopback only. Without --endpoint-reconciler-type=none a
		// loopback advertise address stops the server at start; without
		// an advertise address it advertises the machine's address.
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none",
		fmt.Sprintf("--secure-port=%d", port),
		"--etcd-servers=" + etcdURL,
		"--cert-dir=" + f("certs"),
		"--tls-cert-file=" + f("serving.crt"),
		"--tls-private-key-file=" + f("serving.key"),
		"--token-auth-file=" + f("tokens.csv"),
		"--service-account-key-file=" + f("service-account.key"),
		"--service-account-signing-key-file=" + f("service-account.key"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-cluster-ip-range=10.0.0.0/24",
		// No controller manager mints tokens for pods.
		"--disable-admission-plugins=ServiceAccount",
		// RBAC as in a real cluster, so a test can check that a
		// ClusterRole lockd ships is enough by giving a client only that;
		// the test token's group system:masters passes every check.
		"--authorization-mode=RBAC",
		// API Priority and Fairness off: its bootstrap configuration costs
		// about a second of every start, and tests do not load the
		// server enough to need it (the max-in-flight limits still hold).
		"--enable-priority-and-fairness=false",
		"--profiling=false",
	}
}

// start starts the process with s.args and waits until it is ready.
func (s *APIServer) start() error {
	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	defer logFile.Close()
	fmt.Fprintf(logFile, "=== kubetest: %s %s\n", s.bin, strings.Join(s.args, " "))
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Killed with the test process, should the test binary die before its
	// cleanups run (a test timeout): etcd is in the test process, and a
	// server left behind would retry it forever.
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("kubetest: start %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	s.mu.Lock()
	s.proc, s.exited = cmd, exited
	s.mu.Unlock()
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		s.waitErr = err
		s.mu.Unlock()
		close(exited)
	}()
	if err := s.waitReady(exited); err != nil {
		s.Stop()
		return err
	}
	return nil
}

// waitReady polls /readyz until it answers 200 "ok", the process exits,
// or readyTimeout passes.
func (s *APIServer) waitReady(exited <-chan struct{}) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.caPEM)
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(readyTimeout)
	for {
		err := s.readyOnce(client)
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			s.mu.Lock()
			waitErr := s.waitErr
			s.mu.Unlock()
			return fmt.Errorf("kubetest: kube-apiserver exited before it was ready: %v", waitErr)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubetest: kube-apiserver not ready after %v: %w", readyTimeout, err)
		}
	}
}

func (s *APIServer) readyOnce(client *http.Client) error {
	req, err := http.NewRequest(http.MethodGet, s.url+"/readyz", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ok" {
		return fmt.Errorf("/readyz: %s: %s", resp.Status, lastLines(string(body), 10))
	}
	return nil
}

// writeCredentials writes the serving certificate and key, the service
// account key and the token file into s.dir, and sets s.token and s.caPEM.
func (s *APIServer) writeCredentials() error {
	certPEM, keyPEM, err := selfSignedServing()
	if err != nil {
		return err
	}
	saKey, err := ecdsaKeyPEM()
	if err != nil {
		return err
	}
	s.caPEM = certPEM
	s.token = randomHex(32)
	files := map[string][]byte{
		"serving.crt":         certPEM,
		"serving.key":         keyPEM,
		"service-account.key": saKey,
		// token,user,uid,groups
		"tokens.csv": []byte(s.token + ",kubetest-admin,kubetest-admin,system:masters\n"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(s.dir, name), data, 0o600); err != nil {
			return fmt.Errorf("kubetest: %w", err)
		}
	}
	return nil
}

// writeKubeconfig writes a kubeconfig with RESTConfig's credentials.
func (s *APIServer) writeKubeconfig() error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: s.url, CertificateAuthorityData: s.caPEM}
	cfg.AuthInfos["kubetest"] = &clientcmdapi.AuthInfo{Token: s.token}
	cfg.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "kubetest", Namespace: "default"}
	cfg.CurrentContext = "kubetest"
	s.kubecfg = filepath.Join(s.dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, s.kubecfg); err != nil {
		return fmt.Errorf("kubetest: write kubeconfig: %w", err)
	}
	return nil
}

// logTail returns the last logTailBytes of the server's log.
func (s *APIServer) logTail() string {
	f, err := os.Open(s.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > logTailBytes {
		_, _ = f.Seek(-logTailBytes, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// startEtcd starts a single-member etcd in dir on free loopback ports,
// silenced, closed when the test ends, and returns its client URL.
func startEtcd(t testing.TB, dir string) (string, error) {
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.Name = "kubetest"
	local, err := url.Parse("http://127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("kubetest: etcd: %w", err)
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*local}, []url.URL{*local}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*local}, []url.URL{*local}
	cfg.InitialCluster = cfg.Name + "=" + local.String()
	cfg.InitialClusterToken = "kubetest"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// Left at 0, etcd stringifies every request to compare it to this.
	cfg.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return "", fmt.Errorf("kubetest: start etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return "", fmt.Errorf("kubetest: etcd: %w", err)
	case <-time.After(etcdReadyTimeout):
		e.Close()
		return "", fmt.Errorf("kubetest: etcd not ready after %v", etcdReadyTimeout)
	}
	t.Cleanup(e.Close)
	return "http://" + e.Clients[0].Addr().String(), nil
}

// selfSignedServing returns a self-signed ECDSA certificate for
// IP:127.0.0.1 and DNS:localhost and its key, PEM encoded. It is its own
// CA: clients trust it directly.
func selfSignedServing() (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("kubetest: serving key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("kubetest: serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "kubetest-apiserver"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("kubetest: serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("kubetest: serving key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// ecdsaKeyPEM returns a new P-256 key, PEM encoded: the service account
// token signing key (the server derives the verifying key from it).
func ecdsaKeyPEM() ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("kubetest: service account key: %w", err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("kubetest: service account key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// repoRoot is the module root: two levels above this file's directory,
// or, when the binary was built with -trimpath (no file paths), the nearest
// directory above the working directory with lockd's go.mod.
func repoRoot() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		return filepath.Join(filepath.Dir(file), "..", ".."), nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("kubetest: repository root: %w", err)
	}
	for {
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(mod, []byte("module "+modulePath+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("kubetest: repository root: no go.mod of %s above the working directory", modulePath)
		}
		dir = parent
	}
}

// modulePath is lockd's module.
const modulePath = "github.com/lockd-dev/lockd"

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
