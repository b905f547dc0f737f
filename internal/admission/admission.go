// Package admission is a Kubernetes validating admission webhook for the
// LockClass, LockGrant and PauseTestResult custom resources
// (locks.lockd.dev/v1alpha1).
//
// It applies the per-object rules of package class — the rules lockd
// applies when it loads a class directory: schema, TTL range, the advisory
// TTL floor, risk owner and unexpired waiver, onQuorumLoss, tier, fairness,
// grant prefixes inside their namespace and a class's own spec.keys — with
// the same rule ids and messages as class-lint check. Given the other
// classes of the namespace ([WithPeers]), it also applies key-ownership to
// a LockClass: no two classes claim one prefix, and a class carved out of
// another names it in spec.nestedIn. It does not apply the review rules
// that need other files (a current pause-test result for each fenced class,
// overlapping grants, CODEOWNERS): an object admitted here can still fail
// class-lint check, which CI runs on the class repository.
package admission

import (
	"bytes"
	"context"
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
var Kinds = []string{class.KindLockClass, class.KindLockGrant, class.KindPauseTestResult, class.KindLockNamespace}

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
	now   func() time.Time
	log   *slog.Logger
	peers Peers
}

// Peers is where the handler finds the other LockClasses of a namespace,
// to check that a class admitted does not claim keys another class owns.
type Peers interface {
	// Classes returns the LockClasses of namespace (none when it has
	// none). The handler leaves out the one named like the object under
	// review: that is the object's own stored version. An error denies
	// the review (the webhook fails closed).
	Classes(ctx context.Context, namespace string) ([]*class.Class, error)
}

// RegionPeers is a Peers that also sees the repository's LockNamespaces:
// with it, the handler applies the namespace-region rule (one region per
// namespace; every namespace with classes homed once there are several
// regions) to the LockNamespaces and LockClasses it admits.
type RegionPeers interface {
	Peers
	// Homes returns every LockNamespace of the repository, and the
	// namespaces that have a LockClass. An error denies the review.
	Homes(ctx context.Context) (homes []class.Home, withClasses []string, err error)
}

// Option configures a Handler.
type Option func(*Handler)

// WithPeers makes the handler apply the key-ownership rule to each LockClass
// it admits, against the other classes peers returns. Without it, key
// ownership across classes is not checked, and every LockClass review
// carries a warning saying so ([WarningOwnershipNotChecked]).
func WithPeers(peers Peers) Option {
	return func(h *Handler) { h.peers = peers }
}

// WarningOwnershipNotChecked is the warning every LockClass review carries
// when the handler has no [Peers].
const WarningOwnershipNotChecked = class.RuleKeyOwnership + ": not checked: this webhook does not see the other LockClasses, " +
	"so a prefix another class owns is not refused here (class-lint check refuses it in CI); " +
	"run class-lint webhook with --classes DIR, a checkout of the class repository, to check it at admission"

// NewHandler returns a handler that checks waiver expiry against now
// (time.Now when nil) and logs each decision to log (discarded when nil).
func NewHandler(now func() time.Time, log *slog.Logger, opts ...Option) *Handler {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{now: now, log: log}
	for _, o := range opts {
		o(h)
	}
	return h
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
	resp := h.Validate(r.Context(), req)
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
// class and, for a LockClass when the handler has [Peers], no key-ownership
// rule against the other classes of its namespace; or, on UPDATE, when the
// object is unchanged apart from metadata and status (so that labels,
// annotations and finalizers can still be changed on an object whose waiver
// has since lapsed): the problems are then returned as warnings. A denial's
// message lists every problem as "rule-id: field: message", joined with
// "; ".
func (h *Handler) Validate(ctx context.Context, req *Request) *Response {
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
	same := req.Operation == OperationUpdate && unchanged(doc, req.OldObject, req.Namespace)
	for _, o := range f.Objects {
		switch {
		case o.Class == nil:
		case h.peers == nil:
			resp.Warnings = append(resp.Warnings, WarningOwnershipNotChecked)
		case !same:
			// An object unchanged but for metadata claims nothing new.
			e, w := h.ownership(ctx, o.Class)
			errs, resp.Warnings = append(errs, e...), append(resp.Warnings, w...)
		}
		if !same && (o.Class != nil || o.Home != nil) {
			errs = append(errs, h.regions(ctx, o)...)
		}
	}
	switch {
	case len(errs) == 0 && len(f.Objects) == 0:
		return deny(resp, "request.object: no LockClass, LockGrant, LockNamespace or PauseTestResult found")
	case len(errs) == 0:
		resp.Allowed = true
		return resp
	case same:
		for _, e := range errs {
			resp.Warnings = append(resp.Warnings, "existing object: "+e)
		}
		resp.Allowed = true
		return resp
	}
	return deny(resp, strings.Join(errs, "; "))
}

// ownership applies the key-ownership rule to c against the other classes
// of its namespace and returns the problems of c, worded for c: errors,
// and warnings for spec.nestedIn naming a class not there yet (admission
// sees one object at a time: a class must be able to name the class it is
// carved out of before that class exists, or neither could ever be
// created). Problems the other classes have among themselves, or that c
// causes on another class (a spec.nestedIn there that no longer fits c's
// keys), are left to class-lint check: refusing them here could leave no
// order in which a change can be applied.
func (h *Handler) ownership(ctx context.Context, c *class.Class) (errs, warns []string) {
	peers, err := h.peers.Classes(ctx, c.Namespace)
	if err != nil {
		return []string{fmt.Sprintf("%s: spec.keys: cannot read the other LockClasses of namespace %s to check that no other class owns these keys: %v "+
			"(the webhook fails closed; try again once they can be read)", class.RuleKeyOwnership, c.Namespace, err)}, nil
	}
	names := map[string]bool{}
	for _, p := range peers {
		if p != nil && p.Namespace == c.Namespace && p.Name != c.Name {
			names[p.Name] = true
		}
	}
	forward := map[string]bool{} // the fields of spec.nestedIn entries naming a class not there yet
	for k, n := range c.NestedIn {
		if n != c.Name && !names[n] {
			forward[fmt.Sprintf("spec.nestedIn[%d]", k)] = true
		}
	}
	for _, p := range class.CheckOwnershipOf(peers, c) {
		if forward[p.Field] {
			warns = append(warns, Message(p))
			continue
		}
		errs = append(errs, Message(p))
	}
	return errs, warns
}

// regions applies the namespace-region rule to a LockClass or a
// LockNamespace under review, when the peers see the repository's
// LockNamespaces (else it is left to class-lint check, like ownership).
func (h *Handler) regions(ctx context.Context, o class.Object) []string {
	rp, ok := h.peers.(RegionPeers)
	if !ok {
		return nil
	}
	homes, withClasses, err := rp.Homes(ctx)
	if err != nil {
		return []string{fmt.Sprintf("%s: cannot read the repository's LockNamespaces to check that every namespace has one region: %v "+
			"(the webhook fails closed; try again once they can be read)", class.RuleNamespaceRegion, err)}
	}
	var ps []class.Problem
	if o.Home != nil {
		ps = class.CheckRegionsOf(*o.Home, homes, withClasses)
	} else {
		ps = class.CheckClassRegion(o.Class, homes)
	}
	var errs []string
	for _, p := range ps {
		errs = append(errs, Message(p))
	}
	return errs
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
