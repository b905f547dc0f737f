package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

// Exit codes of run.
const (
	exitOK    = 0
	exitError = 1 // the file could not be written
	exitUsage = 2 // a flag or parameter is wrong
)

// run parses args into Params, generates the bootstrap and writes it to
// -out.
func run(args []string, stderr io.Writer) int {
	p := DefaultParams()
	fs := flag.NewFlagSet("envoy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "envoy.yaml", "file to write the bootstrap to")
	fs.StringVar(&p.TrustDomain, "trust-domain", p.TrustDomain, "SPIFFE trust domain of Envoy, lockd and their callers")
	fs.StringVar(&p.EnvoyID, "envoy-id", "", "Envoy's SPIFFE ID, the SVID it asks SPIRE for (default spiffe://<trust-domain>/ns/lockd/sa/envoy); lockd's --edge-identity")
	fs.StringVar(&p.LockdID, "lockd-id", "", "lockd's SPIFFE ID, the only server certificate Envoy accepts upstream (default spiffe://<trust-domain>/ns/lockd/sa/lockd)")
	fs.StringVar(&p.LockdAddress, "lockd-address", p.LockdAddress, "lockd's headless service, host:port; every address it resolves to is a lockd on the ring")
	fs.StringVar(&p.SPIRESocket, "spire-socket", p.SPIRESocket, "the SPIRE agent's socket, which serves SDS")
	var listen, rate, burst, identities, maxRequests uint
	fs.UintVar(&listen, "listen-port", uint(p.ListenPort), "port callers reach Envoy on (mTLS)")
	fs.UintVar(&rate, "rate", uint(p.Rate), "requests per second one caller identity may make through one Envoy")
	fs.UintVar(&burst, "burst", uint(p.Burst), "requests one caller identity may make at once through one Envoy")
	fs.UintVar(&identities, "max-identities", uint(p.MaxIdentities), "caller identities whose rate-limit buckets one Envoy keeps (least recently used beyond)")
	fs.UintVar(&maxRequests, "max-requests", uint(p.MaxRequests), "concurrent requests (waits and keepalive streams included) one Envoy may have open to lockd")
	fs.Int64Var(&p.MaxConnections, "max-connections", p.MaxConnections, "downstream connections one Envoy accepts")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "envoy: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	for _, f := range []struct {
		name string
		v    uint
		dst  *uint32
	}{{"listen-port", listen, &p.ListenPort}, {"rate", rate, &p.Rate}, {"burst", burst, &p.Burst},
		{"max-identities", identities, &p.MaxIdentities}, {"max-requests", maxRequests, &p.MaxRequests}} {
		if f.v > 1<<32-1 {
			fmt.Fprintf(stderr, "envoy: -%s %d: too large\n", f.name, f.v)
			return exitUsage
		}
		*f.dst = uint32(f.v)
	}
	data, err := Generate(p)
	if err != nil {
		fmt.Fprintf(stderr, "envoy: %v\n", err)
		if errors.Is(err, ErrParams) {
			return exitUsage
		}
		return exitError
	}
	if err := os.WriteFile(*out, data, 0o644); err != nil {
		fmt.Fprintf(stderr, "envoy: %v\n", err)
		return exitError
	}
	return exitOK
}
