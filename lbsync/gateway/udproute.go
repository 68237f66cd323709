package gateway

// A UDPRoute is served as a TCPRoute is (addStreamRoute, tcproute.go): on
// the UDP listeners it attaches to, with the pool of the oldest route,
// from Service ports of protocol UDP. NodePortLocal maps the UDP ports of
// the Pods as it maps their TCP ports, so the members are the same
// nodeIP:nodePort pairs a LoadBalancer Service of protocol UDP gets.
