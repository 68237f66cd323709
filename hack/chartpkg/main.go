// Command chartpkg packages the npl Helm chart with the Gateway API CRDs
// (`make chart`): go run ./hack/chartpkg -chart charts/npl -out bin/chart.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/nodeportlocal/npl/internal/chartpkg"
)

func main() {
	dir := flag.String("chart", "charts/npl", "the chart's directory")
	out := flag.String("out", "bin/chart", "where to write the packaged chart")
	flag.Parse()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "chartpkg:", err)
		os.Exit(1)
	}
	path, err := chartpkg.Package(context.Background(), *dir, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chartpkg:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}
