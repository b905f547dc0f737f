package renewal

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/lockd-dev/lockd/ci/bench/internal/rig"
	"github.com/lockd-dev/lockd/internal/identity"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// slotWidth is the resolution of the keepalive wheel: every session has a
// slot in its period and is renewed when the wheel passes it.
const slotWidth = 20 * time.Millisecond

// goldenFrac is the fractional part of the golden ratio.
const goldenFrac = 0.6180339887498949

// session is one opened session as the keeper sees it.
type session struct {
	idx int   // index in the run, for hold keys
	id  int64 // lockd's session ID
	// granted counts the holds granted to it.
	granted atomic.Int32

	// Guarded by the stream's mu.
	pending  []int64 // send times (unix nanos) not yet answered, oldest first
	lastSent int64
	lost     bool // counted as a false expiry
	expired  bool // answered with TTL zero: gone, no more keepalives
	closed   bool // being closed by the run: answers no longer count
}

// loss describes the first session the keeper lost.
type loss struct {
	at     time.Time
	reason string
}

// keeper renews every opened session once per interval over one KeepAlive
// stream per identity, and checks the answers.
type keeper struct {
	ttl, interval time.Duration
	slots         int
	start         time.Time
	streams       []*kaStream

	sent, answered atomic.Int64
	expiredAnswers atomic.Int64 // sessions lost to a TTL-zero answer
	unanswered     atomic.Int64 // sessions lost to an answer later than the TTL
	lost           atomic.Int64
	reopens        atomic.Int64
	maxGap         atomic.Int64 // longest time between two sends to one session (nanos)
	frozen         atomic.Bool  // results taken: losses no longer count
	lat            *histogram
	lostClosing    atomic.Int64 // sessions lost after freeze, before their close
	phase          func() string
	mu             sync.Mutex // guards first, events
	first          *loss
	events         map[string]*streamEvent
	wg             sync.WaitGroup
	ctx            context.Context
	cancel         context.CancelFunc
}

// streamEvent counts one kind of stream failure by phase.
type streamEvent struct {
	byPhase map[string]int
	order   []string
	first   string
}

// newKeeper starts renewing over one stream per identity, spread over
// conns; phase names the run's phase for the failure notes.
func newKeeper(ctx context.Context, conns []*grpc.ClientConn, identities int, ttl, interval time.Duration, phase func() string) *keeper {
	ctx, cancel := context.WithCancel(ctx)
	slots := max(int(interval/slotWidth), 1)
	k := &keeper{ttl: ttl, interval: interval, slots: slots, start: time.Now(),
		lat: newHistogram(), ctx: ctx, cancel: cancel, phase: phase, events: map[string]*streamEvent{}}
	for i := range identities {
		s := &kaStream{k: k, ident: i, client: lockv1.NewLockServiceClient(conns[i%len(conns)]),
			wheel: make([][]*session, slots), byID: map[int64]*session{}}
		k.streams = append(k.streams, s)
	}
	for _, s := range k.streams {
		k.wg.Add(1)
		go s.run()
	}
	k.wg.Add(1)
	go k.watch()
	return k
}

// add starts renewing s on identity ident's stream.
func (k *keeper) add(ident int, s *session) {
	st := k.streams[ident]
	st.mu.Lock()
	defer st.mu.Unlock()
	s.lastSent = time.Now().UnixNano()
	// The n-th session of a stream goes to the slot at the fractional part
	// of n times the golden ratio, offset per stream: evenly spread over the
	// period at any count, as sessions spread their renewals in time.
	pos := math.Mod(float64(st.next)*goldenFrac+float64(st.ident)/float64(len(k.streams)), 1)
	slot := min(int(pos*float64(k.slots)), k.slots-1)
	st.wheel[slot] = append(st.wheel[slot], s)
	st.next++
	st.byID[s.id] = s
}

// close marks s as closed by the run: its answers no longer count and it
// gets no more keepalives.
func (k *keeper) close(ident int, s *session) {
	st := k.streams[ident]
	st.mu.Lock()
	s.closed = true
	st.mu.Unlock()
}

// isLost reports whether s was counted as lost.
func (k *keeper) isLost(ident int, s *session) bool {
	st := k.streams[ident]
	st.mu.Lock()
	defer st.mu.Unlock()
	return s.lost
}

// freeze stops counting losses: the run has taken its figures.
func (k *keeper) freeze() {
	for _, st := range k.streams {
		st.mu.Lock() // no lose() is halfway through counting
	}
	k.frozen.Store(true)
	for _, st := range k.streams {
		st.mu.Unlock()
	}
}

// noteGap records the time between two sends to one session.
func (k *keeper) noteGap(gap int64) {
	for {
		m := k.maxGap.Load()
		if gap <= m || k.maxGap.CompareAndSwap(m, gap) {
			return
		}
	}
}

// stop ends the streams and waits for them.
func (k *keeper) stop() {
	k.cancel()
	k.wg.Wait()
}

// lose counts s as lost, once; after freeze, as lost while closing. Called
// with the stream's mu held.
func (k *keeper) lose(s *session, expired bool, why string) {
	if s.lost || s.closed {
		return
	}
	s.lost = true
	if k.frozen.Load() {
		k.lostClosing.Add(1)
		return
	}
	k.mu.Lock()
	if k.first == nil {
		k.first = &loss{at: time.Now(), reason: why}
	}
	k.mu.Unlock()
	if expired {
		k.expiredAnswers.Add(1)
	} else {
		k.unanswered.Add(1)
	}
	k.lost.Add(1) // last: whoever sees it counted finds the first loss set
}

// firstLoss returns the first loss, or nil.
func (k *keeper) firstLoss() *loss {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.first
}

// event counts a stream failure of kind ("broke", "would not open").
func (k *keeper) event(kind string, ident int, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e := k.events[kind]
	if e == nil {
		e = &streamEvent{byPhase: map[string]int{}, first: fmt.Sprintf("identity %d: %v", ident, err)}
		k.events[kind] = e
	}
	p := k.phase()
	if e.byPhase[p] == 0 {
		e.order = append(e.order, p)
	}
	e.byPhase[p]++
}

// notes describes the stream failures.
func (k *keeper) notes() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, kind := range []string{"broke", "would not open"} {
		e := k.events[kind]
		if e == nil {
			continue
		}
		var parts []string
		for _, p := range e.order {
			parts = append(parts, fmt.Sprintf("%d while %s", e.byPhase[p], p))
		}
		out = append(out, fmt.Sprintf("keepalive streams %s (and were reopened) %s; first: %s", kind, strings.Join(parts, ", "), e.first))
	}
	return out
}

// watch counts as lost every session whose oldest keepalive has waited
// longer than the TTL for its answer.
func (k *keeper) watch() {
	defer k.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-k.ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now().UnixNano()
		for _, st := range k.streams {
			st.mu.Lock()
			for _, s := range st.byID {
				if len(s.pending) > 0 && !s.lost && now-s.pending[0] > int64(k.ttl) {
					k.lose(s, false, fmt.Sprintf("session %d (#%d) had no keepalive answer for %s",
						s.id, s.idx, time.Duration(now-s.pending[0]).Round(time.Millisecond)))
				}
			}
			st.mu.Unlock()
		}
	}
}

// oldestPending returns the age of the oldest unanswered keepalive.
func (k *keeper) oldestPending() time.Duration {
	now := time.Now().UnixNano()
	var oldest int64
	for _, st := range k.streams {
		st.mu.Lock()
		for _, s := range st.byID {
			if len(s.pending) > 0 && !s.closed && now-s.pending[0] > oldest {
				oldest = now - s.pending[0]
			}
		}
		st.mu.Unlock()
	}
	return time.Duration(oldest)
}

// kaStream is one identity's KeepAlive stream and the wheel of its sessions.
type kaStream struct {
	k      *keeper
	ident  int
	client lockv1.LockServiceClient

	mu     sync.Mutex
	wheel  [][]*session
	next   int // sessions added
	byID   map[int64]*session
	cancel context.CancelFunc // ends the current stream
}

// open opens the stream and starts its receiver, which closes broken when
// the stream fails.
func (st *kaStream) open() (stream lockv1.LockService_KeepAliveClient, broken chan struct{}, err error) {
	ctx, cancel := context.WithCancel(st.k.ctx)
	ctx = metadata.AppendToOutgoingContext(ctx, identity.InsecureIdentityHeader, rig.Identity(st.ident))
	stream, err = st.client.KeepAlive(ctx)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	broken = make(chan struct{})
	st.mu.Lock()
	st.cancel = cancel
	st.mu.Unlock()
	st.k.wg.Add(1)
	go st.recv(stream, broken)
	return stream, broken, nil
}

// run turns the wheel: every slotWidth it sends the keepalives of the
// slots passed since the last turn, reopening the stream when it broke.
func (st *kaStream) run() {
	defer st.k.wg.Done()
	k := st.k
	t := time.NewTicker(slotWidth)
	defer t.Stop()
	last := int(time.Since(k.start) / slotWidth)
	var stream lockv1.LockService_KeepAliveClient
	var broken chan struct{}
	for {
		select {
		case <-k.ctx.Done():
			if stream != nil {
				_ = stream.CloseSend()
			}
			return
		case <-t.C:
		}
		if stream != nil {
			select {
			case <-broken:
				st.reset()
				stream = nil
			default:
			}
		}
		if stream == nil {
			var err error
			if stream, broken, err = st.open(); err != nil {
				if k.ctx.Err() == nil {
					k.event("would not open", st.ident, err)
				}
				continue
			}
		}
		cur := int(time.Since(k.start) / slotWidth)
		for a := last + 1; a <= cur; a++ {
			if !st.sendSlot(stream, a%k.slots) {
				break
			}
		}
		last = cur
	}
}

// sendSlot sends one keepalive to every live session in slot; false when
// the stream failed.
func (st *kaStream) sendSlot(stream lockv1.LockService_KeepAliveClient, slot int) bool {
	now := time.Now().UnixNano()
	var ids []int64
	st.mu.Lock()
	for _, s := range st.wheel[slot] {
		if s.expired || s.closed {
			continue
		}
		st.k.noteGap(now - s.lastSent)
		s.lastSent = now
		s.pending = append(s.pending, now)
		ids = append(ids, s.id)
	}
	st.mu.Unlock()
	for _, id := range ids {
		if err := stream.Send(&lockv1.KeepAliveRequest{SessionId: id}); err != nil {
			return false // the receiver sees the failure and closes broken
		}
		st.k.sent.Add(1)
	}
	return true
}

// reset forgets the keepalives the broken stream never answered (they are
// not the sessions' fault) so the watch does not count them.
func (st *kaStream) reset() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.cancel != nil {
		st.cancel()
	}
	for _, s := range st.byID {
		s.pending = s.pending[:0]
	}
	st.k.reopens.Add(1)
}

// recv matches answers with sends: each answer settles the session's
// oldest unanswered keepalive.
func (st *kaStream) recv(stream lockv1.LockService_KeepAliveClient, broken chan struct{}) {
	defer st.k.wg.Done()
	defer close(broken)
	k := st.k
	for {
		resp, err := stream.Recv()
		if err != nil {
			if k.ctx.Err() == nil {
				k.event("broke", st.ident, err)
			}
			return
		}
		now := time.Now().UnixNano()
		st.mu.Lock()
		s := st.byID[resp.GetSessionId()]
		if s == nil || len(s.pending) == 0 {
			st.mu.Unlock()
			continue
		}
		sent := s.pending[0]
		s.pending = s.pending[1:]
		if resp.GetTtl().AsDuration() <= 0 && !s.closed {
			s.expired = true
			k.lose(s, true, fmt.Sprintf("session %d (#%d) was answered expired (TTL 0) %s after its keepalive was sent",
				s.id, s.idx, time.Duration(now-sent).Round(time.Millisecond)))
		}
		st.mu.Unlock()
		k.answered.Add(1)
		k.lat.add(time.Duration(now - sent))
	}
}

// histogram counts answer latencies in 1 ms buckets up to a minute.
type histogram struct {
	b []atomic.Int64
}

const histBuckets = 60_000

func newHistogram() *histogram { return &histogram{b: make([]atomic.Int64, histBuckets+1)} }

func (h *histogram) add(d time.Duration) {
	i := min(int(d/time.Millisecond), histBuckets)
	h.b[max(i, 0)].Add(1)
}

// snapshot copies the counts.
func (h *histogram) snapshot() []int64 {
	c := make([]int64, len(h.b))
	for i := range h.b {
		c[i] = h.b[i].Load()
	}
	return c
}

// quantiles returns the quantiles qs of the counts in now minus before
// (before may be nil), as the upper edge of their bucket.
func quantiles(now, before []int64, qs ...float64) []time.Duration {
	var total int64
	d := make([]int64, len(now))
	for i := range now {
		d[i] = now[i]
		if before != nil {
			d[i] -= before[i]
		}
		total += d[i]
	}
	out := make([]time.Duration, len(qs))
	if total == 0 {
		return out
	}
	for j, q := range qs {
		rank := min(int64(q*float64(total)), total-1)
		var acc int64
		for i, c := range d {
			acc += c
			if acc > rank || i == len(d)-1 {
				out[j] = time.Duration(i+1) * time.Millisecond
				break
			}
		}
	}
	return out
}
