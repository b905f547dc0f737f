package arbiter

import (
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// TestStaleViewOfTheSessionsOwnHoldIsReadAgain: a line view behind the
// store can show a hold the waiter's session had before (released since,
// and the session back in line). Taken as "mine" it would hand out that
// old hold's token as a grant. Such a glance must send the waiter to a
// linearizable read, whoever the view says is ahead.
func TestStaleViewOfTheSessionsOwnHoldIsReadAgain(t *testing.T) {
	d := &durable{req: AcquireRequest{Session: 7}, pos: linePos{qk: "/q/t/k#7", rev: 40}}
	d.req.Caller.ID = "spiffe://t/alice"
	own := &mvccpb.KeyValue{CreateRevision: 40}
	ahead := &mvccpb.KeyValue{Key: []byte("/q/t/k#5"), CreateRevision: 30}
	for _, tc := range []struct {
		name string
		att  attempt
		want bool
	}{
		{"another holds it, someone ahead", attempt{own: own, ahead: ahead, holderLease: 9, holder: holdRecord{Identity: "spiffe://t/bob"}}, true},
		{"another holds it", attempt{own: own, holderLease: 9, holder: holdRecord{Identity: "spiffe://t/bob"}}, true},
		{"free, someone ahead", attempt{own: own, ahead: ahead}, true},
		{"the session's own (old) hold, someone ahead", attempt{own: own, ahead: ahead, holderLease: 7, holder: holdRecord{Identity: "spiffe://t/alice"}}, false},
		{"the identity's hold on another session", attempt{own: own, ahead: ahead, holderLease: 8, holder: holdRecord{Identity: "spiffe://t/alice"}}, false},
		{"free, head", attempt{own: own}, false},
		{"place gone", attempt{ahead: ahead, holderLease: 9, holder: holdRecord{Identity: "spiffe://t/bob"}}, false},
	} {
		if got := tc.att.stillWaiting(d); got != tc.want {
			t.Errorf("%s: stillWaiting = %v, want %v", tc.name, got, tc.want)
		}
	}
}
