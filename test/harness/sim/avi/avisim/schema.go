package avisim

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/nodeportlocal/npl/test/harness/sim/avi/avischema"
)

// checkSchema refuses obj, sent for an object of typ with API version v,
// when it breaks the controller's schema (avischema: the swagger files of
// the pinned alb-sdk and what later releases change), as the controller
// refuses it. A zero v is the simulator's own seeds, which are not checked.
func (s *store) checkSchema(typ string, obj object, v avischema.Version) *apiError {
	if v == (avischema.Version{}) || s.schema == nil {
		return nil
	}
	vs, err := s.schema.Check(typ, obj, v)
	if err != nil {
		return errorf(http.StatusInternalServerError, "schema of %s: %v", typ, err)
	}
	if len(vs) == 0 {
		return nil
	}
	s.violations += len(vs)
	msgs := make([]string, len(vs))
	for i, v := range vs {
		msgs[i] = v.String()
	}
	return errorf(http.StatusBadRequest, "%s: %s", kinds[typ].display, strings.Join(msgs, "; "))
}

// checkRefTypes refuses a reference to an object of another type than the
// schema says the field names ("It is a reference to an object of type
// Pool"). References are in the stored form /api/<type>/<uuid> by then.
func (s *store) checkRefTypes(typ string, obj object) *apiError {
	if s.schema == nil {
		return nil
	}
	refs, err := s.schema.Refs(typ, obj)
	if err != nil {
		return errorf(http.StatusInternalServerError, "schema of %s: %v", typ, err)
	}
	for _, r := range refs {
		got, _, _ := strings.Cut(strings.TrimPrefix(r.Value, "/api/"), "/")
		if got != r.Type {
			s.violations++
			return errorf(http.StatusBadRequest, "%s: %s refers to a %s, not a %s", kinds[typ].display, r.Path,
				displayOf(got), displayOf(r.Type))
		}
	}
	return nil
}

func displayOf(typ string) string {
	if k, ok := kinds[typ]; ok {
		return k.display
	}
	return typ
}

// fillDefaults adds what the controller adds to a stored object: the
// schema's defaults, and the references and derived fields a controller
// fills in, as AKO's recorded objects show them (tests/avimockobjects/
// virtualservice_mock.json, vsvip_mock.json, tests/bootuptests/bootupmock/
// pool_mock.json in vmware/load-balancer-and-ingress-services-for-kubernetes).
func (s *store) fillDefaults(tenant, typ string, obj object, v avischema.Version) *apiError {
	if s.schema != nil {
		if v == (avischema.Version{}) {
			v = s.version
		}
		if err := s.schema.FillDefaults(typ, obj, v); err != nil {
			return errorf(http.StatusInternalServerError, "schema of %s: %v", typ, err)
		}
	}
	ref := func(field, refTyp, name string) {
		if str(obj[field]) != "" {
			return
		}
		if e := s.lookupName(tenant, refTyp, name); e != nil {
			obj[field] = "/api/" + refTyp + "/" + e.uuid()
		}
	}
	switch typ {
	case "pool":
		ref("vrf_ref", "vrfcontext", "global")
	case "virtualservice":
		ref("vrf_context_ref", "vrfcontext", "global")
		ref("se_group_ref", "serviceenginegroup", "Default-Group")
		ref("application_profile_ref", "applicationprofile", "System-HTTP")
		ref("network_profile_ref", "networkprofile", "System-TCP-Proxy")
		ref("analytics_profile_ref", "analyticsprofile", "System-Analytics-Profile")
		services, _ := obj["services"].([]any)
		for _, raw := range services {
			if svc, ok := raw.(map[string]any); ok {
				if n, _ := toInt(svc["port_range_end"]); n == 0 {
					svc["port_range_end"] = svc["port"]
				}
			}
		}
	case "vsvip":
		ref("vrf_context_ref", "vrfcontext", "global")
		vips, _ := obj["vip"].([]any)
		for _, raw := range vips {
			vip, _ := raw.(map[string]any)
			if vip == nil {
				continue
			}
			if _, ok := vip["prefix_length"]; !ok {
				vip["prefix_length"] = 32
			}
			s.fillVIPSubnet(vip)
		}
	}
	return nil
}

// fillVIPSubnet shows, in an automatic vip, the subnet of its network that
// the address came from, as the controller does.
func (s *store) fillVIPSubnet(vip map[string]any) {
	ipam, _ := vip["ipam_network_subnet"].(map[string]any)
	ref := str(ipam["network_ref"])
	if ipam == nil || ref == "" || ipam["subnet"] != nil {
		return
	}
	network := s.byRef(ref)
	if network == nil {
		return
	}
	subnets, _ := network.obj["configured_subnets"].([]any)
	if len(subnets) == 0 {
		return
	}
	sub, _ := subnets[0].(map[string]any)
	if prefix, ok := sub["prefix"]; ok {
		ipam["subnet"] = deepCopy(prefix)
	}
}

// parseVersion reads an X-Avi-Version header.
func parseVersion(h string) (avischema.Version, error) {
	v, ok := avischema.ParseVersion(h)
	if !ok {
		return avischema.Version{}, fmt.Errorf("invalid X-Avi-Version %q", h)
	}
	return v, nil
}
