package datapath

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/knftables"
)

func TestParseTables_versionAndTables(t *testing.T) {
	out := `{"nftables": [{"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}},` +
		` {"table": {"family": "ip", "name": "npl", "handle": 1}}, {"table": {"family": "ip6", "name": "kube-proxy", "handle": 2}}]}`
	version, tables, err := parseTables([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]bool{"ip npl": true, "ip6 kube-proxy": true}, tables); version != "1.0.6" || diff != "" {
		t.Errorf("version %q, tables (-want +got):\n%s", version, diff)
	}
	if _, _, err := parseTables([]byte("table ip npl\n")); err == nil {
		t.Error("text output parsed as JSON")
	}
}

// TestCheckNFTVersion_refusesOlderThan1_0_1: as knftables.New.
func TestCheckNFTVersion_refusesOlderThan1_0_1(t *testing.T) {
	for version, ok := range map[string]bool{
		"1.0.1": true, "1.0.6": true, "1.1.0": true, "2.0": true,
		"1.0.0": false, "0.9.8": false, "": false, "1.x": false,
	} {
		if err := checkNFTVersion(version); (err == nil) != ok {
			t.Errorf("checkNFTVersion(%q) = %v, want ok %v", version, err, ok)
		}
	}
}

func TestReleaseAtLeast(t *testing.T) {
	for release, ok := range map[string]bool{
		"5.10.0": true, "6.1.0-18-amd64": true, "5.15.0-91-generic": true, "6.18.44-fc-v1300": true,
		"5.9.16": false, "4.18.0-513.el8.x86_64": false, "5": false, "": false,
	} {
		if got := releaseAtLeast(release, 5, 10); got != ok {
			t.Errorf("releaseAtLeast(%q, 5, 10) = %v, want %v", release, got, ok)
		}
	}
}

// TestRunNFT_refusesATransactionKnftablesCouldNotBuild: knftables stops
// building a transaction at its first invalid operation and only notes the
// error at the end of its text; running the operations before it would
// apply half a change.
func TestRunNFT_refusesATransactionKnftablesCouldNotBuild(t *testing.T) {
	tx := knftables.NewFake(knftables.IPv4Family, TableName).NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Add(&knftables.Element{Map: nftMapNodePorts}) // no key
	err := runNFT(context.Background(), "/nonexistent/nft", tx.String())
	if err == nil || !strings.Contains(err.Error(), "invalid nftables transaction") {
		t.Errorf("runNFT = %v, want the transaction refused", err)
	}
}
