package worker

import "testing"

func TestMismatchClassNamesAClassThatDoesNotOwnTheKey(t *testing.T) {
	base := Options{Keys: []string{"gate/k0", "gate/d/k1"}, Class: "gate/fenced",
		DurableKeys: []string{"gate/d/k1"}, DurableClass: "gate/fenced-durable"}
	withOpen := base
	withOpen.OpenKeys, withOpen.OpenClass = []string{"gate/o/0"}, "gate/cache"
	tests := []struct {
		name string
		o    Options
		key  string
		want string
	}{
		{"an open key: the fenced class", withOpen, "gate/o/0", "gate/fenced"},
		{"a fenced key, with open keys: the open class", withOpen, "gate/k0", "gate/cache"},
		{"a durable key, with open keys: the open class", withOpen, "gate/d/k1", "gate/cache"},
		{"a fenced key, without open keys: the durable class", base, "gate/k0", "gate/fenced-durable"},
		{"a durable key, without open keys: the fenced class, owning a shorter prefix", base, "gate/d/k1", "gate/fenced"},
		{"no other class: none", Options{Keys: []string{"gate/k0"}, Class: "gate/fenced"}, "gate/k0", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.o.mismatchClass(tt.key)
			if got != tt.want {
				t.Fatalf("mismatchClass(%q) = %q, want %q", tt.key, got, tt.want)
			}
			if got != "" && got == tt.o.classOf(tt.key) {
				t.Fatalf("mismatchClass(%q) = %q is the key's own class", tt.key, got)
			}
		})
	}
}
