package stack

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/sim/avi/avisim"
	"github.com/nodeportlocal/npl/test/harness/sim/bigip/bigipsim"
)

// Backend is the load balancer behind npl-lbsync in a test or the demo: the
// mock provider's state file, or a simulator the real client library talks
// to. Pools reads the load balancer's own state, not npl-lbsync's view.
type Backend interface {
	// Name is the provider name: mock, avi or bigip.
	Name() string
	// ProviderConfig is the provider section of npl-lbsync's configuration.
	ProviderConfig() string
	// Pools returns the pools of a load balancer by pool name, and its VIPs;
	// ok is false when the load balancer does not exist.
	Pools(lbName string) (pools map[string][]lbmodel.Member, vips []string, ok bool, err error)
	// Writes counts the write calls the load balancer received so far.
	Writes() int
	// AddForeign creates an object that another owner made on the same load
	// balancer (another cluster's, or a person's) and returns a check that it
	// is still there, untouched.
	AddForeign() (stillThere func() bool, err error)
	// Close stops a simulator.
	Close()
}

// Identified is a Backend whose objects carry an identity of the load
// balancer's own making (Avi's uuids): a delete and re-create changes it,
// even when the new object is otherwise equal.
type Identified interface {
	// Identities returns the identity of each object of a load balancer
	// by object kind and name.
	Identities(lbName string) map[string]string
}

// StartBackend starts the named backend with its files (credentials, CA,
// state) in dir. VIPs come from vipSubnet for every backend.
func StartBackend(name, dir string, vipSubnet netip.Prefix) (Backend, error) {
	switch name {
	case "mock":
		return &mockBackend{stateFile: filepath.Join(dir, "mock-state.json")}, nil
	case "avi":
		return startAvi(dir, vipSubnet)
	case "bigip":
		return startBigIP(dir)
	}
	return nil, fmt.Errorf("unknown provider %q (want mock, avi or bigip)", name)
}

// writeCredentials writes username and password files for a simulator.
func writeCredentials(dir, prefix, user, password string) (userFile, passFile string, err error) {
	userFile = filepath.Join(dir, prefix+"-username")
	passFile = filepath.Join(dir, prefix+"-password")
	if err := os.WriteFile(userFile, []byte(user+"\n"), 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(passFile, []byte(password+"\n"), 0o600); err != nil {
		return "", "", err
	}
	return userFile, passFile, nil
}

type mockBackend struct{ stateFile string }

func (m *mockBackend) Name() string { return "mock" }
func (m *mockBackend) ProviderConfig() string {
	return fmt.Sprintf("provider:\n  name: mock\n  mock:\n    stateFile: %s\n    allowFaultInjection: true\n", m.stateFile)
}
func (m *mockBackend) Writes() int { return -1 }
func (m *mockBackend) Close()      {}

func (m *mockBackend) Pools(lbName string) (map[string][]lbmodel.Member, []string, bool, error) {
	b, err := os.ReadFile(m.stateFile)
	if os.IsNotExist(err) {
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, err
	}
	var st struct {
		LoadBalancers []lbmodel.LoadBalancer `json:"loadBalancers"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, nil, false, fmt.Errorf("read mock state: %w", err)
	}
	for _, lb := range st.LoadBalancers {
		if lb.Name == lbName {
			pools := map[string][]lbmodel.Member{}
			for _, l := range lb.Listeners {
				if l.Pool.Name != "" {
					pools[l.Pool.Name] = l.Pool.Members
				}
			}
			for _, p := range lb.Pools { // L7
				pools[p.Name] = p.Members
			}
			return pools, lb.VIPs, true, nil
		}
	}
	return nil, nil, false, nil
}

type aviBackend struct {
	sim    *avisim.Server
	config string
}

func startAvi(dir string, vipSubnet netip.Prefix) (*aviBackend, error) {
	sim := avisim.New(avisim.Options{Username: "npl", Password: "avi-secret", VIPSubnet: vipSubnet})
	if _, err := sim.Start(); err != nil {
		return nil, fmt.Errorf("start the Avi simulator: %w", err)
	}
	caFile := filepath.Join(dir, "avi-ca.crt")
	if err := sim.WriteCAFile(caFile); err != nil {
		sim.Close()
		return nil, err
	}
	userFile, passFile, err := writeCredentials(dir, "avi", "npl", "avi-secret")
	if err != nil {
		sim.Close()
		return nil, err
	}
	cfg := fmt.Sprintf(`provider:
  name: avi
  avi:
    controller: %s
    vipNetwork: vip-net
    usernameFile: %s
    passwordFile: %s
    caFile: %s
`, sim.Host(), userFile, passFile, caFile)
	return &aviBackend{sim: sim, config: cfg}, nil
}

func (a *aviBackend) Name() string           { return "avi" }
func (a *aviBackend) ProviderConfig() string { return a.config }
func (a *aviBackend) Writes() int            { return a.sim.Writes() }
func (a *aviBackend) Close()                 { _ = a.sim.Close() }

// SchemaViolations counts the request bodies the simulator refused for
// breaking the controller's schema.
func (a *aviBackend) SchemaViolations() int { return a.sim.SchemaViolations() }

// CloseAtEnd closes b when the test ends, and fails the test when the
// simulator refused a request body for breaking the controller's schema:
// every Avi request of the test is checked (avischema).
func CloseAtEnd(t testing.TB, b Backend) {
	t.Cleanup(func() {
		if v, ok := b.(interface{ SchemaViolations() int }); ok {
			if n := v.SchemaViolations(); n > 0 {
				t.Errorf("%s: %d request bodies broke the controller's schema (see npl-lbsync's log)", b.Name(), n)
			}
		}
		b.Close()
	})
}

// Pools reads the simulator's pools of lbName (OfLoadBalancer) and the VsVip lbName.
func (a *aviBackend) Pools(lbName string) (map[string][]lbmodel.Member, []string, bool, error) {
	var vips []string
	found := false
	for _, v := range a.sim.Objects("admin", "vsvip") {
		if v["name"] != lbName {
			continue
		}
		found = true
		vipList, _ := v["vip"].([]any)
		for _, x := range vipList {
			vip, _ := x.(map[string]any)
			ip, _ := vip["ip_address"].(map[string]any)
			if addr, ok := ip["addr"].(string); ok {
				vips = append(vips, addr)
			}
		}
	}
	pools := map[string][]lbmodel.Member{}
	for _, p := range a.sim.Objects("admin", "pool") {
		name, _ := p["name"].(string)
		if !OfLoadBalancer(name, lbName) {
			continue
		}
		found = true
		members := []lbmodel.Member{}
		servers, _ := p["servers"].([]any)
		for _, x := range servers {
			s, _ := x.(map[string]any)
			ip, _ := s["ip"].(map[string]any)
			addr, _ := ip["addr"].(string)
			port, err := number(s["port"])
			if err != nil {
				return nil, nil, false, fmt.Errorf("pool %s: server port: %w", name, err)
			}
			enabled := true
			if e, ok := s["enabled"].(bool); ok {
				enabled = e
			}
			members = append(members, lbmodel.Member{IP: addr, Port: int32(port), Enabled: enabled})
		}
		pools[name] = lbmodel.SortMembers(members)
	}
	return pools, vips, found, nil
}

// Objects returns the simulator's objects of kind (pool, poolgroup,
// httppolicyset, ...) in the admin tenant, as it stores them.
func (a *aviBackend) Objects(kind string) []map[string]any { return a.sim.Objects("admin", kind) }

// OfLoadBalancer reports whether the object name is a part of the load
// balancer lbName: named lbName-* (its listeners' pools and objects) or
// lbName_* (its Ingress and route pools, its certificates).
func OfLoadBalancer(name, lbName string) bool {
	return strings.HasPrefix(name, lbName+"-") || strings.HasPrefix(name, lbName+"_")
}

// Identities returns the uuid of every VsVip, virtual service, pool, pool
// group, HTTP policy set and certificate of a load balancer (named lbName
// or a part of it, OfLoadBalancer), keyed "kind/name".
func (a *aviBackend) Identities(lbName string) map[string]string {
	out := map[string]string{}
	for _, kind := range []string{"vsvip", "virtualservice", "pool", "poolgroup", "httppolicyset", "sslkeyandcertificate"} {
		for _, o := range a.sim.Objects("admin", kind) {
			name, _ := o["name"].(string)
			if name == lbName || OfLoadBalancer(name, lbName) {
				uuid, _ := o["uuid"].(string)
				out[kind+"/"+name] = uuid
			}
		}
	}
	return out
}

type bigipBackend struct {
	sim    *bigipsim.Server
	config string
}

func startBigIP(dir string) (*bigipBackend, error) {
	sim := bigipsim.New(bigipsim.Options{TLS: true, Username: "npl", Password: "bigip-secret"})
	if err := sim.Start(); err != nil {
		return nil, fmt.Errorf("start the BIG-IP simulator: %w", err)
	}
	caFile := filepath.Join(dir, "bigip-ca.crt")
	if err := os.WriteFile(caFile, sim.CACertPEM(), 0o644); err != nil {
		sim.Close()
		return nil, err
	}
	userFile, passFile, err := writeCredentials(dir, "bigip", "npl", "bigip-secret")
	if err != nil {
		sim.Close()
		return nil, err
	}
	cfg := fmt.Sprintf(`provider:
  name: bigip
  bigip:
    url: %s
    usernameFile: %s
    passwordFile: %s
    caFile: %s
`, sim.URL(), userFile, passFile, caFile)
	return &bigipBackend{sim: sim, config: cfg}, nil
}

// Sim is the BIG-IP simulator behind a "bigip" Backend, for tests that read
// its objects.
func (b *bigipBackend) Sim() *bigipsim.Server { return b.sim }

func (b *bigipBackend) Name() string           { return "bigip" }
func (b *bigipBackend) ProviderConfig() string { return b.config }
func (b *bigipBackend) Writes() int            { return b.sim.Writes() }
func (b *bigipBackend) Close()                 { b.sim.Close() }

// Pools reads the simulator's pools of lbName (OfLoadBalancer) and the VIPs of the
// virtual servers of the same names.
func (b *bigipBackend) Pools(lbName string) (map[string][]lbmodel.Member, []string, bool, error) {
	st := b.sim.Dump()
	pools := map[string][]lbmodel.Member{}
	for _, p := range st.Pools {
		name := p.FullPath[strings.LastIndex(p.FullPath, "/")+1:]
		if !OfLoadBalancer(name, lbName) {
			continue
		}
		members := []lbmodel.Member{}
		for _, m := range p.Members {
			addr, port, ok := bigipsim.SplitEndpoint(m.FullPath)
			if !ok {
				return nil, nil, false, fmt.Errorf("member %q is not address:port", m.FullPath)
			}
			members = append(members, lbmodel.Member{IP: addr, Port: int32(port), Enabled: m.Session != "user-disabled"})
		}
		pools[name] = lbmodel.SortMembers(members)
	}
	seen := map[string]bool{}
	var vips []string
	for _, v := range st.Virtuals {
		name := v.FullPath[strings.LastIndex(v.FullPath, "/")+1:]
		if !OfLoadBalancer(name, lbName) {
			continue
		}
		dest, _, ok := bigipsim.SplitEndpoint(v.Destination)
		if !ok {
			return nil, nil, false, fmt.Errorf("virtual %q has destination %q, not address:port", v.FullPath, v.Destination)
		}
		if !seen[dest] {
			seen[dest] = true
			vips = append(vips, dest)
		}
	}
	return pools, vips, len(pools) > 0, nil
}

func (m *mockBackend) AddForeign() (func() bool, error) {
	b, err := os.ReadFile(m.stateFile)
	if err != nil {
		return nil, fmt.Errorf("read mock state: %w", err)
	}
	var st map[string]any
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, err
	}
	foreign := map[string]any{"name": "other--ns-svc", "service": "ns/svc", "vips": []string{"203.0.113.200"},
		"listeners": []any{map[string]any{"port": 80, "protocol": "TCP", "pool": map[string]any{
			"name": "other--ns-svc-TCP-80", "members": []any{map[string]any{"ip": "203.0.113.9", "port": 80, "enabled": true}}}}}}
	lbs, _ := st["loadBalancers"].([]any)
	st["loadBalancers"] = append(lbs, foreign)
	out, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(m.stateFile, out, 0o644); err != nil {
		return nil, err
	}
	return func() bool {
		pools, _, ok, err := m.Pools("other--ns-svc")
		return err == nil && ok && len(pools["other--ns-svc-TCP-80"]) == 1
	}, nil
}

func (a *aviBackend) AddForeign() (func() bool, error) {
	obj := map[string]any{
		"name": "other--ns-svc-TCP-80", "created_by": "ako-other",
		"servers": []any{map[string]any{"ip": map[string]any{"addr": "203.0.113.9", "type": "V4"}, "port": 80, "enabled": true}},
	}
	if _, err := a.sim.Create("admin", "pool", obj); err != nil {
		return nil, fmt.Errorf("create a foreign pool: %w", err)
	}
	return func() bool {
		pools, _, ok, err := a.Pools("other--ns-svc")
		return err == nil && ok && len(pools["other--ns-svc-TCP-80"]) == 1
	}, nil
}

func (b *bigipBackend) AddForeign() (func() bool, error) {
	// A pool a person made by hand in the partition npl-lbsync uses.
	var partition string
	for _, p := range b.sim.Dump().Partitions {
		if strings.HasPrefix(p, "npl-") {
			partition = p
		}
	}
	if partition == "" {
		return nil, fmt.Errorf("no npl partition on the BIG-IP simulator yet")
	}
	code, body := b.sim.Do("POST", "/mgmt/tm/ltm/pool", map[string]any{
		"name": "hand-made", "partition": partition, "description": "made by hand",
		"members": []any{map[string]any{"name": "203.0.113.9:80"}},
	})
	if code != 200 {
		return nil, fmt.Errorf("create a foreign pool: %d %s", code, body)
	}
	return func() bool {
		for _, p := range b.sim.Dump().Pools {
			if p.FullPath == "/"+partition+"/hand-made" && len(p.Members) == 1 {
				return true
			}
		}
		return false
	}, nil
}

// number reads a JSON number whichever way it was decoded.
func number(v any) (float64, error) {
	switch n := v.(type) {
	case float64:
		return n, nil
	case json.Number:
		return n.Float64()
	case int:
		return float64(n), nil
	case int64:
		return float64(n), nil
	}
	return 0, fmt.Errorf("%v (%T) is not a number", v, v)
}

// SetMembers replaces a pool's members behind npl-lbsync's back, as a person
// editing the BIG-IP would (drift on the load balancer side).
func (b *bigipBackend) SetMembers(pool string, members []lbmodel.Member) error {
	var partition string
	for _, p := range b.sim.Dump().Pools {
		if strings.HasSuffix(p.FullPath, "/"+pool) {
			partition = strings.Split(p.FullPath, "/")[1]
		}
	}
	if partition == "" {
		return fmt.Errorf("no pool %s on the BIG-IP simulator", pool)
	}
	list := make([]any, 0, len(members))
	for _, m := range members {
		list = append(list, map[string]any{"name": fmt.Sprintf("%s:%d", m.IP, m.Port)})
	}
	code, body := b.sim.Do("PUT", "/mgmt/tm/ltm/pool/~"+partition+"~"+pool, map[string]any{"members": list})
	if code != 200 {
		return fmt.Errorf("set members of %s: %d %s", pool, code, body)
	}
	return nil
}

// SlowPoolWrites makes every pool write of the Avi simulator take d, as a
// busy controller does, until the returned function is called.
func (a *aviBackend) SlowPoolWrites(d time.Duration) (undo func()) {
	id := a.sim.AddFault(avisim.Fault{Method: "PUT", Path: "/api/pool/*", Latency: d})
	return func() { a.sim.RemoveFault(id) }
}
