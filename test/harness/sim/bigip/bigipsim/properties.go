package bigipsim

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
)

// BIG-IP refuses a body with a property its configuration item does not
// have ("Found unexpected json pair", REFERENCE §18) and checks the JSON
// type of the ones it has. There is no official iControl REST schema: the
// properties below are those of BIG-IP's own answers, as recorded from
// 12.1 (f5devcentral/f5-cccl f5_cccl/test/bigip_data.json: pools, members,
// virtuals; f5_cccl/resource/ltm/policy/test/bigip_policy.json: a policy
// with rules, conditions and actions), the policy shapes of F5's schema
// (f5_cccl/schemas/cccl-ltm-api-schema.yml: actions and condition
// operands) and the monitor, profile and file properties of the LTM
// objects npl uses. A property a client reads and sends back (kind,
// selfLink, generation, the references) is accepted.

// propKind is the JSON type of a property.
type propKind int

const (
	kString propKind = iota + 1
	kInt
	kBool
	kArray
	kObject
	// kAny is a property whose type varies between releases.
	kAny
)

func (k propKind) String() string {
	return [...]string{"", "a string", "an integer", "a boolean", "an array", "an object", "any value"}[k]
}

// prop is one property: its type, and for an object or an array of
// objects, the properties of the object.
type prop struct {
	kind  propKind
	items props
}

type props map[string]prop

// readBack are the properties every object's answer has.
var readBack = props{"kind": {kind: kString}, "selfLink": {kind: kString}, "generation": {kind: kInt},
	"fullPath": {kind: kString}, "name": {kind: kString}, "partition": {kind: kString}, "subPath": {kind: kString},
	"description": {kind: kString}, "appService": {kind: kString}, "metadata": {kind: kArray}}

func with(base props, kinds map[propKind][]string, nested props) props {
	out := props{}
	for k, v := range base {
		out[k] = v
	}
	for kind, names := range kinds {
		for _, n := range names {
			out[n] = prop{kind: kind}
		}
	}
	for k, v := range nested {
		out[k] = v
	}
	return out
}

var (
	memberProps = with(readBack, map[propKind][]string{
		kString: {"address", "ephemeral", "inheritProfile", "logging", "monitor", "rateLimit", "session", "state"},
		kInt:    {"connectionLimit", "dynamicRatio", "priorityGroup", "ratio"},
		kObject: {"fqdn", "nameReference"},
	}, nil)
	poolProps = with(readBack, map[propKind][]string{
		kString: {"allowNat", "allowSnat", "ignorePersistedWeight", "ipTosToClient", "ipTosToServer", "linkQosToClient",
			"linkQosToServer", "loadBalancingMode", "minUpMembersAction", "minUpMembersChecking", "monitor",
			"queueOnConnectionLimit", "serviceDownAction"},
		kInt:    {"minActiveMembers", "minUpMembers", "queueDepthLimit", "queueTimeLimit", "reselectTries", "slowRampTime"},
		kObject: {"membersReference"},
	}, props{"members": {kind: kArray, items: memberProps}})
	profileRefProps = with(readBack, map[propKind][]string{kString: {"context"}, kObject: {"nameReference"}}, nil)
	persistRefProps = with(readBack, map[propKind][]string{kString: {"tmDefault"}, kObject: {"nameReference"}}, nil)
	virtualProps    = with(readBack, map[propKind][]string{
		kString: {"addressStatus", "autoLasthop", "cmpEnabled", "destination", "fallbackPersistence", "ipProtocol", "lastHopPool",
			"mask", "mirror", "mobileAppTunnel", "nat64", "pool", "rateLimit", "rateLimitMode", "serviceDownImmediateAction",
			"source", "sourcePort", "synCookieStatus", "translateAddress", "translatePort", "creationTime", "lastModifiedTime"},
		kInt:    {"connectionLimit", "gtmScore", "rateLimitDstMask", "rateLimitSrcMask", "vsIndex"},
		kBool:   {"enabled", "disabled", "vlansDisabled", "vlansEnabled"},
		kArray:  {"rules", "rulesReference", "vlans", "securityLogProfiles"},
		kObject: {"poolReference", "profilesReference", "policiesReference", "sourceAddressTranslation"},
	}, props{
		"profiles": {kind: kArray, items: profileRefProps},
		"policies": {kind: kArray, items: profileRefProps},
		"persist":  {kind: kArray, items: persistRefProps},
	})
	// The operands, selectors, operators and flags of policy conditions:
	// those BIG-IP answers with (bigip_policy.json: index, all,
	// caseInsensitive, contains, request, tmName, values, external, remote,
	// httpHeader, present) and the operands of F5's schema (httpUri with
	// path, pathSegment and index, or extension; httpHost with host;
	// httpHeader and httpCookie with tmName).
	conditionProps = with(readBack, map[propKind][]string{
		kBool: {"all", "caseInsensitive", "caseSensitive", "contains", "endsWith", "equals", "startsWith", "not", "missing",
			"present", "external", "remote", "local", "request", "response", "httpHost", "httpUri", "httpMethod", "httpHeader",
			"httpCookie", "host", "path", "pathSegment", "extension", "queryString", "queryParameter", "port", "unnamedQueryParameter"},
		kInt:    {"index"},
		kString: {"tmName", "datagroup"},
		kArray:  {"values"},
	}, nil)
	// The actions and their fields: the defaults BIG-IP answers with
	// (bigip_policy.json: code, expirySecs, length, offset, port, status,
	// timeout, vlanId, poolReference, select), the forward, reset and
	// redirect actions of F5's schema, and the header, URI and host changes.
	actionProps = with(readBack, map[propKind][]string{
		kBool: {"forward", "select", "reset", "httpReply", "redirect", "request", "response", "httpHeader", "httpUri", "httpHost",
			"replace", "insert", "remove", "enable", "disable", "log"},
		kInt:    {"code", "expirySecs", "length", "offset", "port", "status", "timeout", "vlanId"},
		kString: {"pool", "location", "tmName", "value", "path", "queryString", "node", "virtual", "message"},
		kObject: {"poolReference"},
	}, nil)
	ruleProps = with(readBack, map[propKind][]string{kInt: {"ordinal"}}, props{
		"conditions":          {kind: kArray, items: conditionProps},
		"actions":             {kind: kArray, items: actionProps},
		"conditionsReference": {kind: kObject, items: props{"link": {kind: kString}, "isSubcollection": {kind: kBool}, "items": {kind: kArray, items: conditionProps}}},
		"actionsReference":    {kind: kObject, items: props{"link": {kind: kString}, "isSubcollection": {kind: kBool}, "items": {kind: kArray, items: actionProps}}},
	})
	policyProps = with(readBack, map[propKind][]string{
		kString: {"strategy", "status", "lastModified", "publishedCopy", "draftCopy"},
		kArray:  {"requires", "controls"},
		kBool:   {"legacy"},
		kObject: {"strategyReference", "references"},
	}, props{
		"rules":          {kind: kArray, items: ruleProps},
		"rulesReference": {kind: kObject, items: props{"link": {kind: kString}, "isSubcollection": {kind: kBool}, "items": {kind: kArray, items: ruleProps}}},
	})
	chainProps   = props{"name": {kind: kString}, "cert": {kind: kString}, "key": {kind: kString}, "chain": {kind: kString}, "passphrase": {kind: kString}}
	clientSSLPro = with(readBack, map[propKind][]string{
		kString: {"defaultsFrom", "sniRequire", "serverName", "cert", "key", "chain", "ciphers", "options"},
		// BIG-IP answers "true" or "false" and takes a boolean too.
		kAny: {"sniDefault"},
	}, props{"certKeyChain": {kind: kArray, items: chainProps}})
	sslFileProps = with(readBack, map[propKind][]string{
		kString: {"sourcePath", "checksum", "keyType", "keySize", "securityType", "expirationString", "fingerprint", "issuer", "subject"},
		kInt:    {"expirationDate", "size", "createTime", "updatedTime"},
	}, nil)
	monitorProps = with(readBack, map[propKind][]string{
		kString: {"defaultsFrom", "destination", "send", "recv", "recvDisable", "reverse", "transparent", "manualResume",
			"adaptive", "ipDscp", "upInterval", "timeUntilUp", "username", "password"},
		kInt: {"interval", "timeout"},
		kAny: {"builtin"},
	}, nil)
	nodeProps = with(readBack, map[propKind][]string{
		kString: {"address", "ephemeral", "logging", "monitor", "rateLimit", "session", "state"},
		kInt:    {"connectionLimit", "dynamicRatio", "ratio"},
		kObject: {"fqdn"},
	}, nil)
	folderProps = with(readBack, map[propKind][]string{
		kString: {"deviceGroup", "hidden", "inheritedDevicegroup", "inheritedTrafficGroup", "noRefCheck", "trafficGroup"},
		kInt:    {"defaultRouteDomain"},
	}, nil)
)

// bodyProps returns the properties a write to req's path takes and the
// configuration item it names in errors, or nil for paths whose bodies are
// not configuration (commands).
func bodyProps(segs []string) (props, string) {
	at := func(n int) string {
		if n < len(segs) {
			return segs[n]
		}
		return ""
	}
	switch {
	case at(0) == "ltm" && at(1) == "pool" && at(3) == "members":
		return memberProps, "/ltm/pool/members/"
	case at(0) == "ltm" && at(1) == "pool":
		return poolProps, "/ltm/pool/"
	case at(0) == "ltm" && at(1) == "virtual" && (at(3) == "profiles" || at(3) == "policies"):
		return profileRefProps, "/ltm/virtual/" + at(3) + "/"
	case at(0) == "ltm" && at(1) == "virtual":
		return virtualProps, "/ltm/virtual/"
	case at(0) == "ltm" && at(1) == "policy":
		return policyProps, "/ltm/policy/"
	case at(0) == "ltm" && at(1) == "monitor":
		return monitorProps, "/ltm/monitor/" + at(2) + "/"
	case at(0) == "ltm" && at(1) == "node":
		return nodeProps, "/ltm/node/"
	case at(0) == "ltm" && at(1) == "profile" && at(2) == "client-ssl":
		return clientSSLPro, "/ltm/profile/client-ssl/"
	case at(0) == "sys" && at(1) == "file":
		return sslFileProps, "/sys/file/" + at(2) + "/"
	case at(0) == "sys" && at(1) == "folder", at(0) == "auth" && at(1) == "partition":
		return folderProps, "/" + at(0) + "/" + at(1) + "/"
	}
	return nil, ""
}

// checkProperties refuses a write whose body has a property the item does
// not have, or a value of the wrong JSON type. A policy's publish command
// ({"command":"publish","name":...}) is not configuration and passes.
func checkProperties(req request) (response, bool) {
	if req.method != http.MethodPost && req.method != http.MethodPut && req.method != http.MethodPatch {
		return response{}, true
	}
	known, item := bodyProps(req.segs)
	if known == nil {
		return response{}, true
	}
	body, good := decodeBody(req.body)
	if !good {
		return invalidJSON(), false
	}
	if cmd := str(body, "command"); cmd != "" && len(req.segs) == 2 {
		return response{}, true
	}
	return checkObject(body, known, item)
}

func checkObject(o obj, known props, item string) (response, bool) {
	for _, k := range sortedKeys(o) {
		v := o[k]
		p, found := known[k]
		if !found {
			return unexpectedPair(item, k, v), false
		}
		if v == nil {
			continue
		}
		if !p.kind.accepts(v) {
			return badRequest("01070734:3: Configuration error: the value of property %q at configuration item %s must be %s, not %s",
				k, item, p.kind, jsonKind(v)), false
		}
		if p.items == nil {
			continue
		}
		sub := item + k + "/"
		switch t := v.(type) {
		case map[string]any:
			if resp, good := checkObject(t, p.items, sub); !good {
				return resp, false
			}
		case []any:
			for _, it := range t {
				m, isObj := it.(map[string]any)
				if !isObj {
					if _, isString := it.(string); isString && slices.Contains([]string{"members", "profiles", "policies", "persist"}, k) {
						continue // a name alone, as go-bigip sends some
					}
					return badRequest("01070734:3: Configuration error: the items of property %q at configuration item %s must be objects", k, item), false
				}
				if resp, good := checkObject(m, p.items, sub); !good {
					return resp, false
				}
			}
		}
	}
	return response{}, true
}

// unexpectedPair is BIG-IP's answer to an unknown property.
func unexpectedPair(item, k string, v any) response {
	raw, _ := json.Marshal(v)
	return badRequest("Found unexpected json pair at configuration item %s. The json pair is %q:%s.", item, k, raw)
}

func (k propKind) accepts(v any) bool {
	switch k {
	case kString:
		_, ok := v.(string)
		return ok
	case kInt:
		f, ok := v.(float64)
		return ok && f == math.Trunc(f)
	case kBool:
		_, ok := v.(bool)
		return ok
	case kArray:
		_, ok := v.([]any)
		return ok
	case kObject:
		_, ok := v.(map[string]any)
		return ok
	}
	return true
}

func jsonKind(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
