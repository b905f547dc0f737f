package cmdutil

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/lockd-dev/lockd/pkg/token"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// FuzzTokenViewTextRoundTrip: a token as lockctl prints it with -o json
// and -o yaml (the value as a decimal string, with its epoch and revision)
// reads back to the same token, whatever its 64 bits, and says its value
// in decimal in the table form; reading any bytes as such a token never
// panics, and what it reads prints and reads back the same.
func FuzzTokenViewTextRoundTrip(f *testing.F) {
	f.Add(uint64(1<<48|34), []byte(`{"value":"562949953421346","epoch":2,"revision":34}`))
	f.Fuzz(func(t *testing.T, value uint64, data []byte) {
		epoch, rev := token.Unpack(value)
		v := NewTokenView(&lockv1.Token{Value: value, Epoch: epoch, Revision: rev})
		js, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(js), `"value":"`+strconv.FormatUint(value, 10)+`"`) {
			t.Fatalf("json %s: the value is not its decimal string", js)
		}
		ys, err := yaml.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		for form, b := range map[string][]byte{"json": js, "yaml": ys} {
			var back TokenView
			if err := yaml.Unmarshal(b, &back); err != nil || back != *v {
				t.Fatalf("-o %s %s reads back as %+v, %v; want %+v", form, b, back, err, *v)
			}
		}
		if s := v.String(); !strings.HasPrefix(s, strconv.FormatUint(value, 10)+" ") {
			t.Fatalf("String() = %q: does not start with the decimal value", s)
		}

		var read TokenView
		if json.Unmarshal(data, &read) != nil {
			return
		}
		again, err := json.Marshal(read)
		if err != nil {
			t.Fatal(err)
		}
		var back TokenView
		if err := json.Unmarshal(again, &back); err != nil || back != read {
			t.Fatalf("%s read as %+v prints %s, which reads back as %+v, %v", data, read, again, back, err)
		}
	})
}
