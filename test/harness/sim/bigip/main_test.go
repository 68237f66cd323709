package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRun_badFlagsExitTwoWithOneLine(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"--password", "x", "--nope"}, "flag provided but not defined"},
		{"no password", []string{}, "--password is required"},
		{"ca-out without tls", []string{"--password", "x", "--ca-out", "/tmp/ca.pem"}, "--ca-out needs --tls"},
		{"stray argument", []string{"--password", "x", "serve"}, "unexpected argument"},
		{"bad duration", []string{"--password", "x", "--token-timeout", "soon"}, "invalid value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
			out := stderr.String()
			if strings.Count(out, "\n") != 1 || !strings.Contains(out, tc.want) {
				t.Errorf("stderr %q, want one line containing %q", out, tc.want)
			}
		})
	}
}

func TestRun_helpExitsZero(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--help"}, &stdout, &stderr); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	if !strings.Contains(stdout.String(), "--listen") && !strings.Contains(stdout.String(), "-listen") {
		t.Errorf("usage does not list --listen: %q", stdout.String())
	}
}
