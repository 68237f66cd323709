package avi

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// TestMain sends the alb-sdk's glog lines to files in a temporary directory
// rather than stderr, where they would bury test failures and benchmark
// results. prepareSDKLogging respects a destination chosen this way.
func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "npl-avi-glog-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_ = flag.Set("log_dir", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
