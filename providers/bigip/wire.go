package bigip

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/nodeportlocal/npl/lbmodel"
)

// The iControl REST bodies the provider sends and reads. Only the fields it
// manages are listed.

type memberBody struct {
	Name      string `json:"name"`
	Partition string `json:"partition"`
	Session   string `json:"session"`
	// Ratio is the member's weight in a ratio-member pool, 1 by default.
	Ratio int32 `json:"ratio"`
	// ConnectionLimit is set on the members of a pool whose traffic
	// policy the provider manages (0: none), nil on the others.
	ConnectionLimit *int32 `json:"connectionLimit,omitempty"`
}

type poolCreate struct {
	Name        string `json:"name"`
	Partition   string `json:"partition"`
	Description string `json:"description"`
	Monitor     string `json:"monitor"`
	// LoadBalancingMode is ratio-member for a pool with weights, else
	// round-robin.
	LoadBalancingMode string       `json:"loadBalancingMode"`
	Members           []memberBody `json:"members"`
	// SlowRampTime is set on a pool with a traffic policy.
	SlowRampTime *int32 `json:"slowRampTime,omitempty"`
}

type poolState struct {
	objectHeader
	Monitor           string                    `json:"monitor"`
	LoadBalancingMode string                    `json:"loadBalancingMode"`
	MembersReference  collectionOf[memberState] `json:"membersReference"`
	SlowRampTime      *int32                    `json:"slowRampTime"`
}

type memberState struct {
	Name      string `json:"name"`
	Partition string `json:"partition"`
	Address   string `json:"address"`
	Session   string `json:"session"`
	Ratio     int32  `json:"ratio"`
	// ConnectionLimit is 0 for none.
	ConnectionLimit int32 `json:"connectionLimit"`
}

// persistRef is an item of a virtual's persist.
type persistRef struct {
	Name      string `json:"name"`
	Partition string `json:"partition"`
}

type profileRef struct {
	Name      string `json:"name"`
	Partition string `json:"partition"`
	FullPath  string `json:"fullPath,omitempty"`
	Context   string `json:"context,omitempty"`
}

type addressTranslation struct {
	Type string `json:"type"`
}

type virtualState struct {
	objectHeader
	Destination              string                   `json:"destination"`
	IPProtocol               string                   `json:"ipProtocol"`
	Pool                     string                   `json:"pool"`
	SourceAddressTranslation addressTranslation       `json:"sourceAddressTranslation"`
	ProfilesReference        collectionOf[profileRef] `json:"profilesReference"`
	PoliciesReference        collectionOf[profileRef] `json:"policiesReference"`
	Persist                  []persistRef             `json:"persist"`
}

// collectionOf is a listing of a collection, or a subcollection of an
// object read with expandSubcollections=true.
type collectionOf[T any] struct {
	Items []T `json:"items"`
}

const (
	ownerName       = "npl"
	sessionEnabled  = "user-enabled"
	sessionDisabled = "user-disabled"
	automap         = "automap"
	// The load balancing modes of pools without and with member weights.
	roundRobin  = "round-robin"
	ratioMember = "ratio-member"
)

// ownerTag is the JSON the provider writes in each object's description: it
// tells which cluster, Service and load balancer the object belongs to, so
// that List and garbage collection touch only this cluster's objects.
type ownerTag struct {
	Owner   string `json:"owner"`
	Cluster string `json:"cluster"`
	Service string `json:"service,omitempty"`
	LB      string `json:"lb"`
	// The fields of L7 objects, omitted from L4 ones.
	L7      bool    `json:"l7,omitempty"`
	Ingress string  `json:"ingress,omitempty"`
	Gateway string  `json:"gateway,omitempty"`
	TLS     *tlsTag `json:"tls,omitempty"`
	// Policy is, on a pool with a traffic policy, the policy as applied,
	// and PolicySum the checksum of the pool fields that express it
	// (policyFields), so that List reports it while the pool has them;
	// without the policy the slow ramp and connection limits go back to
	// BIG-IP's defaults. Persist marks a virtual whose persist a policy
	// sets, emptied when none does any more.
	Policy    *lbmodel.Policy `json:"policy,omitempty"`
	PolicySum string          `json:"policySum,omitempty"`
	Persist   bool            `json:"persist,omitempty"`
	// Shared marks the cluster's monitors and persistence profiles, which
	// no one load balancer owns (LB is empty).
	Shared bool `json:"shared,omitempty"`
}

// tlsTag says, on a client-ssl profile, which certificate it serves: what
// List reports of it, since BIG-IP never shows a key.
type tlsTag struct {
	Secret      string   `json:"secret"`
	Hosts       []string `json:"hosts,omitempty"`
	Fingerprint string   `json:"fingerprint"`
	Ports       []int32  `json:"ports,omitempty"`
}

func (t ownerTag) String() string {
	b, _ := json.Marshal(t) // a struct of strings always encodes
	return string(b)
}

// readTag reads the tag in a description, whoever it belongs to.
func readTag(description string) ownerTag {
	var t ownerTag
	_ = json.Unmarshal([]byte(description), &t)
	return t
}

// parseOwner reads the tag in a description; ok is false for objects the
// cluster does not own: no tag, another owner, another cluster.
func parseOwner(description, cluster string) (ownerTag, bool) {
	var t ownerTag
	if !strings.HasPrefix(description, "{") || json.Unmarshal([]byte(description), &t) != nil {
		return ownerTag{}, false
	}
	return t, t.Owner == ownerName && t.Cluster == cluster && t.LB != ""
}

// path is the iControl REST path of a named object: "ltm/pool/~P~name".
func objectPath(collection, partition, name string) string {
	return collection + "/~" + partition + "~" + name
}

func fullPath(partition, name string) string { return "/" + partition + "/" + name }

// memberName spells a member as BIG-IP does: ip:port, or ip.port for IPv6.
func memberName(ip netip.Addr, port int32) string {
	if ip.Is6() && !ip.Is4In6() {
		return ip.String() + "." + strconv.Itoa(int(port))
	}
	return ip.String() + ":" + strconv.Itoa(int(port))
}

// parseEndpoint reads "ip:port", "ip.port" (IPv6), with an optional %rd and
// an optional /partition/ prefix, as BIG-IP spells members and destinations.
func parseEndpoint(s string) (netip.Addr, int32, error) {
	if strings.HasPrefix(s, "/") {
		if i := strings.LastIndexByte(s, '/'); i >= 0 {
			s = s[i+1:]
		}
	}
	sep := strings.LastIndexByte(s, ':')
	if strings.Count(s, ":") > 1 {
		sep = strings.LastIndexByte(s, '.')
	}
	if sep < 0 {
		return netip.Addr{}, 0, fmt.Errorf("%q is not address:port", s)
	}
	host, port := s[:sep], s[sep+1:]
	if i := strings.IndexByte(host, '%'); i >= 0 {
		host = host[:i]
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("%q is not address:port: %w", s, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("%q is not address:port: bad port", s)
	}
	return ip, int32(p), nil
}

// ipProtocol, monitor and profile of a listener protocol.
func protocolParts(p lbmodel.Protocol) (ipProtocol, monitor, profile string) {
	proto := strings.ToLower(string(p))
	return proto, "/Common/" + proto, proto
}

// validName reports whether name can be used as a BIG-IP object name and in
// a URL path as it is.
func validName(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
