// Command npl-demo runs the demo of `make demo`: the whole system on a local
// cluster in a private network namespace, with real traffic.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/nodeportlocal/npl/test/demo"
	"github.com/nodeportlocal/npl/test/harness/cluster"
)

func main() {
	provider := flag.String("provider", "haproxy", "load balancer: haproxy (on an edge host), mock, avi or bigip")
	keep := flag.Bool("keep", false, "keep everything running until Ctrl-C")
	flag.CommandLine.SetOutput(os.Stderr)
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: npl-demo [--provider haproxy|mock|avi|bigip] [--keep]\n")
		flag.PrintDefaults()
	}
	if err := flag.CommandLine.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "npl-demo: unexpected argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	switch *provider {
	case "haproxy", "mock", "avi", "bigip":
	default:
		fmt.Fprintf(os.Stderr, "npl-demo: --provider %q: want haproxy, mock, avi or bigip\n", *provider)
		os.Exit(2)
	}
	if pid, ok := runningDemo(); ok {
		fmt.Fprintf(os.Stderr, "npl-demo: a demo is already running (pid %d): 'make demo-shell' enters it, Ctrl-C in its terminal ends it\n", pid)
		os.Exit(2)
	}
	// Everything runs in a private network namespace: re-execute there.
	done, code, err := cluster.Reexec()
	if err != nil {
		fmt.Fprintf(os.Stderr, "npl-demo: %v\n", err)
		os.Exit(2)
	}
	if done {
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if _, err := demo.Run(ctx, demo.Options{Provider: *provider, Keep: *keep, Out: os.Stdout}); err != nil {
		fmt.Fprintf(os.Stderr, "npl-demo: %v\n", err)
		stop()
		os.Exit(1)
	}
}

// runningDemo reports a kept demo that is still alive.
func runningDemo() (int, bool) {
	b, err := os.ReadFile("/tmp/npl-demo/pid")
	if err != nil {
		return 0, false
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err != nil || pid <= 0 {
		return 0, false
	}
	if err := syscall.Kill(pid, 0); err != nil {
		return 0, false
	}
	return pid, true
}
