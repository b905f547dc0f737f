package lockdcmd

import "github.com/spf13/pflag"

// addEdgeFlags adds the flag naming the proxies in front of lockd.
func addEdgeFlags(f *pflag.FlagSet, opts *Options) {
	f.StringSliceVar(&opts.EdgeIdentities, "edge-identity", nil, "SPIFFE ID of an edge proxy (Envoy) in front of lockd, repeatable or comma-separated: "+
		"its requests are made for the caller named in its x-forwarded-client-cert header, and refused without one; "+
		"the header is ignored from every other peer")
}
