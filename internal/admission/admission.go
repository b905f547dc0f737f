// Package admission is a Kubernetes validating admission webhook for the
// LockClass, LockGrant and PauseTestResult custom resources
// (locks.lockd.dev/v1alpha1).
//
// It applies the per-object rules of package class — the rules lockd
// applies when it loads a class directory: schema, TTL range, the advisory
// TTL floor, risk owner and unexpired waiver, onQuorumLoss, tier, fairness
// and grant prefixes inside their namespace — with the same rule ids and
// messages as class-lint check. It does not apply the review rules that need
// other objects or files (a current pause-test result for each fenced class,
// overlapping grants, CODEOWNERS): an object admitted here can still fail
// class-lint check, which CI runs on the class repository.
package admission

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/lockd-dev/lockd/internal/class"
)

// MaxBodyBytes bounds the size of a request body. The API server accepts
// objects of at most 3 MiB and an UPDATE review carries two of them (object
// and oldObject) plus the request's metadata.
const MaxBodyBytes = 7 << 20

// Group is the API group of the kinds validated.
var Group, _, _ = strings.Cut(class.APIVersion, "/")

// Kinds are the kinds validated.
var Kinds = []string{class.KindLockClass, class.KindLockGrant, class.KindPauseTestResult}

// Errors reading a request. The HTTP handler answers them with a client
// error status and the error's text.
var (
	// ErrBadRequest: the body is not an admission.k8s.io/v1 AdmissionReview
	// with a request.
	ErrBadRequest = errors.New("admission: bad request")
	// ErrTooLarge: the body is larger than MaxBodyBytes.
	ErrTooLarge = fmt.Errorf("admission: request body larger than %d bytes", MaxBodyBytes)
)

// Handler validates AdmissionReview requests. It is an http.Handler for the
// webhook's path.
type Handler struct {
	now func() time.Time
	log *slog.Logger
}

// NewHandler returns a handler that checks waiver expiry against now
// (time.Now when nil) and logs each decision to log (discarded when nil).
func NewHandler(now func() time.Time, log *slog.Logger) *Handler {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{now: now, log: log}
}

// ServeHTTP answers a POST of an AdmissionReview (Content-Type
// application/json) with an AdmissionReview holding the response. A body
// that is not a review is answered with 400 (405, 413 or 415 for the wrong
// method, size or content type) and a message saying what was wrong.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, fmt.Sprintf("admission: method %s not allowed: POST an admission.k8s.io/v1 AdmissionReview", r.Method),
			http.StatusMethodNotAllowed)
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		http.Error(w, fmt.Sprintf("admission: Content-Type must be application/json, got %q", r.Header.Get("Content-Type")),
			http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			http.Error(w, ErrTooLarge.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, fmt.Sprintf("%v: reading the body: %v", ErrBadRequest, err), http.StatusBadRequest)
		return
	}
	req, err := DecodeRequest(body)
	if err != nil {
		h.log.Warn("bad admission request", "remote", r.RemoteAddr, "err", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	resp := h.Validate(req)
	attrs := []any{"uid", req.UID, "operation", req.Operation, "kind", req.Kind.Kind,
		"object", req.Namespace + "/" + req.Name, "allowed", resp.Allowed}
	if resp.Result != nil {
		attrs = append(attrs, "message", resp.Result.Message)
	}
	if len(resp.Warnings) > 0 {
		attrs = append(attrs, "warnings", resp.Warnings)
	}
	h.log.Info("admission review", attrs...)

	out, err := json.Marshal(Review{APIVersion: ReviewAPIVersion, Kind: ReviewKind, Response: resp})
	if err != nil {
		http.Error(w, fmt.Sprintf("admission: encoding the response: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// DecodeRequest decodes an admission.k8s.io/v1 AdmissionReview and returns
// its request. Errors wrap ErrBadRequest.
func DecodeRequest(body []byte) (*Request, error) {
	var rev Review
	if err := json.Unmarshal(body, &rev); err != nil {
		return nil, fmt.Errorf("%w: body is not an AdmissionReview in JSON: %v", ErrBadRequest, err)
	}
	if rev.APIVersion != ReviewAPIVersion || rev.Kind != ReviewKind {
		return nil, fmt.Errorf("%w: want apiVersion %s and kind %s, got %q and %q (list only v1 in the webhook's admissionReviewVersions)",
			ErrBadRequest, ReviewAPIVersion, ReviewKind, rev.APIVersion, rev.Kind)
	}
	if rev.Request == nil {
		return nil, fmt.Errorf("%w: the AdmissionReview has no request", ErrBadRequest)
	}
	if rev.Request.UID == "" {
		return nil, fmt.Errorf("%w: request.uid is empty", ErrBadRequest)
	}
	return rev.Request, nil
}

// Validate decides a request. DELETE and CONNECT are allowed. CREATE and
// UPDATE are allowed when the object breaks no per-object rule of package
// class, or, on UPDATE, when the object is unchanged apart from metadata
// and status (so that labels, annotations and finalizers can still be
// changed on an object whose waiver has since lapsed); the problems are
// then returned as warnings. A denial's message lists every problem as
// "rule-id: field: message", joined with "; ".
func (h *Handler) Validate(req *Request) *Response {
	resp := &Response{UID: req.UID}
	switch req.Operation {
	case OperationCreate, OperationUpdate:
	default:
		resp.Allowed = true
		return resp
	}
	if req.Kind.Group != Group || !slices.Contains(Kinds, req.Kind.Kind) {
		return deny(resp, fmt.Sprintf("kind %s is not validated by this webhook: it validates %s in group %s; check the rules of its ValidatingWebhookConfiguration",
			kindName(req.Kind), strings.Join(Kinds, ", "), Group))
	}
	doc, err := document(req.Object, req.Namespace)
	if err != nil {
		return deny(resp, fmt.Sprintf("request.object: %v", err))
	}
	now := h.now()
	// The path is left empty: problems carry no file, and line numbers
	// mean nothing in a one-line JSON document, so neither is shown.
	f := class.Parse("", doc, "", now)
	var errs []string
	for _, p := range f.Problems {
		if p.Warning {
			resp.Warnings = append(resp.Warnings, Message(p))
		} else {
			errs = append(errs, Message(p))
		}
	}
	resp.Warnings = append(resp.Warnings, warnings(f, now)...)
	switch {
	case len(errs) == 0 && len(f.Objects) == 0:
		return deny(resp, "request.object: no LockClass, LockGrant or PauseTestResult found")
	case len(errs) == 0:
		resp.Allowed = true
		return resp
	case req.Operation == OperationUpdate && unchanged(doc, req.OldObject, req.Namespace):
		for _, e := range errs {
			resp.Warnings = append(resp.Warnings, "existing object: "+e)
		}
		resp.Allowed = true
		return resp
	}
	return deny(resp, strings.Join(errs, "; "))
}

// Message formats a problem as "rule-id: field: message", leaving out the
// parts that are empty: class-lint check's wording without the file, line
// and object, which the client already knows.
func Message(p class.Problem) string {
	var parts []string
	for _, s := range []string{p.ID, p.Field, p.Rule} {
		if s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, ": ")
}

// deny completes resp as a denial with message. 403 Forbidden is what the
// API server answers the client with; kubectl prints
// `Error from server (Forbidden): … admission webhook "…" denied the request: <message>`.
func deny(resp *Response, message string) *Response {
	resp.Allowed = false
	resp.Result = &Status{Status: "Failure", Message: message, Reason: "Forbidden", Code: http.StatusForbidden}
	return resp
}

func kindName(k GroupVersionKind) string {
	switch {
	case k.Kind == "":
		return "(none)"
	case k.Group == "":
		return fmt.Sprintf("%s (%s)", k.Kind, k.Version)
	default:
		return fmt.Sprintf("%s (%s/%s)", k.Kind, k.Group, k.Version)
	}
}

// document turns an object as the API server sends it into the document a
// class file would hold: metadata is cut down to name and namespace (the
// server adds uid, resourceVersion, managedFields, labels and more, which
// the class parser would report as unknown fields) and status is dropped.
// The namespace is the request's when the object has none. JSON is YAML,
// so the result can be handed to class.Parse; it is one line, so it never
// holds a YAML document marker.
func document(raw json.RawMessage, namespace string) ([]byte, error) {
	m, err := decodeObject(raw)
	if err != nil {
		return nil, err
	}
	delete(m, "status")
	if meta, ok := m["metadata"].(map[string]any); ok {
		kept := make(map[string]any, 2)
		for _, k := range []string{"name", "namespace"} {
			if v, ok := meta[k]; ok {
				kept[k] = v
			}
		}
		if _, ok := kept["namespace"]; !ok && namespace != "" {
			kept["namespace"] = namespace
		}
		m["metadata"] = kept
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return bytes.TrimSpace(b.Bytes()), nil
}

// decodeObject decodes a JSON object, keeping numbers as written so that
// messages quote them unchanged.
func decodeObject(raw json.RawMessage) (map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, errors.New("missing: CREATE and UPDATE reviews carry the object")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("must be a JSON object, got %s", string(raw))
	}
	return m, nil
}

// unchanged reports whether the old object of an UPDATE reduces to the same
// document as the new one, doc.
func unchanged(doc []byte, old json.RawMessage, namespace string) bool {
	oldDoc, err := document(old, namespace)
	if err != nil {
		return false
	}
	a, errA := decodeObject(doc)
	b, errB := decodeObject(oldDoc)
	return errA == nil && errB == nil && reflect.DeepEqual(a, b)
}

// warnings returns the review warnings about the classes of f that need
// no other object (class.ReviewClass: today, an advisory waiver that lapses
// within class.WaiverWarning), worded exactly as class-lint check prints
// them. The review rules that need the whole class repository are not
// applied here.
func warnings(f class.File, now time.Time) []string {
	var out []string
	for _, o := range f.Objects {
		if o.Class == nil {
			continue
		}
		for _, p := range class.ReviewClass(o.Class, now) {
			if p.Warning {
				out = append(out, Message(p))
			}
		}
	}
	return out
}
