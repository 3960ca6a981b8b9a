// Command pause is the node fixture's sandbox image: a static binary that holds a pod's
// namespaces open until it is told to stop, as the registry's pause image does, built here
// because these machines reach no image registry. It also serves as the tests' idle
// workload (a build pod's container): it does nothing but wait.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	<-signals
}
