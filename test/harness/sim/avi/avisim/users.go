package avisim

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/nodeportlocal/npl/test/harness/sim/avi/avischema"
)

// Users and roles: the account of Options.Username is a superuser; others,
// added with AddUser, have one role in one tenant, whose privileges
// (Role.privileges: {resource: PERMISSION_POOL, type: WRITE_ACCESS})
// decide what they may change. Everyone may read.

// systemAdminRole is the role seeded with write access to every resource.
const systemAdminRole = "System-Admin"

// permissionOf is the Role privilege resource that guards an object type
// (the enum of swagger/Role.json; a VsVip belongs to its virtual service's).
func permissionOf(typ string) string {
	if typ == "vsvip" {
		typ = "virtualservice"
	}
	return "PERMISSION_" + strings.ToUpper(typ)
}

// AddUser adds an account that logs in with username and password and has
// role (a Role's name, in the admin tenant) in tenant.
func (s *Server) AddUser(username, password, role, tenant string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.st.lookupName(adminTenant, "role", role)
	t := s.st.lookupName(adminTenant, "tenant", tenant)
	if r == nil || t == nil {
		return fmt.Errorf("avisim: add user %s: role %q or tenant %q not found", username, role, tenant)
	}
	_, err := s.st.create(adminTenant, "user", object{"name": username, "username": username, "password": password,
		"is_superuser": false, "access": []any{map[string]any{"role_ref": "/api/role/" + r.uuid(), "tenant_ref": "/api/tenant/" + t.uuid()}},
	}, avischema.Version{})
	if err != nil {
		return err
	}
	return nil
}

// account is who logged in.
type account struct {
	name      string
	superuser bool
	// access is the user's stored access list (role_ref, tenant_ref).
	access []any
}

// findAccount returns the account username logs in as with password, or
// nil. The caller holds s.mu.
func (s *Server) findAccount(username, password string) *account {
	if username == s.username && password == s.password {
		return &account{name: username, superuser: true}
	}
	for _, e := range s.st.byType[typeKey{adminTenant, "user"}] {
		if str(e.obj["username"]) == username && str(e.obj["password"]) == password {
			access, _ := e.obj["access"].([]any)
			return &account{name: username, superuser: e.obj["is_superuser"] == true, access: access}
		}
	}
	return nil
}

// loginUser is what the login answer says of the account: its access, as
// the controller's login answer carries it.
func (s *Server) loginUser(a *account, host string) map[string]any {
	u := map[string]any{"username": a.name, "name": a.name, "is_superuser": a.superuser}
	var access []any
	for _, raw := range a.access {
		acc, _ := raw.(map[string]any)
		out := map[string]any{}
		for k, v := range acc {
			if ref, ok := v.(string); ok && strings.HasPrefix(ref, "/api/") {
				v = "https://" + host + ref
			}
			out[k] = v
		}
		access = append(access, out)
	}
	if a.superuser {
		if r := s.st.lookupName(adminTenant, "role", systemAdminRole); r != nil {
			access = append(access, map[string]any{"role_ref": "https://" + host + "/api/role/" + r.uuid(), "all_tenants": true})
		}
	}
	u["access"] = access
	return u
}

// mayWrite reports whether the account may change objects of typ in
// tenant: a superuser may; others need WRITE_ACCESS to the type's
// permission in a role they hold in that tenant. The caller holds s.mu.
func (s *Server) mayWrite(a *account, tenant, typ string) bool {
	if a == nil || a.superuser {
		return true
	}
	t := s.st.lookupName(adminTenant, "tenant", tenant)
	for _, raw := range a.access {
		acc, _ := raw.(map[string]any)
		if acc["all_tenants"] != true && (t == nil || str(acc["tenant_ref"]) != "/api/tenant/"+t.uuid()) {
			continue
		}
		role := s.st.byRef(str(acc["role_ref"]))
		if role == nil {
			continue
		}
		privileges, _ := role.obj["privileges"].([]any)
		if slices.ContainsFunc(privileges, func(p any) bool {
			pm, _ := p.(map[string]any)
			return pm["resource"] == permissionOf(typ) && pm["type"] == "WRITE_ACCESS"
		}) {
			return true
		}
	}
	return false
}

// forbidden answers a write the account may not make.
func forbidden(w http.ResponseWriter, a *account, typ string) {
	writeError(w, http.StatusForbidden, fmt.Sprintf("User %s has no write access to %s (%s)", a.name, kinds[typ].display, permissionOf(typ)))
}

// allPermissions is the System-Admin role's privileges: write access to
// every resource the simulator serves.
func allPermissions() []any {
	var out []any
	seen := map[string]bool{}
	for _, typ := range slices.Sorted(maps.Keys(kinds)) {
		p := permissionOf(typ)
		if !seen[p] {
			seen[p] = true
			out = append(out, map[string]any{"resource": p, "type": "WRITE_ACCESS"})
		}
	}
	return out
}
