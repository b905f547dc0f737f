package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"google.golang.org/grpc/credentials"
)

// TLSFromFiles is the mutual TLS configuration of a holder: the CA that
// signed lockd's serving certificate (caFile) and the holder's X.509 SVID
// and key (PEM files), TLS 1.3 only. Pass it to WithTLS.
func TLSFromFiles(caFile, certFile, keyFile string) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("%w: read CA file: %w", ErrConfig, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: no PEM certificates in %s", ErrConfig, caFile)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool}
	switch {
	case certFile == "" && keyFile == "":
	case certFile == "" || keyFile == "":
		return nil, fmt.Errorf("%w: client certificate and key must be given together", ErrConfig)
	default:
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: load key pair %s: %w", ErrConfig, certFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// InsecureIdentityHeader is the header in which WithInsecureIdentity
// asserts the caller's SPIFFE ID. Only a lockd started with
// --insecure-loopback reads it, on a loopback connection: for tests.
const InsecureIdentityHeader = "x-lockd-insecure-identity"

// InsecureIdentity is per-call credentials that assert id in
// InsecureIdentityHeader over plaintext (WithInsecureIdentity's).
func InsecureIdentity(id string) credentials.PerRPCCredentials { return insecureIdentity(id) }

type insecureIdentity string

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (i insecureIdentity) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{InsecureIdentityHeader: string(i)}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials: false,
// so the credentials work over plaintext.
func (insecureIdentity) RequireTransportSecurity() bool { return false }
