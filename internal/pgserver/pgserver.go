// Package pgserver starts a throwaway PostgreSQL cluster from the
// machine's server binaries, for the release gate's fenced store and for tests
// that need a real PostgreSQL. As root, initdb and pg_ctl run as the user
// postgres.
package pgserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// postgresBinDir is where Debian's postgresql package puts PostgreSQL 15.
const postgresBinDir = "/usr/lib/postgresql/15/bin"

// postgresInstallHint tells how to get the server binaries.
const postgresInstallHint = "install them with: apt-get install -y postgresql"

// postgresReadyTimeout bounds the wait for a started server to accept
// connections.
const postgresReadyTimeout = 30 * time.Second

// maxSocketPath is the most a Unix socket path may hold (sun_path less the
// terminating NUL) on Linux.
const maxSocketPath = 107

// Errors.
var (
	// ErrMissing is returned by Start when the PostgreSQL server binaries
	// are not installed.
	ErrMissing = errors.New("pgserver: PostgreSQL server binaries not found")
	// ErrStart is returned by Start when the server could not be started.
	ErrStart = errors.New("pgserver: cannot start PostgreSQL")
)

// Start initialises a throwaway PostgreSQL cluster in dir/data and
// starts it, listening on 127.0.0.1 on a free port with trust
// authentication, its Unix socket in dir/sock and its log in
// dir/postgres.log. It returns the URL of the database "postgres" as user
// "postgres" once the server accepts connections, and stop, which stops it
// (pg_ctl stop -m fast); stop may be called more than once.
//
// dir is created if needed and made 0755. Run as root, initdb and pg_ctl
// run as the user postgres (runuser), which must be able to reach dir: all
// its parent directories must be searchable by that user (t.TempDir's are
// not). dir/data must not exist or be empty.
func Start(ctx context.Context, dir string, fsync bool) (url string, stop func() error, err error) {
	bin, err := findPostgresBin()
	if err != nil {
		return "", nil, err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %w", ErrStart, err)
	}
	s := &pgServer{
		bin:     bin,
		dir:     dir,
		dataDir: filepath.Join(dir, "data"),
		sockDir: filepath.Join(dir, "sock"),
		logFile: filepath.Join(dir, "postgres.log"),
		fsync:   fsync,
	}
	if err := s.prepare(); err != nil {
		s.cleanup()
		return "", nil, fmt.Errorf("%w: %w", ErrStart, err)
	}
	if err := s.run(ctx, s.binary("initdb"), "-D", s.dataDir, "--auth=trust", "-U", "postgres",
		"-E", "UTF8", "--no-locale", "--no-instructions"); err != nil {
		s.cleanup()
		return "", nil, fmt.Errorf("%w: initdb: %w", ErrStart, err)
	}
	if err := s.configure(); err != nil {
		s.cleanup()
		return "", nil, fmt.Errorf("%w: %w", ErrStart, err)
	}
	port, err := s.start(ctx)
	if err != nil {
		s.cleanup()
		return "", nil, fmt.Errorf("%w: %w", ErrStart, err)
	}
	stop = sync.OnceValue(s.stop)
	url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	if err := waitPostgres(ctx, url); err != nil {
		_ = stop()
		return "", nil, fmt.Errorf("%w: %w; log:\n%s", ErrStart, err, s.logTail())
	}
	return url, stop, nil
}

// findPostgresBin returns a directory holding initdb, pg_ctl and postgres:
// PostgreSQL 15's, pg_config --bindir, another version's under
// /usr/lib/postgresql, or the one of initdb on PATH.
func findPostgresBin() (string, error) {
	candidates := []string{postgresBinDir}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	others, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(others, func(i, j int) bool { return versionOf(others[i]) > versionOf(others[j]) })
	candidates = append(candidates, others...)
	if p, err := exec.LookPath("initdb"); err == nil {
		candidates = append(candidates, filepath.Dir(p))
	}
	for _, dir := range candidates {
		if isExecutable(filepath.Join(dir, "initdb")) &&
			isExecutable(filepath.Join(dir, "pg_ctl")) &&
			isExecutable(filepath.Join(dir, "postgres")) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%w: need initdb, pg_ctl and postgres in %s, pg_config --bindir or PATH; %s",
		ErrMissing, postgresBinDir, postgresInstallHint)
}

// versionOf returns N of /usr/lib/postgresql/N/bin, or 0.
func versionOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// pgServer is one cluster started by Start.
type pgServer struct {
	bin, dir, dataDir, sockDir, logFile string
	fsync                               bool

	// runuser is set when running as root: the binaries run as postgres.
	runuser  string
	uid, gid int
	// tmpSockDir is a socket directory made outside dir because dir's path
	// is too long for a socket; removed by stop.
	tmpSockDir string
}

// prepare makes the directories and, as root, hands them to postgres.
func (s *pgServer) prepare() error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(s.dir, 0o755); err != nil {
		return err
	}
	if entries, err := os.ReadDir(s.dataDir); err == nil && len(entries) > 0 {
		return fmt.Errorf("data directory %s is not empty", s.dataDir)
	}
	if len(s.sockDir)+len("/.s.PGSQL.65535") > maxSocketPath {
		tmp, err := os.MkdirTemp("", "pgsock")
		if err != nil {
			return err
		}
		s.tmpSockDir, s.sockDir = tmp, tmp
	}
	for _, d := range []string{s.dataDir, s.sockDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(s.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_ = f.Close()
	if os.Geteuid() != 0 {
		return nil
	}

	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("running as root needs the user postgres (%s): %w", postgresInstallHint, err)
	}
	if s.uid, err = strconv.Atoi(u.Uid); err != nil {
		return err
	}
	if s.gid, err = strconv.Atoi(u.Gid); err != nil {
		return err
	}
	if s.runuser, err = exec.LookPath("runuser"); err != nil {
		s.runuser = "/usr/sbin/runuser"
		if !isExecutable(s.runuser) {
			return fmt.Errorf("running as root needs runuser (util-linux): %w", err)
		}
	}
	for _, p := range []string{s.dataDir, s.sockDir, s.logFile} {
		if err := os.Chown(p, s.uid, s.gid); err != nil {
			return err
		}
	}
	if err := s.run(context.Background(), "test", "-w", s.dataDir, "-a", "-x", s.dataDir); err != nil {
		return fmt.Errorf("user postgres cannot use %s; make its parent directories searchable (chmod o+x):%s",
			s.dataDir, unsearchable(s.dir))
	}
	return nil
}

// unsearchable lists dir's ancestors that others cannot search.
func unsearchable(dir string) string {
	var b strings.Builder
	for d := dir; ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			fmt.Fprintf(&b, " %s (%v)", d, fi.Mode().Perm())
		}
		if parent := filepath.Dir(d); parent == d {
			break
		}
	}
	return b.String()
}

// configure appends the server's settings to postgresql.conf; the port is
// given at start.
func (s *pgServer) configure() error {
	conf := filepath.Join(s.dataDir, "postgresql.conf")
	f, err := os.OpenFile(conf, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	fsync := "off"
	if s.fsync {
		fsync = "on"
	}
	_, err = fmt.Fprintf(f, "\n# pgserver\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = %s\nfsync = %s\n",
		confQuote(s.sockDir), fsync)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// confQuote quotes a postgresql.conf string value.
func confQuote(v string) string {
	return "'" + strings.ReplaceAll(v, "'", "''") + "'"
}

// start starts the server on a free port, trying again with another port
// if the chosen one was taken meanwhile.
func (s *pgServer) start(ctx context.Context) (int, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			return 0, err
		}
		err = s.run(ctx, s.binary("pg_ctl"), "-D", s.dataDir, "-l", s.logFile, "-w", "-t", "30",
			"-o", "-p "+strconv.Itoa(port), "start")
		if err == nil {
			return port, nil
		}
		tail := s.logTail()
		lastErr = fmt.Errorf("%w; log:\n%s", err, tail)
		// pg_ctl may have given up on a server that is still starting.
		_ = s.run(context.Background(), s.binary("pg_ctl"), "-D", s.dataDir, "-m", "immediate", "-w", "-t", "10", "stop")
		if !strings.Contains(tail, "could not bind") && !strings.Contains(tail, "already in use") {
			break
		}
	}
	return 0, lastErr
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// stop stops the server and removes a socket directory made outside dir.
func (s *pgServer) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := s.run(ctx, s.binary("pg_ctl"), "-D", s.dataDir, "-m", "fast", "-w", "-t", "50", "stop")
	s.cleanup()
	if err != nil {
		return fmt.Errorf("pgserver: pg_ctl stop: %w", err)
	}
	return nil
}

func (s *pgServer) cleanup() {
	if s.tmpSockDir != "" {
		_ = os.RemoveAll(s.tmpSockDir)
	}
}

// binary returns the path of the PostgreSQL program name.
func (s *pgServer) binary(name string) string {
	return filepath.Join(s.bin, name)
}

// run runs path, as postgres when running as root, in s.dir. Its error
// carries the output.
func (s *pgServer) run(ctx context.Context, path string, args ...string) error {
	var cmd *exec.Cmd
	if s.runuser != "" {
		cmd = exec.CommandContext(ctx, s.runuser, append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// logTail returns the end of the server's log.
func (s *pgServer) logTail() string {
	b, err := os.ReadFile(s.logFile)
	if err != nil {
		return ""
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}

// waitPostgres waits until the server at url answers a query.
func waitPostgres(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, postgresReadyTimeout)
	defer cancel()
	var lastErr error
	for {
		err := func() error {
			cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
			defer ccancel()
			conn, err := pgx.Connect(cctx, url)
			if err != nil {
				return err
			}
			defer closeConn(conn)
			var one int
			return conn.QueryRow(cctx, "SELECT 1").Scan(&one)
		}()
		if err == nil {
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("server not ready after %v", postgresReadyTimeout), lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}
