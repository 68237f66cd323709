package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/nodeportlocal/npl/internal/cli"
	"github.com/nodeportlocal/npl/lbsync/config"
	"github.com/nodeportlocal/npl/providers"
)

func newProviderCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "provider", Short: "Work with the load balancer npl-lbsync drives", Args: cobra.NoArgs}
	var configPath string
	check := &cobra.Command{
		Use:   "check --config FILE",
		Short: "Check, reading only, that the load balancer of a configuration can serve npl",
		Long: `check reads npl-lbsync's configuration file and checks, without changing
anything on the load balancer, what npl-lbsync needs of it: the TLS connection
and the verification of its certificate (or the exact reason it fails), the
login, the API version, that the tenant, cloud, service engine group and VIP
network (Avi) or the partition (BIG-IP) exist, and that the account may create
and delete the objects npl makes (its Avi role's privileges, its BIG-IP role
on the partition). It prints one line per problem or warning; it exits 1
when there is a problem, 0 otherwise. -o json or yaml prints every check.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.checkOutput(); err != nil {
				return err
			}
			if configPath == "" {
				return cli.Usagef("--config is required")
			}
			cfg, err := config.Load(configPath)
			if err != nil {
				return &cli.UsageError{Err: err}
			}
			pf := providers.PreflighterOf(cfg.Provider())
			if pf == nil {
				return &cli.ExitError{Code: 2, Err: fmt.Errorf("provider %s has no preflight check", cfg.ProviderName())}
			}
			checks := pf.Preflight(cmd.Context())
			if err := printChecks(cmd.OutOrStdout(), g.output, cfg.ProviderName(), checks); err != nil {
				return err
			}
			if providers.Failed(checks) {
				return &cli.ExitError{Code: 1}
			}
			return nil
		},
	}
	check.Flags().StringVar(&configPath, "config", "", "npl-lbsync's configuration file (the chart's config.yaml)")
	cmd.AddCommand(check)
	return cmd
}

// checkReport is what -o json and yaml print.
type checkReport struct {
	Provider string            `json:"provider"`
	OK       bool              `json:"ok"`
	Checks   []providers.Check `json:"checks"`
}

// printChecks prints the problems and warnings one per line (table, wide
// prints every check), or the whole report as JSON or YAML.
func printChecks(w io.Writer, format, provider string, checks []providers.Check) error {
	report := checkReport{Provider: provider, OK: !providers.Failed(checks), Checks: checks}
	switch format {
	case "json":
		b, err := json.MarshalIndent(report, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(report)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	for _, c := range checks {
		if c.Result != providers.CheckOK || format == "wide" {
			fmt.Fprintf(w, "%s: %s: %s\n", c.Result, c.Name, c.Detail)
		}
	}
	if report.OK {
		fmt.Fprintf(w, "ok: %s: %d checks passed\n", provider, len(checks))
	}
	return nil
}
