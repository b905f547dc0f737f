package fencedstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Memory is an in-memory store for gate runs without PostgreSQL. It
// lives in the gate process; Handler serves it to the worker processes,
// which use OpenHTTP. Keys not yet written read as fence 0, value 0. Memory
// is itself a Store, for use inside the gate process.
type Memory struct {
	fenced bool

	mu    sync.Mutex
	cells map[string]cell
}

type cell struct {
	fence uint64
	value int64
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store. With fenced false every
// write is accepted: the negative control.
func NewMemory(fenced bool) *Memory {
	return &Memory{fenced: fenced, cells: map[string]cell{}}
}

// Fenced reports whether the store rejects writes with stale tokens.
func (m *Memory) Fenced() bool { return m.fenced }

// Read returns the key's current fence and value.
func (m *Memory) Read(ctx context.Context, key string) (uint64, int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, fmt.Errorf("fencedstore: read %q: %w", key, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.cells[key]
	return c.fence, c.value, nil
}

// Write stores value and tok as the key's fence if the store is
// unfenced or tok is greater than the fence, and reports whether it did.
func (m *Memory) Write(ctx context.Context, key string, tok uint64, value int64) (bool, error) {
	if tok > MaxToken {
		return false, fmt.Errorf("%w: write %q: token %d", ErrTokenRange, key, tok)
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("fencedstore: write %q: %w", key, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fenced && tok <= m.cells[key].fence {
		return false, nil
	}
	m.cells[key] = cell{fence: tok, value: value}
	return true, nil
}

// Close does nothing: the store lives as long as the gate process.
func (m *Memory) Close() error { return nil }

// The HTTP protocol. Tokens, fences and values travel as decimal strings so
// that no JSON decoder can round them through a float64.
type (
	readResponse struct {
		Fence uint64 `json:"fence,string"`
		Value int64  `json:"value,string"`
	}
	writeRequest struct {
		Key   string `json:"key"`
		Token uint64 `json:"token,string"`
		Value int64  `json:"value,string"`
	}
	writeResponse struct {
		Accepted bool `json:"accepted"`
	}
)

// maxRequestBody bounds a write request's body.
const maxRequestBody = 64 << 10

// Handler serves the store over HTTP:
//
//	GET  /read?key=K                                 → {"fence":"F","value":"V"}
//	POST /write {"key":"K","token":"T","value":"V"}  → {"accepted":true|false}
//
// Numbers are decimal strings. A malformed request is answered 400 and not
// applied.
func (m *Memory) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /read", func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Query().Get("key")
		if key == "" {
			http.Error(w, "missing key", http.StatusBadRequest)
			return
		}
		fence, value, err := m.Read(r.Context(), key)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, readResponse{Fence: fence, Value: value})
	})
	mux.HandleFunc("POST /write", func(w http.ResponseWriter, r *http.Request) {
		var req writeRequest
		dec := json.NewDecoder(io.LimitReader(r.Body, maxRequestBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
			return
		}
		if req.Key == "" {
			http.Error(w, "missing key", http.StatusBadRequest)
			return
		}
		if req.Token > MaxToken {
			http.Error(w, fmt.Sprintf("token %d out of range", req.Token), http.StatusBadRequest)
			return
		}
		accepted, err := m.Write(r.Context(), req.Key, req.Token, req.Value)
		if err != nil {
			// Only a cancelled request gets here, before the write.
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, writeResponse{Accepted: accepted})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// HTTPTimeout bounds each request of an OpenHTTP store, on top of the
// caller's context.
const HTTPTimeout = 10 * time.Second

// OpenHTTP returns a Store that uses the in-memory store served by
// Handler at baseURL (e.g. "http://127.0.0.1:PORT"). A failure to connect is
// definite; a timeout or a lost connection once the request may have been
// sent is unknown (IsUnknown).
func OpenHTTP(baseURL string) Store {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        8,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     time.Minute,
	}
	return &httpStore{
		base:   strings.TrimRight(baseURL, "/"),
		client: &http.Client{Transport: tr, Timeout: HTTPTimeout},
	}
}

// httpStore is the worker's side of Memory.Handler.
type httpStore struct {
	base   string
	client *http.Client

	mu     sync.Mutex
	closed bool
}

func (h *httpStore) Read(ctx context.Context, key string) (uint64, int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.base+"/read?key="+url.QueryEscape(key), nil)
	if err != nil {
		return 0, 0, fmt.Errorf("fencedstore: read %q: %w", key, err)
	}
	var resp readResponse
	if err := h.do(req, &resp); err != nil {
		return 0, 0, fmt.Errorf("fencedstore: read %q: %w", key, err)
	}
	return resp.Fence, resp.Value, nil
}

func (h *httpStore) Write(ctx context.Context, key string, tok uint64, value int64) (bool, error) {
	if tok > MaxToken {
		return false, fmt.Errorf("%w: write %q: token %d", ErrTokenRange, key, tok)
	}
	body, err := json.Marshal(writeRequest{Key: key, Token: tok, Value: value})
	if err != nil {
		return false, fmt.Errorf("fencedstore: write %q: %w", key, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.base+"/write", bytes.NewReader(body))
	if err != nil {
		return false, fmt.Errorf("fencedstore: write %q: %w", key, err)
	}
	req.Header.Set("Content-Type", "application/json")
	var resp writeResponse
	if err := h.do(req, &resp); err != nil {
		return false, fmt.Errorf("fencedstore: write %q: %w", key, err)
	}
	return resp.Accepted, nil
}

// do sends req and decodes a 200 answer into out. Its error wraps
// ErrUnknownOutcome unless the request certainly was not applied: it could
// not be sent (no connection), or the server refused it (4xx).
func (h *httpStore) do(req *http.Request, out any) error {
	h.mu.Lock()
	closed := h.closed
	h.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if err := req.Context().Err(); err != nil {
		return err
	}
	resp, err := h.client.Do(req)
	if err != nil {
		if isDialError(err) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxRequestBody))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return fmt.Errorf("%w: %s: %s", ErrRequest, resp.Status, strings.TrimSpace(string(body)))
	default:
		return fmt.Errorf("%w: %s: %s", ErrUnknownOutcome, resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%w: answer: %w", ErrUnknownOutcome, err)
	}
	return nil
}

// isDialError reports whether err is a failure to connect, before anything
// was sent.
func isDialError(err error) bool {
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

func (h *httpStore) Close() error {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.client.CloseIdleConnections()
	return nil
}
