package avi

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"text/template"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/lbmodel"
)

// recordedData fills the templates of testdata/recorded: the names of
// the load balancer, and Foreign to change the fields npl does not own.
type recordedData struct {
	LB, Pool, Service string
	Foreign           bool
}

// importRecorded puts into the simulator the objects of
// testdata/recorded/<dir>/<type>.json.tmpl, collection answers of a
// controller (shaped like recorded ones, see each file), in the order of
// types. References to the controller's system objects come from the
// simulator (ref); cloud_config_cksum values from the provider's own plan
// (cksum), as npl wrote them before.
func importRecorded(t *testing.T, f *fixture, dir string, data recordedData, cksums map[string]string, types ...string) {
	t.Helper()
	funcs := template.FuncMap{
		"ref": func(typ, name string) string {
			for _, o := range f.sim.Objects("admin", typ) {
				if o["name"] == name {
					// A controller's own host, not the simulator's.
					return "https://10.52.2.174:9443/api/" + typ + "/" + o["uuid"].(string)
				}
			}
			t.Fatalf("no %s %s in the simulator", typ, name)
			return ""
		},
		"cksum": func(name string) string {
			sum, ok := cksums[name]
			if !ok {
				t.Fatalf("no checksum of %s", name)
			}
			return sum
		},
	}
	for _, typ := range types {
		path := filepath.Join("testdata", "recorded", dir, typ+".json.tmpl")
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		tmpl, err := template.New(typ).Funcs(funcs).Parse(string(raw))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var out bytes.Buffer
		if err := tmpl.Execute(&out, data); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var page struct {
			Count   int              `json:"count"`
			Results []map[string]any `json:"results"`
		}
		if err := json.Unmarshal(out.Bytes(), &page); err != nil {
			t.Fatalf("%s: %v\n%s", path, err, out.String())
		}
		for _, o := range page.Results {
			if err := f.sim.Import("admin", typ, o); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
		}
	}
}

// A load balancer npl made, read back as a controller returns it (its
// defaults, its references, its uuids, its runtime fields), is in sync:
// Ensure writes nothing; and one that differs only in what npl does not own
// (the balancing algorithm, a server's ratio, queueing, connection limits,
// ramp-up) is left alone.
func TestProvider_recordedL4ObjectsReadBackInSync(t *testing.T) {
	drain := member("198.18.0.12", 61001)
	drain.Enabled = false
	for _, foreign := range []bool{false, true} {
		f := newFixture(t, fixtureOptions{})
		lb := webLB("web", tcp(80, member("198.18.0.11", 61000), drain))
		plan, err := f.p.plan(lb)
		if err != nil {
			t.Fatal(err)
		}
		cksums := map[string]string{plan.name: checksum(plan.vs)}
		for _, ps := range plan.pools {
			cksums[ps.Name] = checksum(ps)
		}
		data := recordedData{LB: plan.name, Pool: plan.pools[0].Name, Service: lb.Service, Foreign: foreign}
		importRecorded(t, f, "l4", data, cksums, "vsvip", "pool", "l4policyset", "virtualservice")
		before := f.sim.Dump()

		f.sim.ResetCounters()
		st := f.ensure(lb)
		if w := f.writes(); len(w) != 0 {
			t.Errorf("foreign %v: Ensure of the recorded state wrote %v, want nothing", foreign, w)
		}
		if diff := cmp.Diff([]string{"198.18.200.9"}, st.VIPs); diff != "" {
			t.Errorf("foreign %v: VIPs (-want +got):\n%s", foreign, diff)
		}
		if diff := cmp.Diff(before, f.sim.Dump()); diff != "" {
			t.Errorf("foreign %v: the controller's objects changed (-before +after):\n%s", foreign, diff)
		}
		if diff := cmp.Diff([]lbmodel.LoadBalancer{withVIPs(lb, "198.18.200.9")}, f.list()); diff != "" {
			t.Errorf("foreign %v: List (-want +got):\n%s", foreign, diff)
		}
	}
}
