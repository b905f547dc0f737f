package class

import (
	"encoding/json"
	"fmt"
	"time"
)

// Kubernetes resources of the lock kinds (group locks.lockd.dev, version
// v1alpha1), by kind.
var Resources = map[string]string{
	KindLockClass:       "lockclasses",
	KindLockGrant:       "lockgrants",
	KindLockNamespace:   "locknamespaces",
	KindPauseTestResult: "pausetestresults",
}

// Group and Version are the API group and version of the lock kinds.
const (
	Group   = "locks.lockd.dev"
	Version = "v1alpha1"
)

// ObjectSource names an object read from the Kubernetes API where a file
// name would be: "kubernetes:<resource>/<namespace>/<name>".
func ObjectSource(kind, namespace, name string) string {
	return fmt.Sprintf("kubernetes:%s/%s/%s", Resources[kind], namespace, name)
}

// ParseObject parses one object read from the Kubernetes API (the content
// of an unstructured object) under the rules a class directory's documents
// follow. Only apiVersion, kind, metadata.name, metadata.namespace and spec
// are read: the API server's own metadata and the status are not the
// author's. The object is Valid when it breaks no rule; problems name the
// object by [ObjectSource].
func ParseObject(obj map[string]any) (Object, []Problem) {
	meta, _ := obj["metadata"].(map[string]any)
	ns, _ := meta["namespace"].(string)
	name, _ := meta["name"].(string)
	kind, _ := obj["kind"].(string)
	doc := map[string]any{
		"apiVersion": obj["apiVersion"],
		"kind":       kind,
		"metadata":   map[string]any{"name": name, "namespace": ns},
	}
	if spec, ok := obj["spec"]; ok {
		doc["spec"] = spec
	}
	data, err := json.Marshal(doc)
	source := ObjectSource(kind, ns, name)
	if err != nil {
		return Object{}, []Problem{{File: source, Rule: err.Error(), ID: RuleSchema}}
	}
	f := Parse(source, data, ns, time.Time{})
	if len(f.Objects) != 1 {
		return Object{}, f.Problems
	}
	return f.Objects[0], f.Problems
}

// ConditionFenced is the type of the condition the class controller
// writes on every LockClass.
const ConditionFenced = "Fenced"

// ClassStatus is a LockClass's status, written by the class controller
// (class-lint controller) and read by lockd: the one contract between them.
// Its JSON is the CRD's status.
type ClassStatus struct {
	// ObservedGeneration is the metadata.generation of the spec the
	// status was computed for.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Fenced is true when a current PauseTestResult proves the class
	// fenced; lockd serves it fenced only then, and only until FencedUntil.
	Fenced bool `json:"fenced"`
	// FencedUntil is when that result stops counting (RFC 3339).
	FencedUntil string `json:"fencedUntil,omitempty"`
	// PauseTestResult names the result, "namespace/name".
	PauseTestResult string `json:"pauseTestResult,omitempty"`
	// Conditions hold one condition of type Fenced, with the reason (a
	// Reason constant) and a message; the same JSON as metav1.Condition.
	Conditions []Condition `json:"conditions,omitempty"`
}

// Condition is metav1.Condition's JSON form.
type Condition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
	LastTransitionTime string `json:"lastTransitionTime"`
	Reason             string `json:"reason"`
	Message            string `json:"message"`
}

// StatusFor is the status that says p, for the spec at generation. The
// condition's LastTransitionTime is left for the writer to set.
func StatusFor(p FenceProof, generation int64) ClassStatus {
	st := ClassStatus{ObservedGeneration: generation, Fenced: p.Proven, PauseTestResult: p.Result}
	status := "False"
	if p.Proven {
		status = "True"
		st.FencedUntil = p.Until.UTC().Format(time.RFC3339)
	}
	st.Conditions = []Condition{{Type: ConditionFenced, Status: status, ObservedGeneration: generation, Reason: p.Reason, Message: p.Message}}
	return st
}

// ClassStatusOf reads the status of a LockClass object (the content of an
// unstructured object); ok is false when it has none, or one that does not
// decode.
func ClassStatusOf(obj map[string]any) (st ClassStatus, ok bool) {
	raw, found := obj["status"]
	if !found || raw == nil {
		return ClassStatus{}, false
	}
	data, err := json.Marshal(raw)
	if err != nil || json.Unmarshal(data, &st) != nil {
		return ClassStatus{}, false
	}
	return st, true
}

// Proof is the fence proof st says for a class whose spec is at
// generation. A status computed for another generation proves nothing
// (ReasonStatusStale): the spec may name another resource now.
func (st ClassStatus) Proof(generation int64) FenceProof {
	if st.ObservedGeneration != generation {
		return FenceProof{Reason: ReasonStatusStale, Message: fmt.Sprintf(
			"the class controller wrote this class's status for generation %d, and the class is at %d: it is served as advisory until the controller catches up",
			st.ObservedGeneration, generation)}
	}
	var cond *Condition
	for i := range st.Conditions {
		if st.Conditions[i].Type == ConditionFenced {
			cond = &st.Conditions[i]
		}
	}
	if cond == nil {
		return FenceProof{Reason: ReasonNoStatus, Message: "the class's status has no Fenced condition"}
	}
	p := FenceProof{Reason: cond.Reason, Message: cond.Message, Result: st.PauseTestResult}
	if !st.Fenced || cond.Status != "True" {
		return p
	}
	until, err := time.Parse(time.RFC3339, st.FencedUntil)
	if err != nil {
		return FenceProof{Reason: ReasonNoStatus, Result: st.PauseTestResult,
			Message: fmt.Sprintf("the class's status.fencedUntil %q is not an RFC 3339 time", st.FencedUntil)}
	}
	p.Proven, p.Until = true, until
	return p
}
