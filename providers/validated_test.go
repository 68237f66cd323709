package providers

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/lbmodel"
)

// validL4 is a valid L4 model, as lbmodel's tests build it.
func validL4() *lbmodel.LoadBalancer {
	return &lbmodel.LoadBalancer{Name: "c1--shop-web", Service: "shop/web", Listeners: []lbmodel.Listener{
		{Port: 80, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: "c1--shop-web-TCP-80", Members: []lbmodel.Member{{IP: "198.18.0.11", Port: 61000, Enabled: true}}}},
		{Port: 53, Protocol: lbmodel.UDP, Pool: lbmodel.Pool{Name: "c1--shop-web-UDP-53", Members: []lbmodel.Member{{IP: "198.18.0.11", Port: 61001, Enabled: true}}}},
	}}
}

// recorder is a provider that records the calls it receives.
type recorder struct {
	ensured []*lbmodel.LoadBalancer
	deleted []string
	kinds   []lbmodel.Kind
}

func (r *recorder) Ensure(_ context.Context, lb *lbmodel.LoadBalancer) (Status, error) {
	r.ensured = append(r.ensured, lb)
	return Status{VIPs: []string{"203.0.113.1"}}, nil
}

func (r *recorder) Delete(_ context.Context, name string, kind lbmodel.Kind) error {
	r.deleted = append(r.deleted, name)
	r.kinds = append(r.kinds, kind)
	return nil
}

func (r *recorder) List(context.Context) ([]lbmodel.LoadBalancer, error) { return nil, nil }

func TestValidated_neverCallsTheProviderWithAnInvalidModel(t *testing.T) {
	rec := &recorder{}
	p := Validated(rec)
	if Validated(p) != p || Unwrap(p) != Provider(rec) {
		t.Fatal("Validated is not idempotent or does not unwrap")
	}
	noListeners := validL4()
	noListeners.Listeners = nil
	_, err := p.Ensure(context.Background(), noListeners)
	var invalid *lbmodel.InvalidModelError
	if !errors.As(err, &invalid) || !errors.Is(err, lbmodel.ErrNoListeners) || len(rec.ensured) != 0 {
		t.Fatalf("Ensure(no listeners) = %v, provider called %d times; want lbmodel.ErrNoListeners and no call", err, len(rec.ensured))
	}
	if err := p.Delete(context.Background(), "", lbmodel.L4); !errors.As(err, &invalid) || len(rec.deleted) != 0 {
		t.Errorf("Delete(\"\") = %v, calls %v", err, rec.deleted)
	}

	lb := validL4()
	st, err := p.Ensure(context.Background(), lb)
	if err != nil || len(st.VIPs) != 1 || len(rec.ensured) != 1 {
		t.Fatalf("Ensure(valid) = %v, %v; calls %d", st, err, len(rec.ensured))
	}
	if rec.ensured[0] == lb || rec.ensured[0].Listeners[0].Protocol != lbmodel.TCP {
		t.Errorf("the provider got the caller's model or an unsorted one: %+v", rec.ensured[0])
	}
}

func TestValidated_deleteChecksTheKindAndGivesItCanonical(t *testing.T) {
	rec := &recorder{}
	p := Validated(rec)
	var invalid *lbmodel.InvalidModelError
	if err := p.Delete(context.Background(), "c1--shop-web", "L3"); !errors.As(err, &invalid) || len(rec.deleted) != 0 {
		t.Errorf("Delete(kind L3) = %v, calls %v; want an lbmodel.InvalidModelError and no call", err, rec.deleted)
	}
	for _, k := range []lbmodel.Kind{"", lbmodel.L4, lbmodel.L7} {
		if err := p.Delete(context.Background(), "c1--shop-web", k); err != nil {
			t.Errorf("Delete(kind %q) = %v", k, err)
		}
	}
	if diff := cmp.Diff([]lbmodel.Kind{"", "", lbmodel.L7}, rec.kinds); diff != "" {
		t.Errorf("kinds the provider got (-want +got):\n%s", diff)
	}
}

// capable is a recorder that expresses source-address persistence only.
type capable struct{ recorder }

func (c *capable) PolicyCapabilities() lbmodel.PolicyCapabilities {
	return lbmodel.PolicyCapabilities{Provider: "capable", TCP: lbmodel.PolicySupport{Persistence: []lbmodel.PersistenceType{lbmodel.PersistSourceIP}}}
}

func TestValidated_givesTheProviderOnlyThePolicyItExpressesAndWarnsOfTheRest(t *testing.T) {
	lb := validL4()
	lb.Listeners[0].Pool.Policy = &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP, TimeoutSeconds: 60}, SlowStartSeconds: 5}
	c := &capable{}
	st, err := Validated(c).Ensure(context.Background(), lb)
	if err != nil {
		t.Fatal(err)
	}
	got := c.ensured[0].Listeners[0].Pool.Policy
	if got == nil || got.Persistence == nil || got.SlowStartSeconds != 0 {
		t.Errorf("the provider got policy %+v, want the persistence alone", got)
	}
	want := []string{"pool c1--shop-web-TCP-80: policy slowStartSeconds is not supported by the capable provider"}
	if diff := cmp.Diff(want, st.Warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}

	// A provider that expresses no policy gets none, and every field is named.
	rec := &recorder{}
	st, err = Validated(rec).Ensure(context.Background(), lb)
	if err != nil || rec.ensured[0].Listeners[0].Pool.Policy != nil || len(st.Warnings) != 2 {
		t.Errorf("no policy support: %v, policy %+v, warnings %v", err, rec.ensured[0].Listeners[0].Pool.Policy, st.Warnings)
	}
}
