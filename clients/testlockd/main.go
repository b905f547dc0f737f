// Command testlockd runs pkg/lockdtest's lockd as a process, for the tests
// of clients in other languages (clients/python's pytest fixtures): the same
// assembly the lockd binary runs, on an embedded etcd in a temp dir, in
// insecure-loopback mode (each client claims its identity in the
// x-lockd-insecure-identity header) with lockdtest's classes and operators,
// and a TCP proxy in front of it that the test can stall.
//
// It prints one JSON line, {"addr": lockd, "proxy": the proxy to it,
// "metrics": lockd's HTTP endpoint}, then reads commands, one a line, and
// answers each with "ok": stall (hold every byte both ways), resume, reset
// (break every connection), hang (accept new connections, never answer
// them). It stops, removing everything, when its stdin closes.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/lockd-dev/lockd/internal/tcpproxy"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

func main() { os.Exit(run(os.Stdin, os.Stdout, os.Stderr)) }

func run(in io.Reader, out, errOut io.Writer) (code int) {
	dir, err := os.MkdirTemp("", "testlockd-")
	if err != nil {
		fmt.Fprintln(errOut, "testlockd:", err)
		return 1
	}
	t := &processTB{dir: dir, errOut: errOut}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(fatal); !ok {
				panic(r)
			}
			code = 1
		}
		t.cleanup()
		_ = os.RemoveAll(dir)
	}()
	env := lockdtest.Start(t, lockdtest.Options{})
	proxy, err := tcpproxy.Start(env.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	if err := json.NewEncoder(out).Encode(map[string]string{"addr": env.Addr, "proxy": proxy.Addr(), "metrics": env.MetricsAddr}); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		switch cmd := strings.TrimSpace(sc.Text()); cmd {
		case "stall":
			proxy.Stall(tcpproxy.Both)
		case "resume":
			proxy.Resume()
		case "reset":
			proxy.Reset()
		case "hang":
			proxy.Hang()
		default:
			fmt.Fprintf(out, "unknown command %q\n", cmd)
			continue
		}
		fmt.Fprintln(out, "ok")
	}
	return 0
}

// processTB is the part of testing.TB that lockdtest.Start uses, for a
// process rather than a test: temp dirs under one dir, cleanups run at
// exit, and a fatal error ends the process. Any other method is the nil
// embedded interface's and panics: lockdtest started using it.
type processTB struct {
	testing.TB
	dir      string
	errOut   io.Writer
	cleanups []func()
}

// fatal is the panic Fatal ends run with.
type fatal struct{}

func (t *processTB) Helper()      {}
func (t *processTB) Name() string { return "testlockd" }

func (t *processTB) TempDir() string {
	d, err := os.MkdirTemp(t.dir, "")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (t *processTB) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }

func (t *processTB) cleanup() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	t.cleanups = nil
}

func (t *processTB) Logf(format string, args ...any) {
	fmt.Fprintf(t.errOut, "testlockd: "+format+"\n", args...)
}

func (t *processTB) Fatal(args ...any) {
	fmt.Fprintln(t.errOut, append([]any{"testlockd:"}, args...)...)
	panic(fatal{})
}

func (t *processTB) Fatalf(format string, args ...any) { t.Fatal(fmt.Sprintf(format, args...)) }
