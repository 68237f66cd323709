// Package podreply holds what a test workload answers, so the servers that
// stand in for Pods and the workload image that runs in real containers
// answer alike and the tests read one format.
package podreply

import "fmt"

// Header is the HTTP response header that names the Pod (namespace/name).
const Header = "X-Pod"

// HeaderValue is the value of Header for the Pod namespace/name.
func HeaderValue(namespace, name string) string {
	return namespace + "/" + name
}

// Body is the HTTP response body of the Pod called name.
func Body(name string) string {
	return name + "\n"
}

// Echo is the UDP reply of the Pod called name to payload.
func Echo(name string, payload []byte) []byte {
	return fmt.Appendf(nil, "%s: %s", name, payload)
}
