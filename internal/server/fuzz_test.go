package server_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// answered are the codes a lock.v1 call may end with on any input: an
// answer that says what is wrong or what happened. Internal, Unknown and
// Unavailable are not among them: on bad input those would mean lockd
// failed, not the request.
var answered = map[codes.Code]bool{
	codes.OK: true, codes.InvalidArgument: true, codes.NotFound: true, codes.PermissionDenied: true,
	codes.FailedPrecondition: true, codes.DeadlineExceeded: true, codes.ResourceExhausted: true,
	codes.Aborted: true, codes.AlreadyExists: true, codes.OutOfRange: true,
}

// requestFields are the lock.v1 request fields an InvalidArgument answer
// may name.
var requestFields = []string{"key", "class", "wait", "ttl", "session", "token", "limit", "kinds", "since", "until", "identity", "prefix", "lease"}

// FuzzRequestsAtTheirLimitsGetAClearAnswer sends Acquire, Release,
// Inspect, ValidateToken, OpenSession and History requests with fuzzed
// fields to one running lockd (embedded etcd, audit history on). Every
// answer is one that says what happened, an InvalidArgument names the
// field, no answer carries a token's text, and after each request lockd
// still serves: a read answers, and every 64 inputs a real grant and
// release succeed.
func FuzzRequestsAtTheirLimitsGetAClearAnswer(f *testing.F) {
	f.Add("t/fuzz/a", "std", int64(0), int64(0), uint64(0), "", "", "", int32(0), int64(0), int64(0), true)
	f.Add("t/fuzz/", "other/std", int64(5000), int64(-1), uint64(1)<<48|7, "spiffe://x", "default/std", "grant,release", int32(10), int64(1), int64(2), false)
	f.Add(strings.Repeat("k", 1025), "", int64(1)<<62, int64(300_001), ^uint64(0), "\x00", "a/b/c", "nope", int32(-1), int64(-62135596801), int64(253402300800), true)
	f.Add("t/../x", "std", int64(-1), int64(4999), uint64(0), "", "", ",", int32(10001), int64(0), int64(-1), false)
	f.Add("", "", int64(0), int64(0), uint64(0), "", "", "", int32(0), int64(0), int64(0), false)

	env := lockdtest.Start(f, lockdtest.Options{Audit: true})
	alice, _ := env.Raw(f, lockdtest.Alice)
	op, _ := env.Raw(f, lockdtest.Operator)
	holder := env.Client(f, lockdtest.Alice)
	ctx := context.Background()

	class, err := alice.DescribeClass(ctx, &lockv1.DescribeClassRequest{Namespace: "t", Name: "std"})
	if err != nil {
		f.Fatal(err)
	}
	ttl := class.GetClass().GetTtl()
	var (
		session int64
		opened  time.Time
		inputs  int
	)
	// sessionID is a live session of Alice's with the class's TTL, opened
	// again when half its TTL has passed (nothing keeps it alive).
	sessionID := func(t *testing.T) int64 {
		if time.Since(opened) > ttl.AsDuration()/2 {
			resp, err := alice.OpenSession(ctx, &lockv1.OpenSessionRequest{Ttl: ttl})
			if err != nil {
				t.Fatalf("OpenSession with the class TTL: %v", err)
			}
			session, opened = resp.GetSessionId(), time.Now()
		}
		return session
	}

	f.Fuzz(func(t *testing.T, key, className string, waitMs, ttlMs int64, tok uint64,
		identity, histClass, kinds string, limit int32, since, until int64, ownSession bool) {
		call := func(what string, err error) {
			t.Helper()
			st := status.Convert(err)
			if !answered[st.Code()] {
				t.Fatalf("%s: %v, not an answer that says what happened", what, err)
			}
			if st.Code() == codes.InvalidArgument && !namesAField(st.Message()) {
				t.Fatalf("%s: %q names no field of the request", what, st.Message())
			}
			if tok > 1<<48 && strings.Contains(st.Message(), strconv.FormatUint(tok, 10)) {
				t.Fatalf("%s: the answer carries the token's text: %q", what, st.Message())
			}
		}
		// A proto3 string is UTF-8: the gRPC client refuses to send any
		// other, so lockd never sees one.
		for _, s := range []*string{&key, &className, &identity, &histClass, &kinds} {
			*s = strings.ToValidUTF8(*s, "\uFFFD")
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		sid := int64(tok >> 1)
		if ownSession {
			sid = sessionID(t)
		}

		acq, err := alice.Acquire(rctx, &lockv1.AcquireRequest{SessionId: sid, Key: key, Class: className, Wait: durationpb.New(time.Duration(waitMs%2000) * time.Millisecond)})
		call("Acquire", err)
		if err == nil {
			_, err := alice.Release(rctx, &lockv1.ReleaseRequest{SessionId: sid, Key: key, Token: acq.GetToken().GetValue()})
			if err != nil {
				t.Fatalf("releasing the grant of %q: %v", key, err)
			}
		}
		_, err = alice.Release(rctx, &lockv1.ReleaseRequest{SessionId: sid, Key: key, Token: tok})
		call("Release", err)
		_, err = alice.Inspect(rctx, &lockv1.InspectRequest{Key: key})
		call("Inspect", err)
		_, err = alice.ValidateToken(rctx, &lockv1.ValidateTokenRequest{Key: key, Token: tok})
		call("ValidateToken", err)
		opened2, err := alice.OpenSession(rctx, &lockv1.OpenSessionRequest{Ttl: durationpb.New(time.Duration(ttlMs) * time.Millisecond)})
		call("OpenSession", err)
		if err == nil {
			_, _ = alice.CloseSession(rctx, &lockv1.CloseSessionRequest{SessionId: opened2.GetSessionId()})
		}
		req := &lockv1.HistoryRequest{Key: key, Identity: identity, Class: histClass, Limit: limit,
			Since: timestamppb.New(time.Unix(since, 0)), Until: timestamppb.New(time.Unix(until, 0))}
		if kinds != "" {
			req.Kinds = strings.Split(kinds, ",")
		}
		_, err = op.History(rctx, req)
		call("History", err)

		// lockd still serves.
		if _, err := alice.Inspect(rctx, &lockv1.InspectRequest{Key: "t/fuzz/probe"}); err != nil {
			t.Fatalf("after the input, lockd does not answer a read: %v", err)
		}
		if inputs++; inputs%64 == 0 {
			l, err := holder.Acquire(rctx, "t/fuzz/probe", "std", func(*client.Lock) {})
			if err != nil {
				t.Fatalf("after %d inputs, lockd does not grant: %v", inputs, err)
			}
			if err := l.Release(rctx); err != nil {
				t.Fatalf("after %d inputs, lockd does not release: %v", inputs, err)
			}
		}
	})
}

// namesAField: msg names a request field, as "field: rule" or
// "field[i]: rule" does.
func namesAField(msg string) bool {
	for _, f := range requestFields {
		if strings.Contains(msg, f+":") || strings.Contains(msg, f+"[") || strings.Contains(msg, f+" ") {
			return true
		}
	}
	return false
}
