// Package forgetest starts a real Gitea for tests: a fresh server per test on
// a loopback port with a SQLite database in a temporary directory, an admin
// user (the bot) and a second, non-admin user (the pull request's author),
// each with an access token, and helpers to push a repository over HTTP with
// git and open a pull request.
//
// The Gitea binary is $LOCKD_GITEA, else $LOCKD_TOOLS/bin/gitea (LOCKD_TOOLS
// defaults to $HOME/.cache/lockd-tools), else gitea on PATH. `bash
// ci/tools.sh gitea` builds it. A test that needs Gitea fails, never skips,
// when it is missing.
package forgetest

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"code.gitea.io/sdk/gitea"

	"github.com/lockd-dev/lockd/internal/childproc"

	"github.com/lockd-dev/lockd/internal/toolcache"
)

// readyTimeout bounds how long Gitea may take to answer after `gitea web`
// starts; the first start on a cold disk takes a few seconds.
const readyTimeout = 60 * time.Second

// User is a Gitea user with an access token of scope all.
type User struct {
	// Name is the login.
	Name string
	// Password is the password.
	Password string
	// Token is an access token of scope all.
	Token string
}

// Gitea is a running Gitea server.
type Gitea struct {
	// URL is the base URL, http://127.0.0.1:PORT.
	URL string
	// Admin is a site administrator: the bot that posts reviews.
	Admin User
	// Author is a plain user: the one who pushes and opens pull requests.
	Author User

	bin, dir, config string
}

// Start starts a Gitea for t and stops it when t ends; if t failed, it
// prints the end of Gitea's log.
func Start(t testing.TB) *Gitea {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	port := freePort(t)
	g := &Gitea{
		URL:    "http://127.0.0.1:" + strconv.Itoa(port),
		bin:    bin,
		dir:    dir,
		config: filepath.Join(dir, "app.ini"),
	}
	if err := os.WriteFile(g.config, []byte(appINI(dir, port, staticRoot())), 0o600); err != nil {
		t.Fatalf("forgetest: write app.ini: %v", err)
	}
	g.run(t, "migrate")
	g.Admin = g.createUser(t, "ci-bot", true)
	g.Author = g.createUser(t, "author", false)

	logPath := filepath.Join(dir, "gitea.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("forgetest: create log: %v", err)
	}
	cmd := g.command("web")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	childproc.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("forgetest: start gitea web: %v", err)
	}
	done := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); logFile.Close(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}
		if t.Failed() {
			t.Logf("forgetest: end of the Gitea log (%s):\n%s", logPath, tail(logPath, 40))
		}
	})
	g.waitReady(t, done, &waitErr)
	return g
}

// Binary returns the path of the Gitea binary, failing t with how to build
// it when there is none.
func Binary(t testing.TB) string {
	t.Helper()
	p, err := toolcache.Find("gitea", "LOCKD_GITEA")
	if err != nil {
		t.Fatalf("forgetest: %v: run `bash ci/tools.sh gitea` to build it (about 12 minutes, once)", err)
	}
	return p
}

// staticRoot is the Gitea source tree that ci/tools.sh recorded, whose
// templates and assets a Gitea built without bindata serves; empty when
// there is none (a bindata build embeds them).
func staticRoot() string {
	b, err := os.ReadFile(filepath.Join(toolcache.Dir(), "gitea-static-root"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func appINI(dir string, port int, static string) string {
	staticLine := ""
	if static != "" {
		staticLine = "STATIC_ROOT_PATH = " + static
	}
	return fmt.Sprintf(`APP_NAME = lockd test
RUN_MODE = prod
WORK_PATH = %[1]s

[server]
PROTOCOL = http
HTTP_ADDR = 127.0.0.1
HTTP_PORT = %[2]d
DOMAIN = 127.0.0.1
ROOT_URL = http://127.0.0.1:%[2]d/
APP_DATA_PATH = %[1]s/data
DISABLE_SSH = true
START_SSH_SERVER = false
LFS_START_SERVER = false
OFFLINE_MODE = true
%[3]s

[database]
DB_TYPE = sqlite3
PATH = %[1]s/data/gitea.db
; WAL: without it every write waits for an fsync, and migrate alone takes 6 s.
SQLITE_JOURNAL_MODE = WAL

[repository]
ROOT = %[1]s/repos

[security]
INSTALL_LOCK = true
SECRET_KEY = %[4]s
INTERNAL_TOKEN = %[5]s

[oauth2]
ENABLED = false

[service]
DISABLE_REGISTRATION = true
ENABLE_NOTIFY_MAIL = false

[mailer]
ENABLED = false

[queue]
TYPE = channel

[indexer]
ISSUE_INDEXER_TYPE = db
REPO_INDEXER_ENABLED = false

[session]
PROVIDER = memory

[cache]
ADAPTER = memory

[picture]
DISABLE_GRAVATAR = true
ENABLE_FEDERATED_AVATAR = false

[cron]
ENABLED = false

[cron.update_checker]
ENABLED = false

[actions]
ENABLED = false

[log]
MODE = console
LEVEL = Info
ROOT_PATH = %[1]s/log
`, dir, port, staticLine, randomHex(16), randomHex(32))
}

// command returns a gitea command on g's configuration.
func (g *Gitea) command(args ...string) *exec.Cmd {
	cmd := exec.Command(g.bin, append([]string{"--config", g.config, "--work-path", g.dir}, args...)...)
	cmd.Dir = g.dir
	cmd.Env = append(os.Environ(),
		"GITEA_WORK_DIR="+g.dir,
		"GITEA_I_AM_BEING_UNSAFE_RUNNING_AS_ROOT=true",
		"HOME="+g.dir,
	)
	return cmd
}

// run runs a gitea subcommand to completion and returns its standard output.
// Its arguments may hold passwords, so a failure names only the subcommand.
func (g *Gitea) run(t testing.TB, args ...string) string {
	t.Helper()
	cmd := g.command(args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("forgetest: gitea %s: %v\n%s%s", strings.Join(args[:min(len(args), 3)], " "), err, out, stderr.String())
	}
	return string(out)
}

func (g *Gitea) createUser(t testing.TB, name string, admin bool) User {
	t.Helper()
	u := User{Name: name, Password: randomHex(12)}
	args := []string{"admin", "user", "create", "--username", name, "--password", u.Password,
		"--email", name + "@example.com", "--must-change-password=false"}
	if admin {
		args = append(args, "--admin")
	}
	g.run(t, args...)
	u.Token = g.Token(t, name, "all")
	return u
}

// Token returns a new access token of user with scopes, a comma-separated
// list such as "write:issue,read:user" or "all".
func (g *Gitea) Token(t testing.TB, user, scopes string) string {
	t.Helper()
	out := g.run(t, "admin", "user", "generate-access-token", "--username", user,
		"--token-name", "test-"+randomHex(4), "--scopes", scopes, "--raw")
	token := strings.TrimSpace(lastLine(out))
	if token == "" {
		t.Fatalf("forgetest: gitea admin user generate-access-token printed no token for %s", user)
	}
	return token
}

// waitReady waits until Gitea answers /api/v1/version, failing t when it
// exits first (done closed, its error in *waitErr) or takes too long.
func (g *Gitea) waitReady(t testing.TB, done <-chan struct{}, waitErr *error) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		select {
		case <-done:
			t.Fatalf("forgetest: gitea web exited before it answered (%v): its log follows", *waitErr)
		default:
		}
		resp, err := client.Get(g.URL + "/api/v1/version")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("forgetest: gitea web did not answer %s/api/v1/version within %v (last error %v)", g.URL, readyTimeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Client returns an SDK client acting as u.
func (g *Gitea) Client(t testing.TB, u User) *gitea.Client {
	t.Helper()
	c, err := gitea.NewClient(g.URL, gitea.SetToken(u.Token), gitea.SetContext(t.Context()))
	if err != nil {
		t.Fatalf("forgetest: SDK client for %s: %v", u.Name, err)
	}
	return c
}

// Repo is a repository owned by the author, with a local work tree.
type Repo struct {
	// Owner is the owner's login (the author's).
	Owner string
	// Name is the repository name.
	Name string
	// Dir is the local work tree, a clone whose remote origin is the
	// repository.
	Dir string

	g *Gitea
}

// NewRepo creates the author's repository name, and pushes to its main
// branch one commit holding a copy of the directory tree src under sub
// (for example src /work/main/classes, sub "classes").
func (g *Gitea) NewRepo(t testing.TB, name, src, sub string) *Repo {
	t.Helper()
	if _, resp, err := g.Client(t, g.Author).CreateRepo(gitea.CreateRepoOption{Name: name, DefaultBranch: "main"}); err != nil {
		t.Fatalf("forgetest: create repository %s: %v (%v)", name, err, resp)
	}
	r := &Repo{Owner: g.Author.Name, Name: name, Dir: t.TempDir(), g: g}
	if err := os.CopyFS(filepath.Join(r.Dir, sub), os.DirFS(src)); err != nil {
		t.Fatalf("forgetest: copy %s: %v", src, err)
	}
	r.Git(t, "init", "-q", "-b", "main")
	r.Git(t, "remote", "add", "origin", fmt.Sprintf("%s/%s/%s.git", g.URL, r.Owner, r.Name))
	r.Git(t, "add", "-A")
	r.Git(t, "commit", "-q", "-m", "initial commit")
	r.Git(t, "push", "-q", "origin", "main")
	return r
}

// Git runs git in the work tree as the author and returns its output. The
// author's token travels in an HTTP header set through the environment, so
// it is in neither the command line, the remote URL nor .git/config.
func (r *Repo) Git(t testing.TB, args ...string) string {
	t.Helper()
	basic := base64.StdEncoding.EncodeToString([]byte(r.g.Author.Name + ":" + r.g.Author.Token))
	cmd := exec.Command("git", args...)
	cmd.Dir = r.Dir
	cmd.Env = append(os.Environ(),
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME="+r.g.Author.Name, "GIT_AUTHOR_EMAIL="+r.g.Author.Name+"@example.com",
		"GIT_COMMITTER_NAME="+r.g.Author.Name, "GIT_COMMITTER_EMAIL="+r.g.Author.Name+"@example.com",
		"GIT_CONFIG_COUNT=1",
		"GIT_CONFIG_KEY_0=http.extraHeader",
		"GIT_CONFIG_VALUE_0=Authorization: Basic "+basic,
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("forgetest: git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Branch checks out a new branch from main, lets change edit the work tree
// (its argument is the work tree's directory), commits the edit and pushes
// the branch. The work tree stays on the branch.
func (r *Repo) Branch(t testing.TB, branch, message string, change func(dir string)) {
	t.Helper()
	r.Git(t, "checkout", "-q", "-b", branch, "main")
	change(r.Dir)
	r.Git(t, "commit", "-q", "-a", "-m", message)
	r.Git(t, "push", "-q", "origin", branch)
}

// OpenPR opens, as the author, a pull request of branch into main and
// returns its number.
func (r *Repo) OpenPR(t testing.TB, branch, title string) int64 {
	t.Helper()
	pr, _, err := r.g.Client(t, r.g.Author).CreatePullRequest(r.Owner, r.Name, gitea.CreatePullRequestOption{
		Head: branch, Base: "main", Title: title,
	})
	if err != nil {
		t.Fatalf("forgetest: open pull request %s into main: %v", branch, err)
	}
	return pr.Index
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("forgetest: find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
