package class

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Reload timing; variables so that tests can shorten them.
var (
	// debounceDelay is how long the watcher waits after the last file
	// system event before reloading.
	debounceDelay = 200 * time.Millisecond
	// rescanInterval is how often the watcher reloads even without events,
	// in case events were missed.
	rescanInterval = 30 * time.Second
)

// Watcher serves the last good [Set] of a class directory and reloads it
// when files change. An invalid directory never replaces a good set.
type Watcher struct {
	dir      string
	now      func() time.Time
	log      *slog.Logger
	onReject func(error)
	fsw      *fsnotify.Watcher
	current  atomic.Pointer[Set]

	mu   sync.Mutex
	subs []func(*Set)

	lastRejected string // owned by the run goroutine
	// confirmed is when the directory was last read and found good (Unix
	// nanoseconds): the served set was current then.
	confirmed atomic.Int64

	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// NewWatcher loads dir (see [LoadDir]) and watches it for changes. It
// fails if the initial set is invalid. now supplies the time used to check
// risk waivers (nil means time.Now); logger receives one line per reload
// or rejection (nil means slog.Default()); onReject, if not nil, is called
// with the error each time a changed directory is rejected. The same
// rejection is reported once, not again on every periodic re-scan.
func NewWatcher(dir string, now func() time.Time, logger *slog.Logger, onReject func(error)) (*Watcher, error) {
	if now == nil {
		now = time.Now
	}
	if logger == nil {
		logger = slog.Default()
	}
	if onReject == nil {
		onReject = func(error) {}
	}
	set, err := LoadDir(dir, now())
	if err != nil {
		return nil, err
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("class: watch %s: %w", dir, err)
	}
	w := &Watcher{
		dir:      dir,
		now:      now,
		log:      logger,
		onReject: onReject,
		fsw:      fsw,
		done:     make(chan struct{}),
	}
	w.current.Store(set)
	w.confirmed.Store(time.Now().UnixNano())
	if err := fsw.Add(dir); err != nil {
		fsw.Close()
		return nil, fmt.Errorf("class: watch %s: %w", dir, err)
	}
	w.syncWatches()
	w.wg.Add(1)
	go w.run()
	return w, nil
}

// Confirmed is when the directory was last read and found good: the set
// served was current then. The watcher reads it at every change and at
// least every 30 seconds.
func (w *Watcher) Confirmed() time.Time { return time.Unix(0, w.confirmed.Load()) }

// Current returns the last good set. It never returns nil.
func (w *Watcher) Current() *Set {
	return w.current.Load()
}

// OnChange registers f to be called with each new good set, after it has
// become current. Calls are made one at a time from the watcher's
// goroutine, in registration order; f should return quickly.
func (w *Watcher) OnChange(f func(*Set)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.subs = append(w.subs, f)
}

// Close stops watching. Current keeps returning the last good set.
func (w *Watcher) Close() error {
	var err error
	w.closeOnce.Do(func() {
		close(w.done)
		err = w.fsw.Close()
		w.wg.Wait()
	})
	return err
}

func (w *Watcher) run() {
	defer w.wg.Done()
	debounce := time.NewTimer(debounceDelay)
	debounce.Stop()
	defer debounce.Stop()
	rescan := time.NewTicker(rescanInterval)
	defer rescan.Stop()
	for {
		select {
		case <-w.done:
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			if ev.Has(fsnotify.Create) && filepath.Dir(ev.Name) == filepath.Clean(w.dir) {
				w.syncWatches() // a new namespace folder
			}
			debounce.Reset(debounceDelay)
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			// Typically an event queue overflow: events were lost.
			w.log.Warn("class directory watch error; reloading", "dir", w.dir, "err", err)
			debounce.Reset(debounceDelay)
		case <-debounce.C:
			w.reload()
		case <-rescan.C:
			w.reload()
		}
	}
}

// syncWatches watches the root and every namespace folder. Adding a path
// already watched is harmless; watches of removed folders go away by
// themselves.
func (w *Watcher) syncWatches() {
	_ = w.fsw.Add(w.dir)
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		path := filepath.Join(w.dir, e.Name())
		if hidden(e.Name()) || !isDir(path, e) {
			continue
		}
		if err := w.fsw.Add(path); err != nil {
			w.log.Warn("cannot watch namespace folder", "dir", path, "err", err)
		}
	}
}

// reload loads the directory and either serves the new set or rejects it.
func (w *Watcher) reload() {
	w.syncWatches()
	set, err := LoadDir(w.dir, w.now())
	if err != nil {
		msg := err.Error()
		if msg == w.lastRejected {
			return
		}
		w.lastRejected = msg
		w.log.Error("class set rejected; still serving the last good set", "dir", w.dir, "err", err)
		w.onReject(err)
		return
	}
	w.lastRejected = ""
	w.confirmed.Store(time.Now().UnixNano())
	if reflect.DeepEqual(set, w.current.Load()) {
		return
	}
	w.current.Store(set)
	w.log.Info("class set reloaded", "dir", w.dir,
		"namespaces", len(set.namespaces), "classes", len(set.Classes()), "grants", len(set.grants))
	w.mu.Lock()
	subs := slices.Clone(w.subs)
	w.mu.Unlock()
	for _, f := range subs {
		f(set)
	}
}
