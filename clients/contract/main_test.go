package contract_test

import (
	"flag"
	"os"
	"testing"
)

// TestMain lets every case run at once unless -parallel was given: the
// cases spend their time waiting out keepalive intervals and TTLs, not on
// the CPU, and with go test's default (GOMAXPROCS, 2 here) the suite would
// take a TTL per pair of cases.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", "32")
	}
	os.Exit(m.Run())
}
