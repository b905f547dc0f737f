package class

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCheckRegions(t *testing.T) {
	home := func(ns, region string, line int) Home {
		return Home{Namespace: ns, Name: "home", Region: region, Source: ns + "/namespace.yaml", Line: line}
	}
	classes := []*Class{owning("ledger", 1, []string{"payments/ledger/"}),
		{Namespace: "billing", Name: "runs", Keys: []string{"billing/runs/"}, Source: "billing/classes.yaml", Line: 1}}
	tests := []struct {
		name  string
		homes []Home
		want  []string // "object field: substring" per problem, in order
	}{
		{"no regions: every lockd serves every namespace", nil, nil},
		{"one region: a namespace without a home is served everywhere", []Home{home("payments", "eu-west", 1)}, nil},
		{"two regions, every namespace homed", []Home{home("payments", "eu-west", 1), home("billing", "us-east", 1)}, nil},
		{"two regions, a namespace with classes but no home", []Home{home("payments", "eu-west", 1), home("search", "us-east", 1)},
			[]string{"LockClass billing/runs metadata.namespace: namespace billing has classes but no region: with namespaces homed to eu-west, us-east, every namespace needs a LockNamespace"}},
		{"a namespace homed twice", []Home{home("payments", "eu-west", 1), {Namespace: "payments", Name: "again", Region: "us-east", Source: "payments/more.yaml", Line: 3}},
			[]string{"LockNamespace payments/again metadata.namespace: namespace payments is homed already, by LockNamespace home (payments/namespace.yaml:1): a namespace has one region"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, p := range CheckRegions(classes, tt.homes) {
				require.Equal(t, RuleNamespaceRegion, p.ID)
				got = append(got, p.Object+" "+p.Field+": "+p.Rule)
			}
			require.Len(t, got, len(tt.want), "%q", got)
			for i, w := range tt.want {
				require.Contains(t, got[i], w)
			}
		})
	}
}

func TestLoadDirHomesNamespaces(t *testing.T) {
	dir := t.TempDir()
	write := func(ns, file, body string) {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, ns), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, ns, file), []byte(body), 0o644))
	}
	class := func(ns string) string {
		return `apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: std, namespace: ` + ns + `}
spec: {keys: ["` + ns + `/"], purpose: efficiency, enforcement: fenced, tier: entity}
`
	}
	home := func(ns, region string) string {
		return `apiVersion: locks.lockd.dev/v1alpha1
kind: LockNamespace
metadata: {name: home, namespace: ` + ns + `}
spec: {region: ` + region + `}
`
	}
	write("payments", "classes.yaml", class("payments"))
	write("payments", "namespace.yaml", home("payments", "eu-west"))
	write("billing", "classes.yaml", class("billing"))
	write("billing", "namespace.yaml", home("billing", "us-east"))
	set, err := LoadDir(dir, time.Time{})
	require.NoError(t, err)
	region, ok := set.Home("payments")
	require.True(t, ok)
	require.Equal(t, "eu-west", region)
	require.Equal(t, []string{"eu-west", "us-east"}, set.Regions())

	write("billing", "namespace.yaml", home("billing", "US_East"))
	_, err = LoadDir(dir, time.Time{})
	require.ErrorContains(t, err, `spec.region: must be a DNS label`)

	write("billing", "namespace.yaml", "apiVersion: locks.lockd.dev/v1alpha1\nkind: LockNamespace\nmetadata: {name: home, namespace: billing}\nspec: {}\n")
	_, err = LoadDir(dir, time.Time{})
	require.ErrorContains(t, err, `LockNamespace billing/home: spec.region: is required`)
}
