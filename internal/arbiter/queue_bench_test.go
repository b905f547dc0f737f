package arbiter

import (
	"fmt"
	"testing"
	"time"
)

// The in-memory queue operations on the grant path, without etcd. Every
// Acquire asks queueFor(); a waiter enqueues and leaves; a release wakes
// the head.
//
//	go test -run '^$' -bench 'Busy|Enqueue|WakeHead' -benchmem ./internal/arbiter

func queueLine(keys int) *memoryLine {
	a := &Arbiter{home: newCell(cellConfig{}, nil, nil, nil, "", watermark{}), waiters: newWaiterQuota(DefaultMaxWaitersPerIdentity), now: time.Now}
	m := newMemoryLine(a, a.home)
	for i := range keys {
		key := fmt.Sprintf("t/q/%d", i)
		// An anchor waiter keeps each queue (and its watch, absent here)
		// alive, as a long wait does.
		m.queues[key] = &queue{hk: holdKey(key), op: make(chanMutex, 1), cancelWatch: func() {},
			waiters: []*waiter{{wake: make(chan struct{}, 1), done: make(chan waitResult, 1)}}}
	}
	return m
}

func BenchmarkBusyNoWaiters(b *testing.B) {
	m := queueLine(1000)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if q, _, _ := m.queueFor("t/free", 1); q != nil {
				b.Fatal("busy")
			}
		}
	})
}

func BenchmarkEnqueueLeave(b *testing.B) {
	m := queueLine(1)
	w := &waiter{wake: make(chan struct{}, 1), done: make(chan waitResult, 1)}
	b.ReportAllocs()
	for b.Loop() {
		w.state = waiting
		if err := m.enqueue("t/q/0", w, attempt{}, true); err != nil {
			b.Fatal(err)
		}
		m.mu.Lock()
		m.leave("t/q/0", w, false)
		m.mu.Unlock()
	}
}

func BenchmarkWakeHead(b *testing.B) {
	m := queueLine(1)
	b.ReportAllocs()
	for b.Loop() {
		m.wakeHead("t/q/0")
	}
}
