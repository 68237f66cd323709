package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestServiceChangeMatters(t *testing.T) {
	base := svc("a", func(s *corev1.Service) { s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol} })
	cases := []struct {
		name   string
		mutate func(*corev1.Service)
		want   bool
	}{
		{"nothing", func(*corev1.Service) {}, false},
		{"a label", func(s *corev1.Service) { s.Labels = map[string]string{"x": "y"} }, false},
		{"the opt-in", func(s *corev1.Service) { s.Annotations["nodeportlocal.antrea.io/enabled"] = "false" }, true},
		{"the type", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }, true},
		{"the selector", func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "db"} }, true},
		{"a port", func(s *corev1.Service) { s.Spec.Ports[0].Port = 81 }, true},
		// Upgrading SingleStack to dual-stack adds the secondary family.
		{"the IP families", func(s *corev1.Service) {
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cur := base.DeepCopy()
			tc.mutate(cur)
			if got := serviceChangeMatters(base, cur); got != tc.want {
				t.Errorf("serviceChangeMatters = %t, want %t", got, tc.want)
			}
		})
	}
}
