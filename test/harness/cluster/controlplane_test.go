package cluster

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPrefixWriter_prefixesWholeLinesOnly(t *testing.T) {
	var out strings.Builder
	w := &prefixWriter{w: &out, prefix: "[etcd] "}
	for _, chunk := range []string{"first li", "ne\nsecond line\nthi", "rd"} {
		if n, err := w.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", chunk, n, err)
		}
	}
	want := "[etcd] first line\n[etcd] second line\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}
