package lbmodel

import (
	"reflect"
	"testing"

	"github.com/nodeportlocal/npl/internal/copytest"
)

// TestClone_sharesNothing fills every field of a load balancer, down to the
// last pointer, slice and map, clones it and checks that the copy shares
// none of them with the original: a field added to the model without its
// line in Clone fails here.
func TestClone_sharesNothing(t *testing.T) {
	var lb LoadBalancer
	copytest.Fill(&lb)
	clone := lb.Clone()
	if !reflect.DeepEqual(&lb, clone) {
		t.Fatalf("the clone differs from the original")
	}
	if s := copytest.Shared(&lb, clone, "LoadBalancer"); len(s) > 0 {
		t.Errorf("the clone shares %v", s)
	}
}
