package admission

import "encoding/json"

// The AdmissionReview wire format of admission.k8s.io/v1, as far as this
// webhook reads and writes it. Fields the webhook does not use (userInfo,
// options, dryRun, …) are left out: they are ignored when decoding.

// Review is an AdmissionReview: the API server sends one with Request set
// and expects one back with Response set.
type Review struct {
	// APIVersion is ReviewAPIVersion.
	APIVersion string `json:"apiVersion"`
	// Kind is ReviewKind.
	Kind string `json:"kind"`
	// Request is the object under review; set by the API server.
	Request *Request `json:"request,omitempty"`
	// Response is the decision; set by the webhook.
	Response *Response `json:"response,omitempty"`
}

// AdmissionReview identity of the only version served.
const (
	// ReviewAPIVersion is the apiVersion of the AdmissionReview objects
	// accepted and returned: the webhook configuration must list v1 in its
	// admissionReviewVersions.
	ReviewAPIVersion = "admission.k8s.io/v1"
	// ReviewKind is the kind of an AdmissionReview.
	ReviewKind = "AdmissionReview"
)

// Operation is the operation of a request under review.
type Operation string

// Operations.
const (
	// OperationCreate creates an object.
	OperationCreate Operation = "CREATE"
	// OperationUpdate replaces an object; Request.OldObject holds the
	// stored one.
	OperationUpdate Operation = "UPDATE"
	// OperationDelete deletes an object.
	OperationDelete Operation = "DELETE"
	// OperationConnect connects to a subresource (not used by the lock
	// kinds).
	OperationConnect Operation = "CONNECT"
)

// GroupVersionKind names a kind, as in a request's kind field.
type GroupVersionKind struct {
	// Group is the API group, empty for the core group.
	Group string `json:"group"`
	// Version is the API version within the group.
	Version string `json:"version"`
	// Kind is the kind, e.g. LockClass.
	Kind string `json:"kind"`
}

// Request is an AdmissionRequest.
type Request struct {
	// UID identifies this request; the response must echo it.
	UID string `json:"uid"`
	// Kind is the kind of Object.
	Kind GroupVersionKind `json:"kind"`
	// SubResource is the subresource written to, if any (e.g. "status").
	SubResource string `json:"subResource,omitempty"`
	// Name is the object's name; it may be empty on CREATE when the
	// client set only generateName.
	Name string `json:"name,omitempty"`
	// Namespace is the object's Kubernetes namespace.
	Namespace string `json:"namespace,omitempty"`
	// Operation is the operation under review.
	Operation Operation `json:"operation"`
	// Object is the new object, as JSON; absent on DELETE.
	Object json.RawMessage `json:"object,omitempty"`
	// OldObject is the stored object, as JSON, on UPDATE and DELETE.
	OldObject json.RawMessage `json:"oldObject,omitempty"`
}

// Response is an AdmissionResponse.
type Response struct {
	// UID is the UID of the request answered.
	UID string `json:"uid"`
	// Allowed tells whether the request may go on.
	Allowed bool `json:"allowed"`
	// Result says why a request was denied; the API server shows
	// Result.Message to the client.
	Result *Status `json:"status,omitempty"`
	// Warnings are shown to the client (kubectl prints them as
	// "Warning: …") whether or not the request is allowed.
	Warnings []string `json:"warnings,omitempty"`
}

// Status is the part of a metav1.Status that a denial carries.
type Status struct {
	// Status is "Failure" on a denial.
	Status string `json:"status,omitempty"`
	// Message is shown to the client, after "admission webhook … denied
	// the request: ".
	Message string `json:"message,omitempty"`
	// Reason is a machine-readable reason, e.g. "Forbidden".
	Reason string `json:"reason,omitempty"`
	// Code is the HTTP status code the API server answers the client with.
	Code int32 `json:"code,omitempty"`
}
