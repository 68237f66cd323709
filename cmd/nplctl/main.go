// Command nplctl inspects NodePortLocal: the node-port mappings of Pods, the
// load balancer pools the cluster expects beside those the provider has, and
// npl-lbsync configuration files. Installed as kubectl-npl it is also the
// kubectl plugin `kubectl npl`.
package main

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nodeportlocal/npl/internal/cli"
)

func main() {
	cli.Main(newCommand(filepath.Base(os.Args[0])))
}

type globals struct {
	kubeconfig *string
	namespace  string
	output     string
}

func newCommand(argv0 string) *cobra.Command {
	use := "nplctl"
	if strings.HasPrefix(argv0, "kubectl-npl") {
		use = "kubectl npl"
	}
	g := &globals{}
	cmd := cli.NewRoot(&cobra.Command{
		Use:   use,
		Short: "Inspect NodePortLocal mappings and load balancer pools",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	})
	g.kubeconfig = cli.AddKubeconfigFlag(cmd)
	cmd.PersistentFlags().StringVarP(&g.namespace, "namespace", "n", "", "namespace (default: all namespaces)")
	cmd.PersistentFlags().StringVarP(&g.output, "output", "o", "table", "output format: table, wide, json or yaml")
	cmd.AddCommand(newPoolsCommand(g), newMappingsCommand(g), newConfigCommand(), newProviderCommand(g))
	return cmd
}

func (g *globals) checkOutput() error {
	switch g.output {
	case "table", "wide", "json", "yaml":
		return nil
	}
	return cli.Usagef("--output %q: want table, wide, json or yaml", g.output)
}
