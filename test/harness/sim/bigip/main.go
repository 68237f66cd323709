// Command bigip serves a simulated BIG-IP iControl REST API (see package
// bigipsim) for the demo and for tests that run npl-lbsync as a process:
//
//	go run ./test/harness/sim/bigip --listen 127.0.0.1:9443 [--tls --ca-out FILE] --username admin --password secret
//
// It prints the URL to use, then serves until SIGINT or SIGTERM. The test
// hooks are under /sim/ (see bigipsim.Server.ServeHTTP's documentation).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nodeportlocal/npl/test/harness/sim/bigip/bigipsim"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bigip-sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	listen := fs.String("listen", "127.0.0.1:9443", "address to listen on")
	useTLS := fs.Bool("tls", false, "serve HTTPS with a certificate from a generated CA")
	caOut := fs.String("ca-out", "", "write the CA certificate (PEM) to this file; needs --tls")
	username := fs.String("username", "admin", "user name that basic auth and login accept")
	password := fs.String("password", "", "password that basic auth and login accept (required)")
	tokenTimeout := fs.Duration("token-timeout", 1200*time.Second, "lifetime of a new token")
	version := fs.String("version", "17.1.0", "BIG-IP version /mgmt/tm/sys/version reports (13.1 to 17.x)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, "Usage: bigip-sim --listen ADDR [--tls --ca-out FILE] --username USER --password PASSWORD")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "bigip-sim: %v\n", err)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "bigip-sim: unexpected argument %q\n", fs.Arg(0))
		return 2
	case *password == "":
		fmt.Fprintln(stderr, "bigip-sim: --password is required")
		return 2
	case *username == "":
		fmt.Fprintln(stderr, "bigip-sim: --username must not be empty")
		return 2
	case *caOut != "" && !*useTLS:
		fmt.Fprintln(stderr, "bigip-sim: --ca-out needs --tls")
		return 2
	case *tokenTimeout <= 0:
		fmt.Fprintln(stderr, "bigip-sim: --token-timeout must be positive")
		return 2
	}

	srv := bigipsim.New(bigipsim.Options{
		Addr: *listen, TLS: *useTLS, Username: *username, Password: *password, TokenTimeout: *tokenTimeout,
		ErrorLog: log.New(stderr, "bigip-sim: ", log.LstdFlags), Version: *version,
	})
	if err := srv.Start(); err != nil {
		fmt.Fprintf(stderr, "bigip-sim: %v\n", err)
		return 1
	}
	if *caOut != "" {
		if err := os.WriteFile(*caOut, srv.CACertPEM(), 0o644); err != nil {
			srv.Close()
			fmt.Fprintf(stderr, "bigip-sim: write CA certificate: %v\n", err)
			return 1
		}
	}
	fmt.Fprintf(stdout, "bigip-sim listening on %s\n", srv.URL())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		srv.Close()
	}
	return 0
}
