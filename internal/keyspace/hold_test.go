package keyspace

import (
	"encoding/json"
	"testing"
)

// FuzzHoldEncodeIsJSONMarshal: a hold record written by Encode is byte for
// byte what encoding/json writes, for any identity, class and numbers, so
// every reader of /l/ (the arbiter, the audit tailer, lockctl) decodes it as
// before.
func FuzzHoldEncodeIsJSONMarshal(f *testing.F) {
	f.Add("spiffe://lockd.local/dev", int64(0x694d9a2b6c1e0f07), "demo/demo", int64(1764000000000000000))
	f.Add("spiffe://t/<alice>&\"bob\"\\", int64(-1), "ns/ü", int64(0))
	f.Add("\x00\x1f\x7f\xff", int64(1)<<62, "", int64(-1)<<63)
	f.Add("spiffe://t/\u2028\u2029", int64(7), "a/b\tc", int64(42))
	f.Fuzz(func(t *testing.T, id string, session int64, class string, at int64) {
		h := Hold{Identity: id, Session: session, Class: class, AcquiredAt: at}
		want, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		if got := h.Encode(); got != string(want) {
			t.Fatalf("Encode() = %s\njson.Marshal = %s", got, want)
		}
	})
}
