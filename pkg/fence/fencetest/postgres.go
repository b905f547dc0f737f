// Package fencetest starts the real servers the fence tests write to: a
// throwaway PostgreSQL cluster and a throwaway MinIO server, each on a free
// loopback port and stopped when the test ends. A missing server binary
// fails the test with the command that installs it; nothing is skipped.
package fencetest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// PostgresBinDir is where Debian's postgresql package puts PostgreSQL 15.
const PostgresBinDir = "/usr/lib/postgresql/15/bin"

// StartPostgres initialises a throwaway PostgreSQL cluster in a fresh
// directory under os.TempDir (searchable by the user postgres, which
// t.TempDir's are not), starts it on 127.0.0.1 with trust authentication
// and fsync off, and returns the URL of the database "postgres" as the user
// "postgres". As root, initdb and pg_ctl run as postgres (runuser). The
// server is stopped and its directory removed when the test ends. It fails
// the test if the server binaries are missing.
func StartPostgres(t testing.TB) string {
	t.Helper()
	bin, err := postgresBin()
	if err != nil {
		t.Fatal(err)
	}
	s := &pgServer{bin: bin}
	if err := s.prepare(); err != nil {
		s.remove()
		t.Fatalf("fencetest: postgres: %v", err)
	}
	t.Cleanup(s.remove)
	if err := s.run("initdb", "-D", s.data, "--auth=trust", "-U", "postgres", "-E", "UTF8", "--no-locale", "--no-instructions"); err != nil {
		t.Fatalf("fencetest: postgres: %v", err)
	}
	conf := fmt.Sprintf("\n# fencetest\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nfsync = off\n", s.sock)
	if err := appendFile(filepath.Join(s.data, "postgresql.conf"), conf); err != nil {
		t.Fatalf("fencetest: postgres: %v", err)
	}
	port, err := s.start()
	if err != nil {
		t.Fatalf("fencetest: postgres: %v", err)
	}
	t.Cleanup(func() {
		if err := s.run("pg_ctl", "-D", s.data, "-m", "fast", "-w", "-t", "30", "stop"); err != nil {
			t.Errorf("fencetest: postgres: %v", err)
		}
	})
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
}

// postgresBin returns the directory of initdb and pg_ctl: PostgreSQL 15's,
// another version's under /usr/lib/postgresql, or initdb's on PATH.
func postgresBin() (string, error) {
	dirs := []string{PostgresBinDir}
	others, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	dirs = append(dirs, others...)
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		if isExecutable(filepath.Join(d, "initdb")) && isExecutable(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	return "", fmt.Errorf("fencetest: PostgreSQL server binaries (initdb, pg_ctl) not found in %s, /usr/lib/postgresql/*/bin or PATH: "+
		"install them with `apt-get install -y postgresql` (or `bash ci/tools.sh apt`)", PostgresBinDir)
}

// pgServer is one cluster started by StartPostgres.
type pgServer struct {
	bin                  string
	dir, data, sock, log string
	runuser              string // set as root: the binaries run as postgres
}

// prepare makes the directories and, as root, hands them to postgres.
func (s *pgServer) prepare() error {
	dir, err := os.MkdirTemp("", "fencetest-pg-")
	if err != nil {
		return err
	}
	s.dir, s.data, s.sock, s.log = dir, filepath.Join(dir, "data"), filepath.Join(dir, "sock"), filepath.Join(dir, "postgres.log")
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	for _, d := range []string{s.data, s.sock} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
	}
	if err := os.WriteFile(s.log, nil, 0o644); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("running as root needs the user postgres (apt-get install -y postgresql): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if s.runuser, err = exec.LookPath("runuser"); err != nil {
		return fmt.Errorf("running as root needs runuser (util-linux): %w", err)
	}
	for _, p := range []string{s.data, s.sock, s.log} {
		if err := os.Chown(p, uid, gid); err != nil {
			return err
		}
	}
	if err := s.exec("test", "-w", s.data, "-a", "-x", s.data); err != nil {
		return fmt.Errorf("the user postgres cannot use %s: make its parent directories searchable (chmod o+x) or set TMPDIR", s.data)
	}
	return nil
}

// start starts the server on a free port, trying again with another port
// when the chosen one was taken meanwhile.
func (s *pgServer) start() (int, error) {
	var err error
	for range 3 {
		var port int
		if port, err = freePort(); err != nil {
			return 0, err
		}
		err = s.run("pg_ctl", "-D", s.data, "-l", s.log, "-w", "-t", "30", "-o", "-p "+strconv.Itoa(port), "start")
		if err == nil {
			return port, nil
		}
		logText, _ := os.ReadFile(s.log)
		err = fmt.Errorf("%w; server log:\n%s", err, logText)
		_ = s.run("pg_ctl", "-D", s.data, "-m", "immediate", "-w", "-t", "10", "stop")
		if !bytes.Contains(logText, []byte("could not bind")) {
			break
		}
	}
	return 0, err
}

// run runs the PostgreSQL program name.
func (s *pgServer) run(name string, args ...string) error {
	return s.exec(filepath.Join(s.bin, name), args...)
}

// exec runs path, as postgres when running as root; its error carries the
// output.
func (s *pgServer) exec(path string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if s.runuser != "" {
		args = append([]string{"-u", "postgres", "--", path}, args...)
		path = s.runuser
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func (s *pgServer) remove() {
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(text)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
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

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
