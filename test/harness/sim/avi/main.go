// Command avi runs the Avi Controller simulator (package avisim) on its own,
// for the demo and for manual tests with the alb-sdk:
//
//	go run ./test/harness/sim/avi --listen 127.0.0.1:8443 --ca-out /tmp/avi-ca.crt --username admin --password secret
//
// Test hooks are served under /sim/ (see avisim). It exits 2 with one line on
// a bad flag.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"github.com/nodeportlocal/npl/internal/secretfile"
	"github.com/nodeportlocal/npl/test/harness/sim/avi/avisim"
)

// config is what the command line asks for.
type config struct {
	opts  avisim.Options
	caOut string
}

// parseFlags reads the command line. It returns flag.ErrHelp for -h.
func parseFlags(args []string) (config, error) {
	var (
		c            config
		passwordFile string
		subnet       string
	)
	fs := flag.NewFlagSet("avisim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.opts.Addr, "listen", "127.0.0.1:8443", "address to serve TLS on")
	fs.StringVar(&c.caOut, "ca-out", "", "file to write the generated CA certificate (PEM) to")
	fs.StringVar(&c.opts.Username, "username", "admin", "username POST /login accepts")
	fs.StringVar(&c.opts.Password, "password", "", "password POST /login accepts (or --password-file)")
	fs.StringVar(&passwordFile, "password-file", "", "file holding the password POST /login accepts")
	fs.StringVar(&c.opts.Version, "version", "", "controller API version (20.1.x, 22.1.x, 30.x; default: the pinned alb-sdk schema's)")
	fs.StringVar(&c.opts.VIPNetwork, "vip-network", "vip-net", "name of the seeded VIP network")
	fs.StringVar(&subnet, "vip-subnet", "198.18.200.0/24", "subnet VsVips are allocated from")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if passwordFile != "" {
		if c.opts.Password != "" {
			return c, errors.New("--password and --password-file are exclusive")
		}
		// Read as the provider reads it, so that both see one password.
		pw, err := secretfile.Read(passwordFile)
		if err != nil {
			return c, fmt.Errorf("--password-file: %w", err)
		}
		c.opts.Password = pw
	}
	if c.opts.Password == "" {
		return c, errors.New("--password or --password-file is required")
	}
	p, err := netip.ParsePrefix(subnet)
	if err != nil {
		return c, fmt.Errorf("--vip-subnet: %w", err)
	}
	c.opts.VIPSubnet = p
	return c, nil
}

func main() {
	c, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		fmt.Println("usage: avi --listen HOST:PORT --ca-out FILE --username USER --password PASS [--vip-network NAME --vip-subnet CIDR --version V]")
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "avisim: %v\n", err)
		os.Exit(2)
	}
	if err := run(c); err != nil {
		fmt.Fprintf(os.Stderr, "avisim: %v\n", err)
		os.Exit(1)
	}
}

func run(c config) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	srv := avisim.New(c.opts)
	addr, err := srv.Start()
	if err != nil {
		return err
	}
	defer srv.Close()
	if c.caOut != "" {
		if err := srv.WriteCAFile(c.caOut); err != nil {
			return err
		}
	}
	fmt.Printf("avisim: serving https://%s (CA %s)\n", addr, c.caOut)
	<-ctx.Done()
	return nil
}
