package linecheck

import (
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/keyspace"
)

// history builds a life from steps: "+q s" joins session s to key k's line,
// "-q s" removes it, "+l s" puts k's hold for s, "-l" deletes it; each step
// is one revision, or several joined with ";" in one revision.
func history(t *testing.T, steps ...string) Life {
	t.Helper()
	const key = "gate/k0"
	created := map[string]int64{}
	var life Life
	for i, step := range steps {
		rev := int64(i + 2)
		for _, op := range strings.Split(step, ";") {
			f := strings.Fields(op)
			var s int64
			if len(f) > 1 {
				s = map[string]int64{"a": 0xa, "b": 0xb, "c": 0xc}[f[1]]
			}
			var k string
			switch f[0][1:] {
			case "q":
				k = keyspace.QueueKey(key, s)
			case "l":
				k = keyspace.HoldKey(key)
			default:
				t.Fatalf("bad step %q", op)
			}
			ev := &clientv3.Event{Kv: &mvccpb.KeyValue{Key: []byte(k), ModRevision: rev, Lease: s}}
			if f[0][0] == '+' {
				ev.Type = clientv3.EventTypePut
				if created[k] == 0 {
					created[k] = rev
				}
				ev.Kv.CreateRevision = created[k]
			} else {
				ev.Type = clientv3.EventTypeDelete
				delete(created, k)
			}
			life.Events = append(life.Events, ev)
		}
		life.Rev = rev
	}
	return life
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name      string
		steps     []string
		contested int
		violation string
	}{
		{"head granted in the release's transaction", []string{"+l c", "+q a", "+q b", "-l; +l a; -q a", "-l; +l b; -q b"}, 2, ""},
		{"free key, empty line", []string{"+q a", "-q a", "+l b"}, 0, ""},
		{"second in line granted", []string{"+l c", "+q a", "+q b", "-l; +l b; -q b"}, 1, "while session a"},
		{"not in line, line not empty", []string{"+l c", "+q a", "-l", "+l b"}, 1, "not in its durable line"},
		{"the one ahead lapsed first", []string{"+l c", "+q a", "+q b", "-q a", "-l; +l b; -q b"}, 1, ""},
		{"granted while in line, to a session that joined first", []string{"+q a", "+l c"}, 1, "not in its durable line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Check(history(t, tc.steps...))
			if res.Contested != tc.contested {
				t.Errorf("contested = %d, want %d", res.Contested, tc.contested)
			}
			switch {
			case tc.violation == "" && len(res.Violations) > 0:
				t.Errorf("violations: %v", res.Violations)
			case tc.violation != "" && (len(res.Violations) == 0 || !strings.Contains(res.Violations[0], tc.violation)):
				t.Errorf("violations %v, want one with %q", res.Violations, tc.violation)
			}
		})
	}
}
