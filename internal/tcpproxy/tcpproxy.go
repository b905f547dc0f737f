// Package tcpproxy is a loopback TCP proxy for fault tests: it forwards
// connections to a target and can stall either direction (the bytes are
// held, the connections stay open, like a black-holed path), delay either
// direction (a slow link, with jitter, bytes kept in order), reset every
// open connection, or accept new connections and never answer them (a
// stopped server's listen backlog, an L4 balancer with no ready backend).
package tcpproxy

import (
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Direction is a direction of traffic through the proxy.
type Direction int

// Directions.
const (
	// ToTarget is client to target (requests).
	ToTarget Direction = 1 << iota
	// ToClient is target to client (answers).
	ToClient
	// Both directions.
	Both = ToTarget | ToClient
)

// Proxy forwards TCP connections to a target.
type Proxy struct {
	l      net.Listener
	target string

	mu      sync.Mutex
	cond    *sync.Cond
	stalled Direction
	delays  [2]delay // by direction: ToTarget, ToClient
	hang    bool
	conns   map[net.Conn]struct{}
	closed  bool
}

// Start listens on a free loopback port and forwards to target.
func Start(target string) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{l: l, target: target, conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// Stall holds every byte going in dir until Resume.
func (p *Proxy) Stall(dir Direction) {
	p.mu.Lock()
	p.stalled |= dir
	p.mu.Unlock()
}

// delay is a direction's added latency: each read chunk is written d plus
// up to jitter after it was read, never before an earlier chunk.
type delay struct{ d, jitter time.Duration }

// Delay holds every chunk of bytes going in dir for d plus a random part
// of jitter before writing it on, keeping their order: a slow link, one
// way or both, on open and new connections alike. Delay(dir, 0, 0) or
// Resume ends it.
func (p *Proxy) Delay(dir Direction, d, jitter time.Duration) {
	p.mu.Lock()
	for i, one := range []Direction{ToTarget, ToClient} {
		if dir&one != 0 {
			p.delays[i] = delay{d, jitter}
		}
	}
	p.mu.Unlock()
}

// Hang makes new connections hang: accepted, never forwarded or answered.
// Existing connections are untouched (Reset them to force reconnects).
func (p *Proxy) Hang() {
	p.mu.Lock()
	p.hang = true
	p.mu.Unlock()
}

// Resume forwards again in both directions without delay, and connects new
// connections.
func (p *Proxy) Resume() {
	p.mu.Lock()
	p.stalled, p.hang, p.delays = 0, false, [2]delay{}
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Retarget sends new connections to target (a DNS flip, a balancer
// repointed); Reset the open ones to move them too.
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// Reset closes every open connection with a TCP reset, as a crashed peer
// or a balancer dropping its connections would.
func (p *Proxy) Reset() {
	p.mu.Lock()
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
	_ = p.l.Close()
	p.Reset()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) accept() {
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		if !p.track(in) {
			continue
		}
		p.mu.Lock()
		hang := p.hang
		p.mu.Unlock()
		if hang {
			go p.drain(in) // accepted; nothing is ever answered
			continue
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		out, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err != nil {
			p.untrack(in)
			continue
		}
		if !p.track(out) {
			p.untrack(in)
			continue
		}
		go p.pipe(out, in, ToTarget)
		go p.pipe(in, out, ToClient)
	}
}

// drain reads and discards until the connection closes.
func (p *Proxy) drain(c net.Conn) {
	_, _ = io.Copy(io.Discard, c)
	p.untrack(c)
}

// chunk is bytes read from one side, to be written to the other at due.
type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst: one goroutine reads (and waits out a stall),
// another writes each chunk at its due time, so a delay holds bytes back
// without slowing the reads.
func (p *Proxy) pipe(dst, src net.Conn, dir Direction) {
	defer p.untrack(dst)
	defer p.untrack(src)
	i := 0
	if dir == ToClient {
		i = 1
	}
	chunks := make(chan chunk, 256)
	written := make(chan struct{})
	go func() {
		defer close(written)
		for c := range chunks {
			if wait := time.Until(c.due); wait > 0 {
				time.Sleep(wait)
			}
			if _, err := dst.Write(c.b); err != nil {
				_ = src.Close() // the reader stops too
				for range chunks {
				}
				return
			}
		}
	}()
	defer func() { close(chunks); <-written }()
	var last time.Time
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		p.mu.Lock()
		for p.stalled&dir != 0 && !p.closed {
			p.cond.Wait()
		}
		dl := p.delays[i]
		p.mu.Unlock()
		if n > 0 {
			due := time.Now().Add(dl.d)
			if dl.jitter > 0 {
				due = due.Add(rand.N(dl.jitter))
			}
			if due.Before(last) {
				due = last // in order
			}
			last = due
			chunks <- chunk{b: buf[:n], due: due}
		}
		if err != nil {
			return
		}
	}
}
