// Package buildinfo holds the version stamped into the binaries at build time.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is set with -ldflags "-X github.com/nodeportlocal/npl/internal/buildinfo.Version=…".
var Version = "dev"

// String describes the build: version, VCS revision when known, Go version and platform.
func String(binary string) string {
	rev := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = " (" + s.Value[:12] + ")"
			}
		}
	}
	return fmt.Sprintf("%s %s%s %s %s/%s", binary, Version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
