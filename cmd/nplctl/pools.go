package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/internal/cli"
	"github.com/nodeportlocal/npl/lbsync/config"
	"github.com/nodeportlocal/npl/lbsync/inputs"
	"github.com/nodeportlocal/npl/lbsync/inspect"
	"github.com/nodeportlocal/npl/providers"
)

func newPoolsCommand(g *globals) *cobra.Command {
	var configPath string
	var check bool
	cmd := &cobra.Command{
		Use:   "pools",
		Short: "Show each load balancer pool's expected members beside the provider's",
		Long: `pools computes, as npl-lbsync does, the members every pool should have
(from the Pods' NodePortLocal annotations and readiness), for LoadBalancer
Services, Ingresses and Gateway API Gateways alike, and lays them beside what
the load balancer reports. With --config the provider is asked directly (same
credentials handling as npl-lbsync), and Gateways are read when its
gatewayAPI.enabled is set; without it the state comes from each Service's
npl.io/LoadBalancerSynced condition and each Gateway's Programmed condition,
and Gateways are read when the Gateway API CRDs are installed.

States: in-sync, drift (members or policy differ), missing (no such pool on
the LB). -o wide adds each pool's traffic policy (its Service's sessionAffinity,
its route's fields and the LoadBalancerPolicies of its targets, as far as the
provider expresses them) beside the provider's ("=" when the same).
--check exits 1 when any pool is not in sync and names the differing members
and policy fields.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.checkOutput(); err != nil {
				return err
			}
			report, err := pools(cmd.Context(), g, configPath)
			if err != nil {
				return err
			}
			if err := printPools(cmd.OutOrStdout(), g.output, report, isTerminal(cmd.OutOrStdout())); err != nil {
				return err
			}
			if check && !report.InSync() {
				for _, p := range report.Pools {
					if p.State == inspect.StateInSync {
						continue
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "%s %s: %s", p.Service, p.Name, p.State)
					if len(p.Missing) > 0 {
						fmt.Fprintf(cmd.ErrOrStderr(), "; missing %s", strings.Join(p.Missing, ", "))
					}
					if len(p.Extra) > 0 {
						fmt.Fprintf(cmd.ErrOrStderr(), "; extra %s", strings.Join(p.Extra, ", "))
					}
					if len(p.PolicyDrift) > 0 {
						fmt.Fprintf(cmd.ErrOrStderr(), "; policy differs: %s", strings.Join(p.PolicyDrift, ", "))
					}
					if p.Reason != "" {
						fmt.Fprintf(cmd.ErrOrStderr(), "; %s", p.Reason)
					}
					fmt.Fprintln(cmd.ErrOrStderr())
				}
				return &cli.ExitError{Code: 1}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "npl-lbsync configuration file: ask its provider for the actual pools")
	cmd.Flags().BoolVar(&check, "check", false, "exit 1 when any pool is not in sync")
	return cmd
}

func pools(ctx context.Context, g *globals, configPath string) (inspect.Report, error) {
	settings := inspect.Settings{ClusterName: "", ServiceType: config.DefaultServiceType, Family: string(config.DefaultIPFamily),
		IngressClass: config.DefaultIngressClass, AgentPorts: contract.DefaultPortRange}
	settings.Claim.LoadBalancerClass = config.DefaultLoadBalancerClass
	var cfg *config.Config
	if configPath != "" {
		var err error
		cfg, err = config.Load(configPath)
		if err != nil {
			return inspect.Report{}, &cli.UsageError{Err: err}
		}
		settings = inspect.Settings{ClusterName: cfg.ClusterName(), ServiceType: cfg.ServiceType(), Family: cfg.IPFamily(), Claim: cfg.Claim(),
			IngressClass: cfg.IngressClass(), IngressSharedVIP: cfg.IngressSharedVIP(), AgentPorts: cfg.NodePortRange()}
	}
	restCfg, err := cli.RESTConfig(*g.kubeconfig, "nplctl")
	if err != nil {
		return inspect.Report{}, cli.Usagef("%v", err)
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return inspect.Report{}, fmt.Errorf("kubernetes client: %w", err)
	}
	// Gateways are npl-lbsync's when its configuration enables the Gateway
	// API; without one, whenever the API server serves it.
	var gc gatewayclient.Interface
	if cfg == nil || cfg.GatewayAPIEnabled() {
		if gc, err = gatewayclient.NewForConfig(restCfg); err != nil {
			return inspect.Report{}, fmt.Errorf("gateway API client: %w", err)
		}
	}
	var provider providers.Provider
	if cfg != nil {
		if provider, err = cfg.Provider().Open(ctx); err != nil {
			return inspect.Report{}, fmt.Errorf("open provider %s: %w", cfg.ProviderName(), err)
		}
		// A Gateway's routes the provider refuses are left out, as
		// npl-lbsync leaves them out, and so are the policy fields it
		// does not express.
		settings.Checker = providers.ModelCheckerOf(provider)
		caps := providers.PolicyCapabilitiesOf(provider)
		settings.Capabilities = &caps
	}
	// LoadBalancerPolicies, when their CRD is served, as npl-lbsync applies them.
	if served, err := inputs.PoliciesServed(client.Discovery()); err != nil {
		return inspect.Report{}, err
	} else if served {
		dyn, err := dynamic.NewForConfig(restCfg)
		if err != nil {
			return inspect.Report{}, fmt.Errorf("dynamic client: %w", err)
		}
		if settings.Policies, err = inputs.PoliciesFromAPI(ctx, dyn, g.namespace); err != nil {
			return inspect.Report{}, err
		}
	}
	// Secrets are read as npl-lbsync reads them, so that an L7 pool's
	// certificates match; without the right to read them, none is read.
	expected, err := inspect.Expected(ctx, client, gc, g.namespace, settings, inputs.APISecrets(client))
	if err != nil {
		return inspect.Report{}, err
	}
	if cfg == nil {
		return inspect.FromStatus(ctx, client, gc, expected)
	}
	actual, err := provider.List(ctx)
	if err != nil {
		return inspect.Report{}, fmt.Errorf("list load balancers of %s: %w", cfg.ProviderName(), err)
	}
	return inspect.Compare(expected, actual), nil
}

func newClient(g *globals) (kubernetes.Interface, error) {
	restCfg, err := cli.RESTConfig(*g.kubeconfig, "nplctl")
	if err != nil {
		return nil, cli.Usagef("%v", err)
	}
	return kubernetes.NewForConfig(restCfg)
}

func printPools(w io.Writer, format string, r inspect.Report, color bool) error {
	switch format {
	case "json", "yaml":
		if r.Pools == nil {
			r.Pools = []inspect.Pool{}
		}
		return printStructured(w, format, r)
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	if format == "wide" {
		fmt.Fprintln(tw, "SERVICE\tPOOL\tPROTOCOL\tPORT\tVIP\tSTATE\tEXPECTED\tACTUAL\tPOLICY\tACTUAL POLICY")
	} else {
		fmt.Fprintln(tw, "SERVICE\tPOOL\tPROTOCOL\tPORT\tEXPECTED\tACTUAL\tSTATE")
	}
	for _, p := range r.Pools {
		state := p.State
		if color {
			state = colorState(state)
		}
		if format == "wide" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Service, p.Name, p.Protocol, p.Port,
				orNone(strings.Join(p.VIPs, ",")), state, memberList(p.Expected), memberList(p.Actual),
				inspect.DescribePolicy(p.Policy), actualPolicy(p))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\n", p.Service, p.Name, p.Protocol, p.Port, len(p.Expected), len(p.Actual), state)
	}
	return tw.Flush()
}

// actualPolicy is the provider's policy of a pool, "=" when it is the
// expected one, "?" when no provider was asked.
func actualPolicy(p inspect.Pool) string {
	switch {
	case p.Reason != "" || p.State == inspect.StateMissing:
		return "?"
	case len(p.PolicyDrift) == 0:
		return "="
	}
	return inspect.DescribePolicy(p.ActualPolicy)
}

func memberList(ms []inspect.Member) string {
	if len(ms) == 0 {
		return "<none>"
	}
	parts := make([]string, 0, len(ms))
	for _, m := range ms {
		s := m.Address()
		if !m.Enabled {
			s += "(disabled)"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ",")
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func colorState(s string) string {
	switch s {
	case inspect.StateInSync:
		return "\x1b[32m" + s + "\x1b[0m"
	case inspect.StateDrift:
		return "\x1b[33m" + s + "\x1b[0m"
	default:
		return "\x1b[31m" + s + "\x1b[0m"
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
