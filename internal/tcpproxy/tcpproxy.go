// Package tcpproxy is a loopback TCP proxy for fault tests: it forwards
// connections to a target and can stall either direction (the bytes are
// held, the connections stay open, like a black-holed path), reset every
// open connection, or accept new connections and never answer them (a
// stopped server's listen backlog, an L4 balancer with no ready backend).
package tcpproxy

import (
	"errors"
	"io"
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

// Hang makes new connections hang: accepted, never forwarded or answered.
// Existing connections are untouched (Reset them to force reconnects).
func (p *Proxy) Hang() {
	p.mu.Lock()
	p.hang = true
	p.mu.Unlock()
}

// Resume forwards again in both directions and connects new connections.
func (p *Proxy) Resume() {
	p.mu.Lock()
	p.stalled, p.hang = 0, false
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

func (p *Proxy) pipe(dst, src net.Conn, dir Direction) {
	defer p.untrack(dst)
	defer p.untrack(src)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		for p.stalled&dir != 0 && !p.closed {
			p.cond.Wait()
		}
		p.mu.Unlock()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			return
		}
	}
}
