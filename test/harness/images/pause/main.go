// Command pause is the Pod sandbox image of the real-node test cluster: it
// holds the Pod's namespaces open, reaps the zombies it inherits as PID 1 of
// the Pod, and exits 0 on SIGINT or SIGTERM, as Kubernetes' pause image does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
