package kubetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// establishTimeout bounds the wait for the applied CRDs to be Established.
const establishTimeout = 30 * time.Second

// fieldManager names this package as the owner of the fields it applies.
const fieldManager = "kubetest"

// crdResource is the resource of CustomResourceDefinitions, for the dynamic
// client.
var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// CRDDir returns the path of the repository's deploy/crds, the
// CustomResourceDefinitions lockd ships. It fails the test if it cannot
// find it.
func CRDDir(t testing.TB) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "deploy", "crds")
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	return dir
}

// ApplyCRDs creates, or updates when they exist, the
// CustomResourceDefinitions of every .yaml and .yml file in dir (server-side
// apply, field manager "kubetest", taking over fields others set), then
// waits until each is Established (at most 30 s). Every document in the
// files must be a CustomResourceDefinition: anything else fails the test,
// as does a refused definition.
func (s *APIServer) ApplyCRDs(t testing.TB, dir string) {
	t.Helper()
	if err := s.applyCRDs(t.Context(), dir); err != nil {
		t.Fatal(err)
	}
}

func (s *APIServer) applyCRDs(ctx context.Context, dir string) error {
	crds, err := readCRDs(dir)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(s.RESTConfig())
	if err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	client := dyn.Resource(crdResource)
	force := true
	for _, crd := range crds {
		if _, err := client.Apply(ctx, crd.GetName(), crd, metav1.ApplyOptions{FieldManager: fieldManager, Force: force}); err != nil {
			return fmt.Errorf("kubetest: apply CRD %s: %w", crd.GetName(), err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, establishTimeout)
	defer cancel()
	for _, crd := range crds {
		if err := waitEstablished(ctx, client, crd.GetName()); err != nil {
			return err
		}
	}
	return nil
}

// readCRDs decodes every document of the YAML files in dir, in file name
// order, and refuses any that is not a CustomResourceDefinition.
func readCRDs(dir string) ([]*unstructured.Unstructured, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("kubetest: CRDs: %w", err)
	}
	var crds []*unstructured.Unstructured
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if e.IsDir() || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		docs, err := readYAMLDocs(path)
		if err != nil {
			return nil, err
		}
		for _, obj := range docs {
			gvk := obj.GroupVersionKind()
			if gvk.Group != crdResource.Group || gvk.Kind != "CustomResourceDefinition" {
				return nil, fmt.Errorf("kubetest: %s: %s %q is not a CustomResourceDefinition", path, gvk.Kind, obj.GetName())
			}
			crds = append(crds, obj)
		}
	}
	if len(crds) == 0 {
		return nil, fmt.Errorf("kubetest: no CustomResourceDefinition in %s", dir)
	}
	return crds, nil
}

// readYAMLDocs decodes each non-empty document of a YAML file.
func readYAMLDocs(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 64<<10)
	var docs []*unstructured.Unstructured
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("kubetest: %s: %w", path, err)
		}
		if len(m) == 0 { // an empty document (a comment, or "---" at the end)
			continue
		}
		docs = append(docs, &unstructured.Unstructured{Object: m})
	}
}

// waitEstablished polls the CRD until its Established condition is True.
func waitEstablished(ctx context.Context, client dynamic.NamespaceableResourceInterface, name string) error {
	for {
		obj, err := client.Get(ctx, name, metav1.GetOptions{})
		if err == nil && conditionTrue(obj, "Established") {
			return nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("conditions %v", conditions(obj))
			}
			return fmt.Errorf("kubetest: CRD %s not Established: %w (last: %w)", name, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// conditionTrue reports whether obj's status.conditions has condType with
// status "True".
func conditionTrue(obj *unstructured.Unstructured, condType string) bool {
	return slices.ContainsFunc(conditions(obj), func(c map[string]any) bool {
		return c["type"] == condType && c["status"] == "True"
	})
}

// conditions returns obj's status.conditions, nil when it has none.
func conditions(obj *unstructured.Unstructured) []map[string]any {
	list, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	var out []map[string]any
	for _, c := range list {
		if m, ok := c.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}
