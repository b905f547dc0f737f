package admission

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/pkg/lockkey"
)

const deployDir = "../../deploy"

// notManifests are the YAML files under deploy/ that are not Kubernetes
// manifests, and what they are instead. Each has its own check.
var notManifests = map[string]string{
	"otel-collector.yaml":                    "an OpenTelemetry Collector config, checked by deploy/otelcol-check",
	"envoy/envoy.yaml":                       "an Envoy bootstrap, generated and checked by deploy/envoy",
	"prometheus/lockd-alerts.yaml":           "Prometheus alert rules, checked by deploy/prometheus (promtool)",
	"prometheus/lockd-alerts_test.yaml":      "promtool unit tests of the alert rules",
	"prometheus/lockd-alerts_long_test.yaml": "promtool unit tests of the alert rules (day-long cases)",
	"prometheus/alertmanager.yaml":           "an example Alertmanager config, checked by deploy/prometheus (amtool)",
}

// specFields are the spec fields internal/class reads, by kind: the json tags of
// classDoc, grantDoc and pauseTestDoc in internal/class/parse.go. A field added
// there must be added here and to the CRD; TestCRDSchemas checks the CRDs
// declare exactly these, and that internal/class accepts every one of them.
var specFields = map[string][]string{
	class.KindLockClass: {"purpose", "enforcement", "ttl", "tier", "onQuorumLoss", "fairness",
		"resource", "resourceSchemaVersion", "riskOwner", "waiverExpires", "keys", "nestedIn"},
	class.KindLockGrant:       {"spiffeID", "prefixes", "sharedWith"},
	class.KindPauseTestResult: {"class", "resource", "resourceSchemaVersion", "outcome", "ranAt", "expires", "tokens", "tokens.first", "tokens.second"},
	class.KindLockNamespace:   {"region"},
}

// printerColumns are the columns kubectl get shows, by kind.
var printerColumns = map[string][]string{
	class.KindLockClass:       {"Purpose", "Enforcement", "Fenced", "Reason", "TTL", "Tier", "Resource", "Waiver", "Age"},
	class.KindLockGrant:       {"SPIFFE ID", "Prefixes", "Age"},
	class.KindPauseTestResult: {"Class", "Resource", "Schema", "Ran", "Expires", "Age"},
	class.KindLockNamespace:   {"Region", "Age"},
}

// The parts of a CustomResourceDefinition the tests read.
type (
	crd struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Group string `json:"group"`
			Scope string `json:"scope"`
			Names struct {
				Kind   string `json:"kind"`
				Plural string `json:"plural"`
			} `json:"names"`
			Versions []struct {
				Name    string `json:"name"`
				Served  bool   `json:"served"`
				Storage bool   `json:"storage"`
				Columns []struct {
					Name     string `json:"name"`
					Type     string `json:"type"`
					JSONPath string `json:"jsonPath"`
				} `json:"additionalPrinterColumns"`
				Schema struct {
					OpenAPIV3Schema *schemaProps `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	schemaProps struct {
		Type        string                  `json:"type"`
		Properties  map[string]*schemaProps `json:"properties"`
		Items       *schemaProps            `json:"items"`
		Required    []string                `json:"required"`
		MinItems    *int                    `json:"minItems"`
		MaxLength   *int                    `json:"maxLength"`
		Pattern     string                  `json:"pattern"`
		ListType    string                  `json:"x-kubernetes-list-type"`
		Validations []struct {
			Rule    string `json:"rule"`
			Message string `json:"message"`
		} `json:"x-kubernetes-validations"`
	}
)

// manifests returns every YAML document under deploy/, by file, but for
// notManifests.
func manifests(t *testing.T) map[string][]string {
	t.Helper()
	out := make(map[string][]string)
	err := filepath.WalkDir(deployDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".yaml" {
			return err
		}
		if rel, err := filepath.Rel(deployDir, path); err != nil || notManifests[filepath.ToSlash(rel)] != "" {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out[path] = append(out[path], strings.Split(string(data), "\n---\n")...)
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, out)
	return out
}

// crds returns the CRDs under deploy/, by kind.
func crds(t *testing.T) map[string]*crd {
	t.Helper()
	out := make(map[string]*crd)
	for path, docs := range manifests(t) {
		for _, doc := range docs {
			var c crd
			require.NoError(t, yaml.Unmarshal([]byte(doc), &c), path)
			if c.Kind != "CustomResourceDefinition" {
				continue
			}
			require.NotContains(t, out, c.Spec.Names.Kind, "%s: a second CRD for the kind", path)
			out[c.Spec.Names.Kind] = &c
		}
	}
	return out
}

// paths lists the property paths under s ("tokens", "tokens.first"); a
// list's items share the list's path ("conditions.type").
func (s *schemaProps) paths(prefix string) []string {
	var out []string
	for name, p := range s.Properties {
		out = append(out, prefix+name)
		out = append(out, p.paths(prefix+name+".")...)
	}
	if s.Items != nil {
		out = append(out, s.Items.paths(prefix)...)
	}
	sort.Strings(out)
	return out
}

// sample returns a value of s's type with every property set.
func (s *schemaProps) sample() any {
	switch s.Type {
	case "object":
		m := make(map[string]any)
		for name, p := range s.Properties {
			m[name] = p.sample()
		}
		return m
	case "array":
		return []any{s.Items.sample()}
	default:
		return "x"
	}
}

func (c *crd) spec(t *testing.T) *schemaProps {
	t.Helper()
	root := c.Spec.Versions[0].Schema.OpenAPIV3Schema
	require.NotNil(t, root, "%s: no openAPIV3Schema", c.Metadata.Name)
	spec := root.Properties["spec"]
	require.NotNil(t, spec, "%s: no spec in the schema", c.Metadata.Name)
	return spec
}

// TestCRDManifests checks every manifest under deploy/ parses and names its
// kind, and that the kustomization lists every manifest.
func TestCRDManifests(t *testing.T) {
	files := manifests(t)
	var listed []string
	for path, docs := range files {
		for i, doc := range docs {
			var obj struct {
				APIVersion string         `json:"apiVersion"`
				Kind       string         `json:"kind"`
				Resources  []string       `json:"resources"`
				Metadata   map[string]any `json:"metadata"`
			}
			require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &map[string]any{}), "%s document %d", path, i)
			require.NoError(t, yaml.Unmarshal([]byte(doc), &obj), "%s document %d", path, i)
			require.NotEmpty(t, obj.APIVersion, "%s document %d: no apiVersion", path, i)
			require.NotEmpty(t, obj.Kind, "%s document %d: no kind", path, i)
			if obj.Kind == "Kustomization" {
				listed = obj.Resources
			}
		}
	}
	var want []string
	for path := range files {
		rel, err := filepath.Rel(deployDir, path)
		require.NoError(t, err)
		if rel != "kustomization.yaml" {
			want = append(want, filepath.ToSlash(rel))
		}
	}
	require.ElementsMatch(t, want, listed, "deploy/kustomization.yaml must list every manifest under deploy/")
}

// TestCRDSchemas checks the CRDs: one per kind of internal/class, namespaced in
// the class API group and version, with the printer columns above, and a
// spec schema that declares exactly the fields internal/class reads, all of
// which internal/class accepts with the declared types.
func TestCRDSchemas(t *testing.T) {
	group, version, _ := strings.Cut(class.APIVersion, "/")
	all := crds(t)
	require.ElementsMatch(t, Kinds, slices.Collect(func(yield func(string) bool) {
		for k := range all {
			if !yield(k) {
				return
			}
		}
	}))
	for kind, c := range all {
		t.Run(kind, func(t *testing.T) {
			require.Equal(t, "apiextensions.k8s.io/v1", c.APIVersion)
			require.Equal(t, group, c.Spec.Group)
			require.Equal(t, c.Spec.Names.Plural+"."+group, c.Metadata.Name)
			require.Equal(t, "Namespaced", c.Spec.Scope)
			require.Len(t, c.Spec.Versions, 1)
			v := c.Spec.Versions[0]
			require.Equal(t, version, v.Name)
			require.True(t, v.Served && v.Storage)

			spec := c.spec(t)
			require.Equal(t, sortedCopy(specFields[kind]), spec.paths(""), "spec properties of the %s CRD", kind)

			var cols []string
			for _, col := range v.Columns {
				cols = append(cols, col.Name)
				if field, ok := strings.CutPrefix(col.JSONPath, ".status."); ok {
					// Written by the class controller: a field of the
					// status schema (filters such as [?(@.type=="Fenced")]
					// dropped).
					field = statusFilter.ReplaceAllString(field, "")
					require.True(t, declared(c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"], field),
						"column %s shows an undeclared status field %s", col.Name, field)
					continue
				}
				field, ok := strings.CutPrefix(col.JSONPath, ".spec.")
				if !ok {
					require.Equal(t, ".metadata.creationTimestamp", col.JSONPath, "column %s", col.Name)
					continue
				}
				require.Contains(t, specFields[kind], field, "column %s shows an undeclared field", col.Name)
			}
			require.Equal(t, printerColumns[kind], cols)

			// An object with every declared field set parses without an
			// unknown field or type error.
			obj := map[string]any{
				"apiVersion": class.APIVersion, "kind": kind,
				"metadata": map[string]any{"name": "sample", "namespace": "demo"},
				"spec":     spec.sample(),
			}
			js, err := yaml.Marshal(obj)
			require.NoError(t, err)
			for _, p := range class.Parse("sample.yaml", js, "", testNow).Problems {
				require.NotEqual(t, "unknown field", p.Rule, "internal/class does not accept %s, which the CRD declares", p.Field)
				require.NotContains(t, p.Rule, "must be a list", p.Field)
				require.NotContains(t, p.Rule, "must be a string", p.Field)
				require.NotContains(t, p.Rule, "must be a mapping", p.Field)
			}
			// The control: an undeclared field is reported.
			obj["spec"].(map[string]any)["undeclared"] = "x"
			js, err = yaml.Marshal(obj)
			require.NoError(t, err)
			require.True(t, slices.ContainsFunc(class.Parse("sample.yaml", js, "", testNow).Problems,
				func(p class.Problem) bool { return p.Field == "spec.undeclared" && p.Rule == "unknown field" }))
		})
	}
}

// statusFilter matches a JSONPath filter of a printer column.
var statusFilter = regexp.MustCompile(`\[\?\(.*?\)\]`)

// TestCRDClassStatus checks the LockClass status schema is class.ClassStatus:
// exactly its JSON fields, metav1.Condition's required fields, and a status
// the controller writes (class.StatusFor) declares nothing else.
func TestCRDClassStatus(t *testing.T) {
	c := crds(t)[class.KindLockClass]
	require.NotNil(t, c)
	status := c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"]
	require.NotNil(t, status, "no status schema")
	require.Equal(t, "object", status.Type)
	require.Equal(t, sortedCopy(jsonPaths(reflect.TypeFor[class.ClassStatus](), "")), status.paths(""),
		"the status schema must declare exactly class.ClassStatus's fields")
	conds := status.Properties["conditions"]
	require.Equal(t, "array", conds.Type)
	require.Equal(t, "map", conds.ListType, "one condition per type")
	require.ElementsMatch(t, []string{"type", "status", "lastTransitionTime", "reason", "message"}, conds.Items.Required,
		"metav1.Condition's required fields")
	for _, p := range []class.FenceProof{
		{Proven: true, Until: testNow.Add(time.Hour), Result: "demo/r", Reason: class.ReasonPauseTestCurrent, Message: "ok"},
		{Reason: class.ReasonNoPauseTest, Message: "none"},
	} {
		st := class.StatusFor(p, 3)
		st.Conditions[0].LastTransitionTime = testNow.Format(time.RFC3339)
		js, err := json.Marshal(st)
		require.NoError(t, err)
		var obj map[string]any
		require.NoError(t, json.Unmarshal(js, &obj))
		for _, path := range objectPaths(obj, "") {
			require.True(t, declared(status, path), "status.%s is not declared", path)
		}
		reason := regexp.MustCompile(conds.Items.Properties["reason"].Pattern)
		require.Regexp(t, reason, p.Reason)
	}
	for _, r := range []string{class.ReasonPauseTestCurrent, class.ReasonNotDeclaredFenced, class.ReasonNoResource, class.ReasonNoPauseTest,
		class.ReasonResourceMismatch, class.ReasonSchemaVersionChanged, class.ReasonPauseTestExpired, class.ReasonPauseTestInFuture, class.ReasonInvalid} {
		require.Regexp(t, regexp.MustCompile(conds.Items.Properties["reason"].Pattern), r)
	}
}

// jsonPaths lists the JSON field paths of struct type typ, as paths does.
func jsonPaths(typ reflect.Type, prefix string) []string {
	var out []string
	for f := range typ.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		out = append(out, prefix+name)
		ft := f.Type
		for ft.Kind() == reflect.Slice || ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct {
			out = append(out, jsonPaths(ft, prefix+name+".")...)
		}
	}
	return out
}

// dnsLabelRule is the CEL rule that an item or field is a DNS label, as
// metadata.name's rule writes it; re is its regular expression.
var dnsLabelRule = regexp.MustCompile(`^(self(?:\.metadata\.name)?)\.matches\('([^']+)'\)$`)

// TestCRDClassKeys checks the schema of spec.keys and spec.nestedIn against
// what internal/class accepts: keys are required, a non-empty set of
// prefixes no longer than a key may be, each ending in "/"; nestedIn is a
// set of DNS labels, by the same expression as metadata.name's, which
// agrees with lockkey.IsDNSLabel. nestedIn's items carry it as an OpenAPI
// pattern: a CEL matches() there is over the API server's cost budget
// (internal/kubetest applies the CRDs to a real one).
func TestCRDClassKeys(t *testing.T) {
	c := crds(t)[class.KindLockClass]
	require.NotNil(t, c)
	root := c.Spec.Versions[0].Schema.OpenAPIV3Schema
	spec := c.spec(t)
	require.Contains(t, spec.Required, "keys", "a class without spec.keys owns no key (class-keys)")
	require.NotContains(t, spec.Required, "nestedIn")

	keys := spec.Properties["keys"]
	require.Equal(t, "array", keys.Type)
	require.NotNil(t, keys.MinItems)
	require.Equal(t, 1, *keys.MinItems)
	require.Equal(t, "set", keys.ListType, "a prefix listed twice is refused (class-keys)")
	require.Equal(t, "string", keys.Items.Type)
	require.NotNil(t, keys.Items.MaxLength)
	require.Equal(t, lockkey.MaxLen, *keys.Items.MaxLength)
	require.Len(t, keys.Items.Validations, 1)
	require.Equal(t, "self.endsWith('/')", keys.Items.Validations[0].Rule)

	nested := spec.Properties["nestedIn"]
	require.Equal(t, "array", nested.Type)
	require.Nil(t, nested.MinItems)
	require.Equal(t, "set", nested.ListType)
	require.Equal(t, "string", nested.Items.Type)
	require.NotNil(t, nested.Items.MaxLength)
	require.Equal(t, 63, *nested.Items.MaxLength)
	require.Empty(t, nested.Items.Validations, "nestedIn items: a CEL rule here is over the API server's cost budget")
	require.NotEmpty(t, nested.Items.Pattern, "nestedIn items: no DNS-label pattern")
	var name []string
	for _, v := range root.Validations {
		if m := dnsLabelRule.FindStringSubmatch(v.Rule); m != nil && m[1] == "self.metadata.name" {
			name = m
		}
	}
	require.NotNil(t, name, "no metadata.name rule at the root")
	require.Equal(t, name[2], nested.Items.Pattern, "nestedIn names classes: the same expression as metadata.name")
	// CEL's matches and OpenAPI's pattern are RE2, as Go's regexp: the
	// expression accepts exactly what lockkey.IsDNSLabel does.
	re := regexp.MustCompile(nested.Items.Pattern)
	for _, s := range []string{"a", "ledger-writes", "0", strings.Repeat("a", 63), strings.Repeat("a", 64), "", "-a", "a-", "A", "a_b", "a.b", "ledger writes"} {
		require.Equal(t, lockkey.IsDNSLabel(s), re.MatchString(s), "%q", s)
	}
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

// TestCRDExamples checks every object of the example class repository
// declares only fields its CRD has.
func TestCRDExamples(t *testing.T) {
	all := crds(t)
	files, err := filepath.Glob("../../classes/*/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	n := 0
	for _, path := range files {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		for _, doc := range strings.Split(string(data), "\n---\n") {
			var obj map[string]any
			require.NoError(t, yaml.Unmarshal([]byte(doc), &obj), path)
			kind, _ := obj["kind"].(string)
			c, ok := all[kind]
			require.True(t, ok, "%s: no CRD for kind %q", path, kind)
			root := c.Spec.Versions[0].Schema.OpenAPIV3Schema
			for _, p := range objectPaths(obj, "") {
				if strings.HasPrefix(p, "metadata.") {
					continue
				}
				require.True(t, declared(root, p), "%s: %s %s is not declared in the CRD", path, kind, p)
			}
			n++
		}
	}
	require.GreaterOrEqual(t, n, 8)
}

// objectPaths lists the key paths of v; list elements share their list's path.
func objectPaths(v any, prefix string) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			out = append(out, prefix+k)
			out = append(out, objectPaths(e, prefix+k+".")...)
		}
	case []any:
		for _, e := range v {
			out = append(out, objectPaths(e, prefix)...)
		}
	}
	return out
}

func declared(s *schemaProps, path string) bool {
	for seg := range strings.SplitSeq(path, ".") {
		for s.Items != nil {
			s = s.Items
		}
		next, ok := s.Properties[seg]
		if !ok {
			return false
		}
		s = next
	}
	return true
}

// TestAdmissionManifests checks the webhook configuration sends CREATE and
// UPDATE of exactly the three kinds to /validate, failing closed.
func TestAdmissionManifests(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(deployDir, "webhook", "validatingwebhookconfiguration.yaml"))
	require.NoError(t, err)
	var vwc struct {
		Kind     string `json:"kind"`
		Webhooks []struct {
			AdmissionReviewVersions []string `json:"admissionReviewVersions"`
			SideEffects             string   `json:"sideEffects"`
			FailurePolicy           string   `json:"failurePolicy"`
			ClientConfig            struct {
				Service struct {
					Name, Namespace, Path string
				} `json:"service"`
			} `json:"clientConfig"`
			Rules []struct {
				APIGroups   []string `json:"apiGroups"`
				APIVersions []string `json:"apiVersions"`
				Operations  []string `json:"operations"`
				Resources   []string `json:"resources"`
			} `json:"rules"`
		} `json:"webhooks"`
	}
	require.NoError(t, yaml.Unmarshal(data, &vwc))
	require.Equal(t, "ValidatingWebhookConfiguration", vwc.Kind)
	require.Len(t, vwc.Webhooks, 1)
	w := vwc.Webhooks[0]
	require.Equal(t, []string{"v1"}, w.AdmissionReviewVersions)
	require.Equal(t, "None", w.SideEffects)
	require.Equal(t, "Fail", w.FailurePolicy)
	require.Equal(t, "/validate", w.ClientConfig.Service.Path)
	require.Len(t, w.Rules, 1)
	group, version, _ := strings.Cut(class.APIVersion, "/")
	require.Equal(t, []string{group}, w.Rules[0].APIGroups)
	require.Equal(t, []string{version}, w.Rules[0].APIVersions)
	require.Equal(t, []string{"CREATE", "UPDATE"}, w.Rules[0].Operations)
	var plurals []string
	for _, c := range crds(t) {
		plurals = append(plurals, c.Spec.Names.Plural)
	}
	require.ElementsMatch(t, plurals, w.Rules[0].Resources)
}
