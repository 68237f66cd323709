// Package haproxy holds what npl-edge knows of HAProxy itself: the
// configuration it renders (and reads back), the runtime API of the admin
// socket and the master CLI, and the master-worker process it supervises.
// It knows nothing of HTTP or of npl-lbsync; package edge drives it.
package haproxy

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodeportlocal/npl/providers"
)

// Checks are the health-check settings of every member: HAProxy connects to
// it every Inter, marks it down after Fall failures and up after Rise
// successes.
type Checks struct {
	Inter time.Duration
	Fall  int
	Rise  int
}

// DefaultChecks are the health-check settings when none are given.
var DefaultChecks = Checks{Inter: 2 * time.Second, Fall: 2, Rise: 1}

// Options returns the server keywords of a member's health check, the same
// in the configuration and in a runtime "add server" (dynamic servers do
// not inherit default-server settings in HAProxy 2.6).
func (c Checks) Options() string {
	return fmt.Sprintf("check inter %dms fall %d rise %d", c.Inter.Milliseconds(), c.Fall, c.Rise)
}

// Globals are the process-wide settings of the configuration.
type Globals struct {
	// AdminSocket is the path of the stats socket, at admin level, that
	// also hands the listening sockets to a new worker on reload.
	AdminSocket string
	Checks      Checks
}

// Proxy is one TCP listener of a load balancer as HAProxy serves it: a
// frontend bound to VIP:Port and a backend of the same name (the pool name)
// holding the members.
type Proxy struct {
	// Name is the pool name, the name of both the frontend and the backend.
	Name string
	// Cluster, LoadBalancer and Service say whom the proxy belongs to; the
	// configuration keeps them in its description so that it can be read
	// back.
	Cluster      string
	LoadBalancer string
	Service      string
	VIP          netip.Addr
	Port         int32
	Members      []providers.Member
}

// ServerName is the name of a member's server in its backend.
func ServerName(m providers.Member) string {
	return m.IP + "_" + strconv.Itoa(int(m.Port))
}

// Address is ip:port as HAProxy parses it (the last colon separates the
// port, so IPv6 needs no brackets).
func Address(ip string, port int32) string { return ip + ":" + strconv.Itoa(int(port)) }

// Rendered is a configuration and what tells its parts apart.
type Rendered struct {
	// Text is the whole configuration.
	Text []byte
	// Frame is the configuration without its server lines: when it changes,
	// HAProxy needs a reload; when only the servers change, the runtime API
	// applies them and the file is rewritten for the next start.
	Frame string
	// Objects maps a 1-based line number of Text to the object it belongs
	// to ("load balancer X (proxy Y)"), so that an error of HAProxy that
	// names a line names the object.
	Objects map[int]string
}

// Render writes the configuration of proxies. Members that drain are
// rendered disabled, so a started or reloaded HAProxy sends them nothing
// new; the runtime API then sets their drain state.
func Render(g Globals, proxies []Proxy) Rendered {
	proxies = slices.Clone(proxies)
	slices.SortFunc(proxies, func(a, b Proxy) int { return cmp.Compare(a.Name, b.Name) })
	var text, frame bytes.Buffer
	objects := map[int]string{}
	line := 0
	emit := func(object, s string, server bool) {
		line++
		text.WriteString(s)
		text.WriteByte('\n')
		if object != "" {
			objects[line] = object
		}
		if !server {
			frame.WriteString(s)
			frame.WriteByte('\n')
		}
	}
	emit("", "# Written by npl-edge; it replaces this file at every change.", false)
	emit("", "global", false)
	emit("", fmt.Sprintf("    stats socket %s mode 600 level admin expose-fd listeners", g.AdminSocket), false)
	emit("", "    stats timeout 30s", false)
	// A worker replaced by a reload ends its last connections after this,
	// so that reloads do not pile up old processes.
	emit("", "    hard-stop-after 10m", false)
	emit("", "defaults", false)
	emit("", "    mode tcp", false)
	emit("", "    timeout connect 3s", false)
	emit("", "    timeout client 1h", false)
	emit("", "    timeout server 1h", false)
	// A connection a member refuses (its Pod just went) is tried again on
	// another member rather than failed.
	emit("", "    retries 3", false)
	emit("", "    option redispatch", false)
	for _, p := range proxies {
		obj := fmt.Sprintf("load balancer %s (proxy %s)", p.LoadBalancer, p.Name)
		desc := fmt.Sprintf("    description npl cluster=%s lb=%s service=%s", p.Cluster, p.LoadBalancer, p.Service)
		emit(obj, "frontend "+p.Name, false)
		emit(obj, desc, false)
		emit(obj, "    bind "+Address(p.VIP.String(), p.Port), false)
		emit(obj, "    default_backend "+p.Name, false)
		emit(obj, "backend "+p.Name, false)
		emit(obj, desc, false)
		emit(obj, "    balance roundrobin", false)
		for _, m := range p.Members {
			s := fmt.Sprintf("    server %s %s %s", ServerName(m), Address(m.IP, m.Port), g.Checks.Options())
			if !m.Enabled {
				s += " disabled"
			}
			emit(obj, s, true)
		}
	}
	return Rendered{Text: text.Bytes(), Frame: frame.String(), Objects: objects}
}

// Parse reads back a configuration Render wrote: its proxies with their
// members as configured. Sections it did not write (no npl description)
// are skipped.
func Parse(text []byte) ([]Proxy, error) {
	fronts := map[string]*Proxy{}
	backs := map[string][]providers.Member{}
	var section, name string
	sc := bufio.NewScanner(bytes.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		switch fields[0] {
		case "global", "defaults", "frontend", "backend", "listen":
			section, name = fields[0], ""
			if len(fields) > 1 {
				name = fields[1]
			}
			continue
		}
		switch {
		case section == "frontend" && fields[0] == "description" && len(fields) > 1 && fields[1] == "npl":
			p := fronts[name]
			if p == nil {
				p = &Proxy{Name: name}
				fronts[name] = p
			}
			for _, kv := range fields[2:] {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "cluster":
					p.Cluster = v
				case "lb":
					p.LoadBalancer = v
				case "service":
					p.Service = v
				}
			}
		case section == "frontend" && fields[0] == "bind" && len(fields) > 1:
			p := fronts[name]
			if p == nil {
				p = &Proxy{Name: name}
				fronts[name] = p
			}
			ip, port, err := splitAddress(fields[1])
			if err != nil {
				return nil, fmt.Errorf("line %d: frontend %s: %w", n, name, err)
			}
			p.VIP, p.Port = ip, port
		case section == "backend" && fields[0] == "server" && len(fields) > 2:
			ip, port, err := splitAddress(fields[2])
			if err != nil {
				return nil, fmt.Errorf("line %d: backend %s: %w", n, name, err)
			}
			backs[name] = append(backs[name], providers.Member{IP: ip.String(), Port: port, Enabled: !slices.Contains(fields[3:], "disabled")})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var out []Proxy
	for n, p := range fronts {
		if p.LoadBalancer == "" {
			continue // not ours
		}
		p.Members = providers.SortMembers(backs[n])
		if p.Members == nil {
			p.Members = []providers.Member{}
		}
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b Proxy) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// splitAddress parses ip:port, the last colon separating the port.
func splitAddress(s string) (netip.Addr, int32, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return netip.Addr{}, 0, fmt.Errorf("address %q has no port", s)
	}
	ip, err := netip.ParseAddr(strings.Trim(s[:i], "[]"))
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("address %q: %w", s, err)
	}
	port, err := strconv.ParseUint(s[i+1:], 10, 16)
	if err != nil || port == 0 {
		return netip.Addr{}, 0, fmt.Errorf("address %q: bad port", s)
	}
	return ip.Unmap(), int32(port), nil
}
