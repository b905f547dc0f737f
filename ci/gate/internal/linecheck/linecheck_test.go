package linecheck

import (
	"strconv"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/keyspace"
)

// history builds a life from steps: "+q s" joins session s to key k's line
// (its waiter key and its order key, with the revision as the order key's
// sequence), "-q s" removes both, "+w s" puts a waiter key without an order
// key, "+o s N" an order key alone with sequence N, "+l s" puts k's hold for
// s, "-l" deletes it; each step is one revision, or several joined with ";"
// in one revision.
func history(t *testing.T, steps ...string) Life {
	t.Helper()
	const key = "gate/k0"
	created := map[string]int64{}
	orders := map[int64]string{} // session -> its order key
	var life Life
	for i, step := range steps {
		rev := int64(i + 2)
		for _, op := range strings.Split(step, ";") {
			f := strings.Fields(op)
			var s int64
			if len(f) > 1 {
				s = map[string]int64{"a": 0xa, "b": 0xb, "c": 0xc}[f[1]]
			}
			var ks []string
			switch f[0][1:] {
			case "q":
				ks = []string{keyspace.QueueKey(key, s), orders[s]}
				if f[0][0] == '+' {
					orders[s] = keyspace.QueueOrderKey(key, uint64(rev), s)
					ks[1] = orders[s]
				}
			case "w":
				ks = []string{keyspace.QueueKey(key, s)}
			case "o":
				seq, _ := strconv.ParseUint(f[2], 10, 64)
				orders[s] = keyspace.QueueOrderKey(key, seq, s)
				ks = []string{orders[s]}
			case "l":
				ks = []string{keyspace.HoldKey(key)}
			default:
				t.Fatalf("bad step %q", op)
			}
			for _, k := range ks {
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
		{"head granted, a waiter with no order key", []string{"+l c", "+q a", "+w b", "-l; +l a; -q a"}, 1, "has no order key"},
		{"head granted, order keys out of joining order", []string{"+l c", "+q a", "+w b; +o b 1", "-l; +l a; -q a"}, 1, "sorts before"},
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
