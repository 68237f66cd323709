// Command npl-images builds the container images of the real-node test
// cluster (`make images`): bin/images/<name>.tar for npl-agent, npl-lbsync,
// nplctl, pause and npl-workload, each loadable with `ctr images import`.
// Images whose inputs did not change are not rebuilt.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/nodeportlocal/npl/test/harness/images"
)

func main() {
	var cfg images.Config
	flag.StringVar(&cfg.RepoRoot, "repo", ".", "the checkout")
	flag.StringVar(&cfg.BinDir, "bin", "bin", "directory of npl-agent, npl-lbsync and nplctl (make build)")
	flag.StringVar(&cfg.OutDir, "out", "bin/images", "directory the image tarballs are written to")
	flag.StringVar(&cfg.Tag, "tag", "dev", "tag of every image")
	flag.Parse()
	cfg.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	start := time.Now()
	res, err := images.Build(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "npl-images: %v\n", err)
		os.Exit(1)
	}
	for _, r := range res {
		state := "built"
		if r.Cached {
			state = "up to date"
		}
		fmt.Printf("images: %-12s %s %s (%s)\n", r.Name, r.Path, r.Ref, state)
	}
	fmt.Printf("images: done in %s\n", time.Since(start).Round(10*time.Millisecond))
}
