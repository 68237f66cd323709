package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/nodeportlocal/npl/internal/cli"
	"github.com/nodeportlocal/npl/lbsync/config"
)

func newConfigCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Work with npl-lbsync configuration files", Args: cobra.NoArgs}
	cmd.AddCommand(&cobra.Command{
		Use:   "validate FILE",
		Short: "Validate a configuration file exactly as npl-lbsync does (exit 2 naming the field on error)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(args[0])
			if err != nil {
				return &cli.UsageError{Err: err}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: valid (cluster %s, provider %s, serviceType %s)\n",
				args[0], cfg.ClusterName(), cfg.ProviderName(), cfg.ServiceType())
			return nil
		},
	})
	return cmd
}
