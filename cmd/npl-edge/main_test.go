package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/nodeportlocal/npl/internal/cli"
)

// npl-edge refuses to start its API on every address (the VIPs' port would
// be taken) or without an address, with a usage error naming --listen.
func TestCommand_listenNeedsTheManagementAddress(t *testing.T) {
	for _, args := range [][]string{{}, {"--listen", ":8443"}, {"--listen", "0.0.0.0:8443"}, {"--listen", "[::]:8443"}, {"--listen", "198.18.2.2"}} {
		cmd := newCommand()
		cmd.SetArgs(args)
		err := cmd.Execute()
		var usage *cli.UsageError
		if !errors.As(err, &usage) || !strings.Contains(err.Error(), "--listen") {
			t.Errorf("npl-edge %v: %v, want a usage error naming --listen", args, err)
		}
	}
	if err := checkListen("198.18.2.2:8443"); err != nil {
		t.Errorf("a management address: %v", err)
	}
	if err := checkListen("edge-a.example.net:8443"); err != nil {
		t.Errorf("a host name: %v", err)
	}
}
