package contract_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// A driver kind: how to start one driver process.
type driverKind struct {
	name string
	argv func(t *testing.T) []string
}

// driverKinds are the drivers the suite knows; LOCKD_CONTRACT_DRIVERS picks
// among them (default: go,python).
var driverKinds = map[string]driverKind{
	"go":     {"go", func(t *testing.T) []string { return []string{goDriver(t)} }},
	"python": {"python", pythonDriver},
	// The control: the Go client, with every loss reported 2 s after the
	// library reported it (a fence as late as the old grace).
	"go-late-fence": {"go-late-fence", func(t *testing.T) []string { return []string{goDriver(t), "-late-fence", "2s"} }},
}

var (
	goDriverOnce sync.Once
	goDriverPath string
	goDriverErr  error
)

// goDriver builds godriver once per test binary and returns its path. It
// reads the driver's source in the test process so that go test's cache
// notices a change to it.
func goDriver(t *testing.T) string {
	t.Helper()
	readTree(t, "godriver", ".go")
	goDriverOnce.Do(func() {
		dir, err := os.MkdirTemp("", "contract-godriver-")
		if err != nil {
			goDriverErr = err
			return
		}
		goDriverPath = filepath.Join(dir, "godriver")
		out, err := exec.Command("go", "build", "-o", goDriverPath, "./godriver").CombinedOutput()
		if err != nil {
			goDriverErr = fmt.Errorf("go build ./godriver: %v\n%s", err, out)
		}
	})
	if goDriverErr != nil {
		t.Fatal(goDriverErr)
	}
	return goDriverPath
}

// pythonDriver is clients/python's contract driver under python3 (or
// LOCKD_CONTRACT_PYTHON): the interpreter with Debian's python3-grpcio and
// python3-protobuf (the repository's .python-version picks the system
// Python under pyenv). A machine without it fails the test: ci/tools.sh
// installs it.
func pythonDriver(t *testing.T) []string {
	t.Helper()
	py := os.Getenv("LOCKD_CONTRACT_PYTHON")
	if py == "" {
		py = "python3"
	}
	script, err := filepath.Abs("../python/contract_driver.py")
	if err != nil {
		t.Fatal(err)
	}
	readTree(t, "../python", ".py")
	if out, err := exec.Command(py, "-c", "import grpc, google.protobuf").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import grpc and protobuf (Debian's python3-grpcio and python3-protobuf; bash ci/tools.sh apt installs them): %v\n%s", py, err, out)
	}
	return []string{py, script}
}

// readTree reads every file under dir ending in ext, so that go test's
// cache is keyed on a driver's source too (it records the files a test
// opens, not the ones its children do).
func readTree(t *testing.T, dir, ext string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.IsDir() && strings.HasSuffix(p, ext) {
			_, err = os.ReadFile(p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// driver is one running driver process.
type driver struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *bytes.Buffer

	mu      sync.Mutex
	nextID  int64
	waiting map[int64]chan reply
	events  chan event
	exited  chan struct{}
}

// reply is a driver's answer to one step.
type reply struct {
	OK     bool           `json:"ok"`
	Result map[string]any `json:"result"`
	Error  *libError      `json:"error"`
}

// libError is an error as a driver reports it.
type libError struct {
	Type     string   `json:"type"`
	Kinds    []string `json:"kinds"`
	Reason   string   `json:"reason"`
	Definite bool     `json:"definite"`
	Message  string   `json:"message"`
}

func (e *libError) String() string {
	if e == nil {
		return "no error"
	}
	return fmt.Sprintf("%s (reason %q, definite %v): %s", e.Type, e.Reason, e.Definite, e.Message)
}

// lostReason is why a lock ended, as a driver reports it.
type lostReason struct {
	Kind      string `json:"kind"`
	Message   string `json:"message"`
	Requester string `json:"requester"`
	Approver  string `json:"approver"`
	Why       string `json:"why"`
}

// event is a "fenced" event.
type event struct {
	Event    string      `json:"event"`
	Lock     string      `json:"lock"`
	Mono     float64     `json:"mono"`
	Deadline float64     `json:"deadline"`
	CanStart bool        `json:"can_start"`
	Lost     *lostReason `json:"lost"`
	// at is when the suite read it.
	at time.Time
}

type line struct {
	ID *int64 `json:"id"`
	reply
	event
}

// startDriver starts a driver of kind k for the test; it is told to quit
// (and killed if it does not) at cleanup, and its stderr is logged.
func startDriver(t *testing.T, k driverKind) *driver {
	t.Helper()
	argv := k.argv(t)
	cmd := exec.Command(argv[0], argv[1:]...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d := &driver{t: t, name: k.name, cmd: cmd, stdin: stdin, stderr: &bytes.Buffer{},
		waiting: map[int64]chan reply{}, events: make(chan event, 64), exited: make(chan struct{})}
	cmd.Stderr = &lockedWriter{w: d.stderr}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start driver %s: %v", k.name, err)
	}
	go d.read(stdout)
	t.Cleanup(func() {
		_, _ = io.WriteString(stdin, `{"op":"quit"}`+"\n")
		_ = stdin.Close()
		select {
		case <-d.exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-d.exited
		}
		_ = cmd.Wait()
		if s := d.stderr.String(); strings.TrimSpace(s) != "" {
			t.Logf("driver %s stderr:\n%s", k.name, s)
		}
	})
	return d
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (d *driver) read(stdout io.Reader) {
	defer close(d.exited)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		at := time.Now()
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			d.t.Errorf("driver %s wrote a line that is not JSON: %q", d.name, sc.Text())
			continue
		}
		switch {
		case l.ID != nil:
			d.mu.Lock()
			ch := d.waiting[*l.ID]
			delete(d.waiting, *l.ID)
			d.mu.Unlock()
			if ch == nil {
				d.t.Errorf("driver %s answered step %d, which nobody asked", d.name, *l.ID)
				continue
			}
			ch <- l.reply
		case l.Event == "fenced":
			l.event.at = at
			select {
			case d.events <- l.event:
			default:
				d.t.Errorf("driver %s: too many events unread", d.name)
			}
		default:
			d.t.Errorf("driver %s wrote a line that is neither an answer nor an event: %q", d.name, sc.Text())
		}
	}
}

// send sends a step and returns where its answer will arrive.
func (d *driver) send(op string, args map[string]any) <-chan reply {
	d.t.Helper()
	d.mu.Lock()
	d.nextID++
	id := d.nextID
	ch := make(chan reply, 1)
	d.waiting[id] = ch
	d.mu.Unlock()
	msg := map[string]any{"id": id, "op": op}
	for k, v := range args {
		msg[k] = v
	}
	b, err := json.Marshal(msg)
	if err != nil {
		d.t.Fatal(err)
	}
	if _, err := d.stdin.Write(append(b, '\n')); err != nil {
		d.t.Fatalf("driver %s: write step %s: %v", d.name, op, err)
	}
	return ch
}

// stepTimeout bounds every step the suite waits for (past any wait it asks).
const stepTimeout = 30 * time.Second

// await waits for an answer sent with send.
func (d *driver) await(ch <-chan reply, op string) reply {
	d.t.Helper()
	select {
	case r := <-ch:
		return r
	case <-d.exited:
		d.t.Fatalf("driver %s exited while the suite waited for %s", d.name, op)
	case <-time.After(stepTimeout):
		d.t.Fatalf("driver %s did not answer %s within %s", d.name, op, stepTimeout)
	}
	return reply{}
}

// call sends a step and waits for its answer.
func (d *driver) call(op string, args map[string]any) reply {
	d.t.Helper()
	return d.await(d.send(op, args), op)
}

// must is call, failing the test unless the step succeeded.
func (d *driver) must(op string, args map[string]any) map[string]any {
	d.t.Helper()
	r := d.call(op, args)
	if !r.OK {
		d.t.Fatalf("driver %s: %s %v: %s", d.name, op, args, r.Error)
	}
	return r.Result
}

// refused is call, failing the test unless the step failed; it returns the
// error.
func (d *driver) refused(op string, args map[string]any) *libError {
	d.t.Helper()
	r := d.call(op, args)
	if r.OK {
		d.t.Fatalf("driver %s: %s %v succeeded; want an error", d.name, op, args)
	}
	return r.Error
}

// open opens a client named name claiming identity at addr.
func (d *driver) open(name, identity, addr string) {
	d.t.Helper()
	d.must("open", map[string]any{"client": name, "identity": identity, "addr": addr})
}

// fenced waits up to within for the next fenced event.
func (d *driver) fenced(within time.Duration) (event, bool) {
	d.t.Helper()
	select {
	case e := <-d.events:
		return e, true
	case <-time.After(within):
		return event{}, false
	}
}

// noFence fails the test if a fenced event is waiting.
func (d *driver) noFence(what string) {
	d.t.Helper()
	select {
	case e := <-d.events:
		d.t.Fatalf("%s: lock %s was fenced (%+v)", what, e.Lock, e.Lost)
	default:
	}
}

// clock maps the driver's monotonic clock onto the suite's: it returns the
// suite's time for a driver reading, and the uncertainty (half the round
// trip of the best of a few exchanges).
func (d *driver) clock() (toSuite func(mono float64) time.Time, uncertainty time.Duration) {
	d.t.Helper()
	best := time.Duration(1<<63 - 1)
	var mid time.Time
	var mono float64
	for range 5 {
		sent := time.Now()
		r := d.must("clock", nil)
		got := time.Now()
		if rtt := got.Sub(sent); rtt < best {
			best, mid, mono = rtt, sent.Add(rtt/2), num(d.t, r, "mono")
		}
	}
	return func(m float64) time.Time {
		return mid.Add(time.Duration((m - mono) * float64(time.Second)))
	}, best / 2
}

func num(t *testing.T, r map[string]any, k string) float64 {
	t.Helper()
	v, ok := r[k].(float64)
	if !ok {
		t.Fatalf("result %v has no number %q", r, k)
	}
	return v
}

func str(t *testing.T, r map[string]any, k string) string {
	t.Helper()
	v, ok := r[k].(string)
	if !ok {
		t.Fatalf("result has no string %q", k) // the result may hold a token: not printed
	}
	return v
}

func boolean(t *testing.T, r map[string]any, k string) bool {
	t.Helper()
	v, ok := r[k].(bool)
	if !ok {
		t.Fatalf("result %v has no boolean %q", r, k)
	}
	return v
}
