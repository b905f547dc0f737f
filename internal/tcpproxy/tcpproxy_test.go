package tcpproxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echo is a loopback server that writes back every line it reads.
func echo(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadBytes('\n')
					if err != nil {
						return
					}
					if _, err := c.Write(line); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

// TestADelayedDirectionHoldsBytesBackInOrder: a delay on answers alone
// holds each answer back by about its length, keeps them in order, and
// does not slow the requests; Resume ends it.
func TestADelayedDirectionHoldsBytesBackInOrder(t *testing.T) {
	p, err := Start(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip := func(line string) time.Duration {
		t.Helper()
		start := time.Now()
		if _, err := c.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
		got, err := r.ReadString('\n')
		if err != nil || got != line+"\n" {
			t.Fatalf("read %q, %v; want %q", got, err, line)
		}
		return time.Since(start)
	}
	const delay = 2 * time.Second
	if d := roundTrip("before"); d > delay/2 {
		t.Fatalf("undelayed round trip took %s", d)
	}

	p.Delay(ToClient, delay, 100*time.Millisecond)
	// Three requests at once: all answered, in order, each at least the
	// delay late, and the last not three delays late (requests are not
	// held back, nor is one answer behind another's delay).
	start := time.Now()
	for _, l := range []string{"a\n", "b\n", "c\n"} {
		if _, err := c.Write([]byte(l)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i, want := range []string{"a\n", "b\n", "c\n"} {
		got, err := r.ReadString('\n')
		if err != nil || got != want {
			t.Fatalf("answer %d: %q, %v; want %q", i, got, err, want)
		}
		if d := time.Since(start); d < delay {
			t.Fatalf("answer %q came after %s, under the delay", got, d)
		}
	}
	if d := time.Since(start); d > 2*delay {
		t.Fatalf("three delayed answers took %s: the delays add up", d)
	}

	p.Resume()
	if d := roundTrip("after"); d > delay/2 {
		t.Fatalf("after Resume a round trip took %s", d)
	}
}
