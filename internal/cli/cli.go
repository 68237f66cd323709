// Package cli holds the command-line plumbing the binaries share: the
// --version, --kubeconfig and -v flags, the exit codes (2 for a bad flag or
// configuration, with one clear line), the Kubernetes client, and the start
// of the long-running ones (Daemon: signals, logger, metrics and probes).
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/internal/buildinfo"
)

// UsageError is a bad flag, argument or configuration: the binary prints it on
// one line and exits 2.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// ExitError ends the binary with a given code after printing Err, if any.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit %d", e.Code)
	}
	return e.Err.Error()
}

// NewRoot prepares a root command: --version, -v (klog verbosity), silenced
// cobra error printing (Execute prints once), and bad flags as UsageErrors.
// cmd must have a RunE.
func NewRoot(cmd *cobra.Command) *cobra.Command {
	addVersionFlag(cmd)
	cmd.SilenceErrors = true
	cmd.CompletionOptions.DisableDefaultCmd = true
	cmd.SilenceUsage = true
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &UsageError{Err: err} })

	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	cmd.PersistentFlags().AddGoFlag(klogFlags.Lookup("v"))
	cmd.PersistentFlags().Lookup("v").Shorthand = "v"
	return cmd
}

// addVersionFlag gives cmd the --version of cobra's Command.Version, which
// prints buildinfo.String alone, without cobra's version template: any
// text/template in a binary makes the linker keep every exported method of
// every type (text/template finds methods by name), a third of npl-agent's
// size. As cobra's, the flag is the root's own, and wins over arguments.
func addVersionFlag(cmd *cobra.Command) {
	version := buildinfo.String(cmd.Name())
	cmd.Flags().Bool("version", false, "version for "+cmd.DisplayName())
	asked := func(c *cobra.Command) bool {
		v, err := c.Flags().GetBool("version")
		return err == nil && v
	}
	if validate := cmd.Args; validate != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			if asked(c) {
				return nil
			}
			return validate(c, args)
		}
	}
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if asked(c) {
			_, err := fmt.Fprintln(c.OutOrStdout(), version)
			return err
		}
		return run(c, args)
	}
}

// Execute runs the command and returns the process exit code: 0, 2 for a
// usage error, an ExitError's code, or 1 for any other error.
func Execute(cmd *cobra.Command, stderr io.Writer) int {
	usageArgs(cmd)
	err := cmd.Execute()
	defer klog.Flush()
	if err == nil {
		return 0
	}
	var usage *UsageError
	var exit *ExitError
	switch {
	case errors.As(err, &exit):
		if exit.Err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", cmd.Name(), exit.Err)
		}
		return exit.Code
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "%s: %v\n", cmd.Name(), usage.Err)
		return 2
	default:
		fmt.Fprintf(stderr, "%s: %v\n", cmd.Name(), err)
		return 1
	}
}

// Main runs cmd and exits the process with its code.
func Main(cmd *cobra.Command) {
	os.Exit(Execute(cmd, os.Stderr))
}

// AddKubeconfigFlag registers --kubeconfig on cmd and returns its value.
func AddKubeconfigFlag(cmd *cobra.Command) *string {
	var path string
	cmd.PersistentFlags().StringVar(&path, "kubeconfig", "", "path to a kubeconfig (default: in-cluster config, then $KUBECONFIG, then ~/.kube/config)")
	return &path
}

// AddProfilingFlag registers --profiling on cmd and returns its value, for
// Daemon.Profiling: off by default, as the profiles show the process's
// memory to whoever reaches the metrics listener.
func AddProfilingFlag(cmd *cobra.Command) *bool {
	var on bool
	cmd.Flags().BoolVar(&on, "profiling", false, "serve Go's net/http/pprof profiles under /debug/pprof/ on the metrics listener")
	return &on
}

// RESTConfig loads the client configuration: the --kubeconfig file when
// given, else the in-cluster configuration, else $KUBECONFIG and
// ~/.kube/config through the usual loading rules.
func RESTConfig(kubeconfig, userAgent string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	switch {
	case kubeconfig != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	default:
		cfg, err = rest.InClusterConfig()
		if err != nil {
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.UserAgent = userAgent
	return cfg, nil
}

// usageArgs makes wrong positional arguments UsageErrors (exit 2) in cmd
// and all its subcommands.
func usageArgs(cmd *cobra.Command) {
	if validate := cmd.Args; validate != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			if err := validate(c, args); err != nil {
				return &UsageError{Err: err}
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		usageArgs(sub)
	}
}
