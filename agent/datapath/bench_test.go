package datapath_test

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"testing"

	"github.com/nodeportlocal/npl/agent/datapath"
)

// BenchmarkSync compares one Sync (one iptables-restore of both chains, plus
// the jump checks) with the per-rule baseline it replaces: flushing the
// chains and adding the same rules with one `iptables -t nat -A` exec each.
// It runs in the private network namespace, for each iptables mode:
//
//	go test -run '^$' -bench . ./agent/datapath
func BenchmarkSync(b *testing.B) {
	requirePrivateNetNS(b)
	ctx := context.Background()
	for _, mode := range modes {
		for _, n := range []int{100, 1000} {
			d := desired(n)
			b.Run(fmt.Sprintf("mode=%s/restore/mappings=%d", mode, n), func(b *testing.B) {
				ipt := newIPTables(b, v4, mode)
				before, ops := ipt.Stats(), 0
				for b.Loop() {
					if err := ipt.Sync(ctx, d); err != nil {
						b.Fatal(err)
					}
					ops++
				}
				b.ReportMetric(float64(ipt.Stats().Execs-before.Execs)/float64(ops), "execs/op")
				b.ReportMetric(float64(len(d.Mappings)+len(d.HairpinSources)), "rules")
			})
			b.Run(fmt.Sprintf("mode=%s/perRuleExec/mappings=%d", mode, n), func(b *testing.B) {
				ipt := newIPTables(b, v4, mode)
				if err := ipt.Sync(ctx, datapath.Desired{}); err != nil { // chains and jumps
					b.Fatal(err)
				}
				rules := ruleArgs(d)
				cmd := "iptables-" + mode
				execs, ops := 0, 0
				for b.Loop() {
					for _, chain := range []string{datapath.ChainNodePortLocal, datapath.ChainPostrouting} {
						runOrFail(b, cmd, "-w", "5", "-t", "nat", "-F", chain)
						execs++
					}
					for _, args := range rules {
						runOrFail(b, cmd, append([]string{"-w", "5", "-t", "nat"}, args...)...)
						execs++
					}
					ops++
				}
				b.ReportMetric(float64(execs)/float64(ops), "execs/op")
				b.ReportMetric(float64(len(rules)), "rules")
				// The baseline must have done the same work as Sync.
				if drift, err := ipt.Check(ctx, d); err != nil || drift {
					b.Fatalf("the per-rule baseline left other rules than Sync writes (drift %v, err %v)", drift, err)
				}
			})
		}
	}
}

func runOrFail(b *testing.B, name string, args ...string) {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		b.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
}

// ruleArgs returns the rules Render writes for d as `iptables -A` arguments,
// in the same order: desired() builds mappings and sources in Render's order
// already (one protocol, increasing ports and addresses).
func ruleArgs(d datapath.Desired) [][]string {
	var rules [][]string
	for _, m := range d.Mappings {
		rules = append(rules, []string{"-A", datapath.ChainNodePortLocal,
			"-p", string(m.Protocol), "-m", string(m.Protocol), "--dport", strconv.Itoa(m.NodePort),
			"-m", "comment", "--comment", m.Pod + ":" + strconv.Itoa(m.PodPort),
			"-j", "DNAT", "--to-destination", m.PodIP.String() + ":" + strconv.Itoa(m.PodPort)})
	}
	ports := fmt.Sprintf("%d:%d", d.PortRange[0], d.PortRange[1])
	for _, a := range d.HairpinSources {
		rules = append(rules, []string{"-A", datapath.ChainPostrouting, "-s", a.String() + "/32",
			"-m", "conntrack", "--ctstate", "DNAT", "--ctorigdstport", ports,
			"-m", "comment", "--comment", "npl hairpin", "-j", "MASQUERADE"})
	}
	return rules
}
