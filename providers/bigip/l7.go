package bigip

import (
	"cmp"
	"context"
	"crypto/sha1" //nolint:gosec // BIG-IP's file checksums are SHA-1; they only detect changes.
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/providers"
)

// An L7 load balancer is, on BIG-IP: one pool per model pool (as L4 pools);
// an LTM policy named like the load balancer whose first-match rules test
// the HTTP host and URI path and forward to a pool; per TLS Secret a
// certificate and a key (sys/file ssl-cert and ssl-key, uploaded, named
// after their content so that a new certificate never meets the old key)
// and a client-ssl profile using them; and one virtual server per listener
// on the VIP with the tcp and http profiles, the client-ssl profiles on
// HTTPS ones, the policy, and the default pool as its pool. Policies are
// changed as BIG-IP 12.1 and later require: a draft, then publish.

const (
	// profileClientSSL is the parent of the client-ssl profiles.
	profileClientSSL = "/Common/clientssl"
	// fingerprintInName is how much of the certificate's fingerprint names
	// its files.
	fingerprintInName = 12
)

type l7Plan struct {
	pools    []listenerPlan // the name, monitor and members of each pool
	virtuals []l7VirtualPlan
	policy   []policyRule
	certs    []certPlan
	// defaultPool is the full path of the default pool, or "".
	defaultPool string
	requested   netip.Addr
}

type l7VirtualPlan struct {
	name  string
	port  int32
	https bool
}

// policyRule is one rule of the LTM policy as the provider makes it and
// reads it back: a host test (empty: any; *.x: ends with .x), a path test,
// and the pool it forwards to.
type policyRule struct {
	Name   string
	Host   string
	Path   string
	Prefix bool
	Pool   string // full path
}

type certPlan struct {
	profile string // the client-ssl profile's name
	file    string // the ssl-cert's and ssl-key's name
	cert    providers.TLSCert
	// sniDefault marks the profile that serves clients without SNI, when a
	// virtual has several.
	sniDefault bool
	serverName string
}

// planL7 turns an L7 load balancer, a model that passed
// providers.Normalize, into BIG-IP objects; it checks what only BIG-IP
// requires (names).
func (p *provider) planL7(lb *providers.LoadBalancer) (*l7Plan, error) {
	if !providers.OwnedBy(p.cfg.common.ClusterName, lb.Name) {
		return nil, fmt.Errorf("name does not start with the cluster name %s and --", p.cfg.common.ClusterName)
	}
	if !validName(lb.Name) {
		return nil, fmt.Errorf("name %q is not a valid BIG-IP name (letters, digits, '.', '_', '-')", lb.Name)
	}
	plan := &l7Plan{}
	if lb.RequestedVIP != "" {
		a, err := netip.ParseAddr(lb.RequestedVIP)
		if err != nil {
			return nil, fmt.Errorf("requested VIP %q: %w", lb.RequestedVIP, err)
		}
		plan.requested = a
	}
	names := map[string]string{} // BIG-IP name -> what uses it
	claim := func(name, what string) error {
		if !validName(name) {
			return fmt.Errorf("%s: %q is not a valid BIG-IP name (letters, digits, '.', '_', '-')", what, name)
		}
		if other, taken := names[name]; taken {
			return fmt.Errorf("%s and %s are both named %s", other, what, name)
		}
		names[name] = what
		return nil
	}
	for _, pl := range lb.Pools {
		if err := claim(pl.Name, "pool "+pl.Name); err != nil {
			return nil, err
		}
		members, err := p.memberBodies(pl.Name, pl.Members)
		if err != nil {
			return nil, err
		}
		plan.pools = append(plan.pools, listenerPlan{name: pl.Name, monitor: "/Common/tcp", members: members})
	}
	for _, l := range lb.Listeners {
		name := providers.ListenerName(lb.Name, l.Protocol, l.Port)
		if err := claim(name, fmt.Sprintf("listener %s/%d", l.Protocol, l.Port)); err != nil {
			return nil, err
		}
		plan.virtuals = append(plan.virtuals, l7VirtualPlan{name: name, port: l.Port, https: l.Protocol == providers.HTTPS})
	}
	if lb.HTTP.DefaultPool != "" {
		plan.defaultPool = fullPath(p.cfg.Partition, lb.HTTP.DefaultPool)
	}
	rules := slices.Clone(lb.HTTP.Rules)
	providers.SortRules(rules)
	for i, r := range rules {
		for j, m := range r.PathMatches() {
			plan.policy = append(plan.policy, policyRule{Name: fmt.Sprintf("rule-%d.%d", i, j), Host: r.Host,
				Path: m.Path, Prefix: m.Prefix, Pool: fullPath(p.cfg.Partition, r.Pool)})
		}
	}
	for i, c := range lb.HTTP.TLS {
		profile := providers.CertificateName(lb.Name, c.Secret)
		if err := claim(profile, "TLS Secret "+c.Secret); err != nil {
			return nil, err
		}
		cp := certPlan{profile: profile, file: profile + "-" + c.Fingerprint[:fingerprintInName], cert: c, sniDefault: i == 0}
		if len(lb.HTTP.TLS) > 1 && len(c.Hosts) > 0 {
			// With several certificates, SNI picks by server name (BIG-IP
			// also matches the certificate's names).
			cp.serverName = c.Hosts[0]
		}
		plan.certs = append(plan.certs, cp)
	}
	return plan, nil
}

func (p *provider) l7Tag(lb *providers.LoadBalancer) ownerTag {
	return ownerTag{Owner: ownerName, Cluster: p.cfg.common.ClusterName, LB: lb.Name, L7: true, Ingress: lb.Ingress}
}

// ensureL7 makes the objects of an L7 load balancer match it, writing only
// what differs: pools, certificates and keys, client-ssl profiles, the
// policy, virtuals; then it deletes the virtuals, profiles, certificates and
// pools no longer wanted.
func (p *provider) ensureL7(ctx context.Context, lb *providers.LoadBalancer) (providers.Status, error) {
	plan, err := p.planL7(lb)
	if err != nil {
		return providers.Status{}, fmt.Errorf("ensure load balancer %s: %w", lb.Name, err)
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("lb", lb.Name))
	if err := p.ensurePartition(ctx); err != nil {
		return providers.Status{}, fmt.Errorf("ensure load balancer %s: %w", lb.Name, err)
	}
	if err := p.loadInventory(ctx); err != nil {
		return providers.Status{}, fmt.Errorf("ensure load balancer %s: %w", lb.Name, err)
	}
	tag := p.l7Tag(lb)
	var virtualNames, poolNames []string
	for _, v := range plan.virtuals {
		virtualNames = append(virtualNames, v.name)
	}
	for _, pl := range plan.pools {
		poolNames = append(poolNames, pl.name)
	}
	virtuals, pools, err := p.readObjects(ctx, lb.Name, virtualNames, poolNames)
	if err != nil {
		return providers.Status{}, fmt.Errorf("ensure load balancer %s: %w", lb.Name, err)
	}
	vip, err := p.chooseVIP(lb.Name, plan.requested, virtuals)
	if err != nil {
		return providers.Status{}, fmt.Errorf("ensure load balancer %s: %w", lb.Name, err)
	}
	for _, pl := range plan.pools {
		if err := p.syncPool(ctx, tag, pl, pools[pl.name]); err != nil {
			return providers.Status{}, p.fail(lb.Name, err)
		}
	}
	var oldFiles []string // certificate files the profiles no longer use
	for _, c := range plan.certs {
		old, err := p.syncCert(ctx, tag, c)
		if err != nil {
			return providers.Status{}, p.fail(lb.Name, err)
		}
		oldFiles = append(oldFiles, old...)
	}
	if err := p.syncPolicy(ctx, tag, plan.policy); err != nil {
		return providers.Status{}, p.fail(lb.Name, err)
	}
	profiles := make([]string, 0, len(plan.certs))
	for _, c := range plan.certs {
		profiles = append(profiles, c.profile)
	}
	for _, v := range plan.virtuals {
		if err := p.syncL7Virtual(ctx, tag, v, vip, plan.defaultPool, profiles, virtuals[v.name]); err != nil {
			return providers.Status{}, p.fail(lb.Name, err)
		}
	}

	desiredVirtuals := map[string]bool{}
	for _, n := range virtualNames {
		desiredVirtuals[n] = true
	}
	for _, name := range sortedKeys(virtuals) {
		if !desiredVirtuals[name] {
			if err := p.deleteVirtual(ctx, name); err != nil {
				return providers.Status{}, p.fail(lb.Name, err)
			}
		}
	}
	// The client-ssl profiles the virtuals used and no longer use.
	stale := map[string]bool{}
	for _, v := range virtuals {
		for _, pr := range v.ProfilesReference.Items {
			if pr.Partition == p.cfg.Partition && !slices.Contains(profiles, pr.Name) {
				stale[pr.Name] = true
			}
		}
	}
	for _, name := range sortedKeys(stale) {
		if err := p.deleteProfile(ctx, lb.Name, name); err != nil {
			return providers.Status{}, p.fail(lb.Name, err)
		}
	}
	for _, f := range oldFiles {
		if err := p.deleteFiles(ctx, f); err != nil {
			return providers.Status{}, p.fail(lb.Name, err)
		}
	}
	desiredPools := map[string]bool{}
	for _, n := range poolNames {
		desiredPools[n] = true
	}
	for _, name := range sortedKeys(pools) {
		if !desiredPools[name] {
			if err := p.deletePool(ctx, name); err != nil {
				return providers.Status{}, p.fail(lb.Name, err)
			}
		}
	}
	return providers.Status{VIPs: []string{vip.String()}}, nil
}

// Certificates, keys and client-ssl profiles.

type fileState struct {
	Name     string `json:"name"`
	Checksum string `json:"checksum"`
}

type chainLink struct {
	Name string `json:"name"`
	Cert string `json:"cert"`
	Key  string `json:"key"`
}

type clientSSLState struct {
	Name         string      `json:"name"`
	Partition    string      `json:"partition"`
	Description  string      `json:"description"`
	DefaultsFrom string      `json:"defaultsFrom"`
	CertKeyChain []chainLink `json:"certKeyChain"`
	SNIDefault   string      `json:"sniDefault"`
	ServerName   string      `json:"serverName"`
}

// fileChecksum is the checksum BIG-IP computes of a file: SHA1:<size>:<hex>.
func fileChecksum(data []byte) string {
	sum := sha1.Sum(data) //nolint:gosec // BIG-IP's checksum format.
	return "SHA1:" + strconv.Itoa(len(data)) + ":" + hex.EncodeToString(sum[:])
}

// syncFile makes the ssl-cert or ssl-key (typ) name hold data: uploaded and
// created when missing, replaced when its checksum differs.
func (p *provider) syncFile(ctx context.Context, typ, name string, data []byte) error {
	path := objectPath("sys/file/"+typ, p.cfg.Partition, name)
	var cur fileState
	err := p.api.do(ctx, http.MethodGet, path, nil, &cur)
	switch {
	case err == nil && cur.Checksum == fileChecksum(data):
		return nil
	case err != nil && !isNotFound(err):
		return fmt.Errorf("read %s %s: %w", typ, fullPath(p.cfg.Partition, name), err)
	}
	upload := name + "." + strings.TrimPrefix(typ, "ssl-")
	if uerr := p.api.upload(ctx, upload, data); uerr != nil {
		return uerr
	}
	source := "file://" + uploadDir + upload
	if err == nil {
		err = p.api.do(ctx, http.MethodPatch, path, map[string]any{"sourcePath": source}, nil)
	} else {
		err = p.api.do(ctx, http.MethodPost, "sys/file/"+typ,
			map[string]any{"name": name, "partition": p.cfg.Partition, "sourcePath": source}, nil)
	}
	if err != nil {
		return fmt.Errorf("write %s %s: %w", typ, fullPath(p.cfg.Partition, name), err)
	}
	klog.FromContext(ctx).V(2).Info("Wrote certificate file", "type", typ, "name", fullPath(p.cfg.Partition, name))
	return nil
}

// uploadDir is where BIG-IP keeps uploaded files.
const uploadDir = "/var/config/rest/downloads/"

// syncCert makes the certificate, key and client-ssl profile of c match,
// and returns the files the profile used before and no longer does.
func (p *provider) syncCert(ctx context.Context, tag ownerTag, c certPlan) ([]string, error) {
	if err := p.syncFile(ctx, "ssl-cert", c.file, c.cert.CertPEM); err != nil {
		return nil, err
	}
	if err := p.syncFile(ctx, "ssl-key", c.file, c.cert.KeyPEM); err != nil {
		return nil, err
	}
	tag.TLS = &tlsTag{Secret: c.cert.Secret, Hosts: c.cert.Hosts, Fingerprint: c.cert.Fingerprint}
	desc := tag.String()
	file := fullPath(p.cfg.Partition, c.file)
	chain := []chainLink{{Name: "default", Cert: file, Key: file}}
	serverName := cmp.Or(c.serverName, "none")
	fp := fullPath(p.cfg.Partition, c.profile)
	path := objectPath("ltm/profile/client-ssl", p.cfg.Partition, c.profile)

	var cur clientSSLState
	err := p.api.do(ctx, http.MethodGet, path, nil, &cur)
	if isNotFound(err) {
		err = p.api.do(ctx, http.MethodPost, "ltm/profile/client-ssl", map[string]any{
			"name": c.profile, "partition": p.cfg.Partition, "description": desc, "defaultsFrom": profileClientSSL,
			"certKeyChain": chain, "sniDefault": strconv.FormatBool(c.sniDefault), "serverName": serverName,
		}, nil)
		if err != nil {
			return nil, fmt.Errorf("create client-ssl profile %s: %w", fp, err)
		}
		klog.FromContext(ctx).V(2).Info("Created client-ssl profile", "profile", fp)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read client-ssl profile %s: %w", fp, err)
	}
	if err := p.checkOwner("client-ssl profile", c.profile, cur.Description, tag.LB, true); err != nil {
		return nil, err
	}
	body := map[string]any{}
	var old []string
	if !slices.Equal(cur.CertKeyChain, chain) {
		body["certKeyChain"] = chain
		for _, l := range cur.CertKeyChain {
			for _, f := range []string{l.Cert, l.Key} {
				if name, found := strings.CutPrefix(f, "/"+p.cfg.Partition+"/"); found && name != c.file && !slices.Contains(old, name) {
					old = append(old, name)
				}
			}
		}
	}
	if cur.Description != desc {
		body["description"] = desc
	}
	if cur.DefaultsFrom != profileClientSSL {
		body["defaultsFrom"] = profileClientSSL
	}
	if cur.SNIDefault != strconv.FormatBool(c.sniDefault) {
		body["sniDefault"] = strconv.FormatBool(c.sniDefault)
	}
	if cmp.Or(cur.ServerName, "none") != serverName {
		body["serverName"] = serverName
	}
	if len(body) == 0 {
		return nil, nil
	}
	if err := p.api.do(ctx, http.MethodPatch, path, body, nil); err != nil {
		return nil, fmt.Errorf("update client-ssl profile %s: %w", fp, err)
	}
	klog.FromContext(ctx).V(2).Info("Updated client-ssl profile", "profile", fp, "fields", slices.Sorted(maps.Keys(body)))
	return old, nil
}

// deleteProfile deletes a client-ssl profile of load balancer lb and the
// files it uses; one that is gone or not the load balancer's is left.
func (p *provider) deleteProfile(ctx context.Context, lb, name string) error {
	fp := fullPath(p.cfg.Partition, name)
	path := objectPath("ltm/profile/client-ssl", p.cfg.Partition, name)
	var cur clientSSLState
	err := p.api.do(ctx, http.MethodGet, path, nil, &cur)
	switch {
	case isNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("read client-ssl profile %s: %w", fp, err)
	case !p.owns(cur.Description, lb):
		return nil
	}
	if err := p.api.do(ctx, http.MethodDelete, path, nil, nil); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete client-ssl profile %s: %w", fp, err)
	}
	klog.FromContext(ctx).V(2).Info("Deleted client-ssl profile", "profile", fp)
	for _, l := range cur.CertKeyChain {
		if name, found := strings.CutPrefix(l.Cert, "/"+p.cfg.Partition+"/"); found {
			if err := p.deleteFiles(ctx, name); err != nil {
				return err
			}
		}
	}
	return nil
}

// deleteFiles deletes the ssl-cert and ssl-key name; gone ones are fine.
func (p *provider) deleteFiles(ctx context.Context, name string) error {
	for _, typ := range []string{"ssl-cert", "ssl-key"} {
		err := p.api.do(ctx, http.MethodDelete, objectPath("sys/file/"+typ, p.cfg.Partition, name), nil, nil)
		if err != nil && !isNotFound(err) {
			return fmt.Errorf("delete %s %s: %w", typ, fullPath(p.cfg.Partition, name), err)
		}
	}
	klog.FromContext(ctx).V(2).Info("Deleted certificate files", "name", fullPath(p.cfg.Partition, name))
	return nil
}

// The LTM policy.

type conditionState struct {
	Name            string   `json:"name"`
	HTTPHost        bool     `json:"httpHost,omitempty"`
	HTTPURI         bool     `json:"httpUri,omitempty"`
	Host            bool     `json:"host,omitempty"`
	Path            bool     `json:"path,omitempty"`
	Equals          bool     `json:"equals,omitempty"`
	StartsWith      bool     `json:"startsWith,omitempty"`
	EndsWith        bool     `json:"endsWith,omitempty"`
	Not             bool     `json:"not,omitempty"`
	CaseInsensitive bool     `json:"caseInsensitive,omitempty"`
	Request         bool     `json:"request,omitempty"`
	Values          []string `json:"values"`
}

type actionState struct {
	Name    string `json:"name"`
	Forward bool   `json:"forward,omitempty"`
	Select  bool   `json:"select,omitempty"`
	Request bool   `json:"request,omitempty"`
	Pool    string `json:"pool,omitempty"`
}

type ruleState struct {
	Name                string `json:"name"`
	Ordinal             int    `json:"ordinal"`
	ConditionsReference struct {
		Items []conditionState `json:"items"`
	} `json:"conditionsReference"`
	ActionsReference struct {
		Items []actionState `json:"items"`
	} `json:"actionsReference"`
}

type policyState struct {
	Name           string   `json:"name"`
	Partition      string   `json:"partition"`
	FullPath       string   `json:"fullPath"`
	Description    string   `json:"description"`
	Strategy       string   `json:"strategy"`
	Requires       []string `json:"requires"`
	Controls       []string `json:"controls"`
	Status         string   `json:"status"`
	RulesReference struct {
		Items []ruleState `json:"items"`
	} `json:"rulesReference"`
}

type ruleBody struct {
	Name       string           `json:"name"`
	Ordinal    int              `json:"ordinal"`
	Conditions []conditionState `json:"conditions"`
	Actions    []actionState    `json:"actions"`
}

const policyStrategy = "/Common/first-match"

func ruleBodies(rules []policyRule) []ruleBody {
	out := make([]ruleBody, 0, len(rules))
	for i, r := range rules {
		b := ruleBody{Name: r.Name, Ordinal: i}
		switch {
		case strings.HasPrefix(r.Host, "*."):
			b.Conditions = append(b.Conditions, conditionState{Name: "0", HTTPHost: true, Host: true, EndsWith: true,
				CaseInsensitive: true, Request: true, Values: []string{r.Host[1:]}})
		case r.Host != "":
			b.Conditions = append(b.Conditions, conditionState{Name: "0", HTTPHost: true, Host: true, Equals: true,
				CaseInsensitive: true, Request: true, Values: []string{r.Host}})
		}
		uri := conditionState{Name: strconv.Itoa(len(b.Conditions)), HTTPURI: true, Path: true, Request: true, Values: []string{r.Path}}
		if r.Prefix {
			uri.StartsWith = true
		} else {
			uri.Equals = true
		}
		b.Conditions = append(b.Conditions, uri)
		b.Actions = []actionState{{Name: "0", Forward: true, Select: true, Request: true, Pool: r.Pool}}
		out = append(out, b)
	}
	return out
}

// rulesOf reads a policy's rules back in ordinal order. A rule the provider
// does not make reads as one no plan has, so that it is rewritten.
func rulesOf(st *policyState) []policyRule {
	rules := slices.Clone(st.RulesReference.Items)
	slices.SortStableFunc(rules, func(a, b ruleState) int { return cmp.Compare(a.Ordinal, b.Ordinal) })
	out := make([]policyRule, 0, len(rules))
	for _, r := range rules {
		pr := policyRule{Name: r.Name}
		conds := r.ConditionsReference.Items
		if len(conds) == 2 {
			h := conds[0]
			switch {
			case !h.HTTPHost || !h.Host || h.Not || len(h.Values) != 1:
				pr.Host = "?"
			case h.Equals && !h.EndsWith:
				pr.Host = h.Values[0]
			case h.EndsWith && !h.Equals && strings.HasPrefix(h.Values[0], "."):
				pr.Host = "*" + h.Values[0]
			default:
				pr.Host = "?"
			}
			conds = conds[1:]
		}
		if len(conds) == 1 && conds[0].HTTPURI && conds[0].Path && !conds[0].Not && len(conds[0].Values) == 1 &&
			conds[0].Equals != conds[0].StartsWith {
			pr.Path, pr.Prefix = conds[0].Values[0], conds[0].StartsWith
		} else {
			pr.Path = "?"
		}
		if a := r.ActionsReference.Items; len(a) == 1 && a[0].Forward {
			pr.Pool = a[0].Pool
		}
		out = append(out, pr)
	}
	return out
}

// syncPolicy makes the published policy of load balancer tag.LB hold rules:
// created as a draft and published when missing; changed through a draft of
// it when its rules or description differ.
func (p *provider) syncPolicy(ctx context.Context, tag ownerTag, rules []policyRule) error {
	name := tag.LB
	fp := fullPath(p.cfg.Partition, name)
	desc := tag.String()
	cur, err := p.getPolicy(ctx, name)
	if err != nil {
		return err
	}
	if cur != nil {
		if err := p.checkOwner("policy", name, cur.Description, tag.LB, true); err != nil {
			return err
		}
		if cur.Description == desc && cur.Strategy == policyStrategy && slices.Equal(rulesOf(cur), rules) &&
			slices.Contains(cur.Requires, "http") && slices.Contains(cur.Controls, "forwarding") {
			return nil
		}
	}
	body := map[string]any{
		"description": desc, "strategy": policyStrategy, "requires": []string{"http"}, "controls": []string{"forwarding"},
		"rules": ruleBodies(rules),
	}
	draft := objectPath("ltm/policy", p.cfg.Partition, "Drafts~"+name)
	if cur == nil {
		create := maps.Clone(body)
		create["name"], create["partition"], create["subPath"] = name, p.cfg.Partition, "Drafts"
		err = p.api.do(ctx, http.MethodPost, "ltm/policy", create, nil)
		if isConflict(err) {
			// A draft left by a failed publish: replace its content.
			err = p.api.do(ctx, http.MethodPut, draft, body, nil)
		}
		if err != nil {
			return fmt.Errorf("create policy draft %s: %w", fp, err)
		}
	} else {
		err := p.api.do(ctx, http.MethodPatch, objectPath("ltm/policy", p.cfg.Partition, name)+"?options=create-draft", map[string]any{}, nil)
		if err != nil && !isConflict(err) {
			return fmt.Errorf("create a draft of policy %s: %w", fp, err)
		}
		if err := p.api.do(ctx, http.MethodPut, draft, body, nil); err != nil {
			return fmt.Errorf("update policy draft %s: %w", fp, err)
		}
	}
	publish := map[string]any{"command": "publish", "name": fullPath(p.cfg.Partition, "Drafts/"+name)}
	if err := p.api.do(ctx, http.MethodPost, "ltm/policy", publish, nil); err != nil {
		return fmt.Errorf("publish policy %s: %w", fp, err)
	}
	klog.FromContext(ctx).V(2).Info("Published policy", "policy", fp, "rules", len(rules))
	return nil
}

func (p *provider) getPolicy(ctx context.Context, name string) (*policyState, error) {
	var st policyState
	err := p.api.do(ctx, http.MethodGet, objectPath("ltm/policy", p.cfg.Partition, name)+"?expandSubcollections=true", nil, &st)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read policy %s: %w", fullPath(p.cfg.Partition, name), err)
	}
	return &st, nil
}

// deletePolicy deletes the policy of load balancer lb and a draft of it,
// those that exist and are the load balancer's.
func (p *provider) deletePolicy(ctx context.Context, lb string) error {
	var policies collectionOf[policyState]
	if err := p.api.do(ctx, http.MethodGet, "ltm/policy?$filter=partition+eq+"+p.cfg.Partition, nil, &policies); err != nil {
		return fmt.Errorf("list policies of partition %s: %w", p.cfg.Partition, err)
	}
	// The published policy goes first: a virtual may not use a draft.
	for _, fp := range []string{fullPath(p.cfg.Partition, lb), fullPath(p.cfg.Partition, "Drafts/"+lb)} {
		i := slices.IndexFunc(policies.Items, func(st policyState) bool { return st.FullPath == fp })
		if i < 0 || !p.owns(policies.Items[i].Description, lb) {
			continue
		}
		err := p.api.do(ctx, http.MethodDelete, "ltm/policy/"+strings.ReplaceAll(fp, "/", "~"), nil, nil)
		if err != nil && !isNotFound(err) {
			return fmt.Errorf("delete policy %s: %w", fp, err)
		}
		klog.FromContext(ctx).V(2).Info("Deleted policy", "policy", fp)
	}
	return nil
}

// Virtual servers.

type l7VirtualBody struct {
	Name                     string             `json:"name,omitempty"`
	Partition                string             `json:"partition,omitempty"`
	Description              string             `json:"description"`
	Destination              string             `json:"destination"`
	IPProtocol               string             `json:"ipProtocol"`
	Pool                     string             `json:"pool"`
	SourceAddressTranslation addressTranslation `json:"sourceAddressTranslation"`
	Profiles                 []profileRef       `json:"profiles"`
	Policies                 []profileRef       `json:"policies"`
}

// l7Profiles are the profiles of an L7 virtual: tcp and http, and on HTTPS
// the client-ssl profiles, client side.
func (p *provider) l7Profiles(https bool, sslProfiles []string) []profileRef {
	out := []profileRef{
		{Name: "tcp", Partition: commonPartitionName, Context: "all"},
		{Name: "http", Partition: commonPartitionName, Context: "all"},
	}
	if https {
		for _, n := range sslProfiles {
			out = append(out, profileRef{Name: n, Partition: p.cfg.Partition, Context: "clientside"})
		}
	}
	return out
}

func refPaths(refs []profileRef) []string {
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		out = append(out, cmp.Or(r.FullPath, fullPath(r.Partition, r.Name)))
	}
	slices.Sort(out)
	return out
}

// syncL7Virtual creates the virtual of listener v, or patches the fields of
// cur that differ.
func (p *provider) syncL7Virtual(ctx context.Context, tag ownerTag, v l7VirtualPlan, vip netip.Addr, defaultPool string,
	sslProfiles []string, cur *virtualState) error {
	log := klog.FromContext(ctx)
	fp := fullPath(p.cfg.Partition, v.name)
	want := l7VirtualBody{
		Description: tag.String(), Destination: fullPath(p.cfg.Partition, memberName(vip, v.port)), IPProtocol: "tcp",
		Pool: defaultPool, SourceAddressTranslation: addressTranslation{Type: automap},
		Profiles: p.l7Profiles(v.https, sslProfiles),
		Policies: []profileRef{{Name: tag.LB, Partition: p.cfg.Partition}},
	}
	if cur == nil {
		create := want
		create.Name, create.Partition = v.name, p.cfg.Partition
		err := p.api.do(ctx, http.MethodPost, "ltm/virtual", create, nil)
		if err == nil {
			p.inv.setVirtual(v.name, tag.LB, vip)
			log.V(2).Info("Created virtual server", "virtual", fp, "destination", want.Destination)
			return nil
		}
		if !isConflict(err) {
			return fmt.Errorf("create virtual server %s: %w", fp, err)
		}
		if cur, err = p.getVirtual(ctx, v.name); err != nil {
			return err
		}
		if cur == nil {
			return fmt.Errorf("create virtual server %s: BIG-IP says it exists but cannot read it", fp)
		}
		if err := p.checkOwner("virtual server", v.name, cur.Description, tag.LB, true); err != nil {
			return err
		}
	}
	body := map[string]any{}
	if cur.Destination != want.Destination {
		body["destination"] = want.Destination
	}
	if cur.IPProtocol != want.IPProtocol {
		body["ipProtocol"] = want.IPProtocol
	}
	if cur.Pool != want.Pool {
		body["pool"] = cmp.Or(want.Pool, "none")
	}
	if cur.SourceAddressTranslation.Type != automap {
		body["sourceAddressTranslation"] = want.SourceAddressTranslation
	}
	if cur.Description != want.Description {
		body["description"] = want.Description
	}
	if !slices.Equal(refPaths(cur.ProfilesReference.Items), refPaths(want.Profiles)) {
		body["profiles"] = want.Profiles
	}
	if !slices.Equal(refPaths(cur.PoliciesReference.Items), refPaths(want.Policies)) {
		body["policies"] = want.Policies
	}
	if len(body) > 0 {
		if err := p.api.do(ctx, http.MethodPatch, objectPath("ltm/virtual", p.cfg.Partition, v.name), body, nil); err != nil {
			return fmt.Errorf("update virtual server %s: %w", fp, err)
		}
		log.V(2).Info("Updated virtual server", "virtual", fp, "fields", slices.Sorted(maps.Keys(body)))
	}
	p.inv.setVirtual(v.name, tag.LB, vip)
	return nil
}

// deleteL7 removes the virtuals, policy, client-ssl profiles with their
// certificates and keys, and pools of the L7 load balancer name.
func (p *provider) deleteL7(ctx context.Context, name string) error {
	virtuals, pools := p.inv.objectsOf(name)
	for _, v := range virtuals {
		if err := p.deleteVirtual(ctx, v); err != nil {
			return err
		}
	}
	if err := p.deletePolicy(ctx, name); err != nil {
		return err
	}
	var profiles collectionOf[clientSSLState]
	if err := p.api.do(ctx, http.MethodGet, "ltm/profile/client-ssl?$filter=partition+eq+"+p.cfg.Partition, nil, &profiles); err != nil {
		return fmt.Errorf("list client-ssl profiles of partition %s: %w", p.cfg.Partition, err)
	}
	for _, pr := range profiles.Items {
		if pr.Partition == p.cfg.Partition && p.owns(pr.Description, name) {
			if err := p.deleteProfile(ctx, name, pr.Name); err != nil {
				return err
			}
		}
	}
	for _, pl := range pools {
		if err := p.deletePool(ctx, pl); err != nil {
			return err
		}
	}
	return nil
}

// listL7 adds to the load balancers List found (by name) what only L7 ones
// have: policy rules and certificates.
func (p *provider) listL7(ctx context.Context, byLB map[string]*providers.LoadBalancer) error {
	cluster := p.cfg.common.ClusterName
	filter := "$filter=partition+eq+" + p.cfg.Partition
	var policies collectionOf[policyState]
	if err := p.api.do(ctx, http.MethodGet, "ltm/policy?expandSubcollections=true&"+filter, nil, &policies); err != nil {
		return fmt.Errorf("list policies of partition %s: %w", p.cfg.Partition, err)
	}
	var profiles collectionOf[clientSSLState]
	if err := p.api.do(ctx, http.MethodGet, "ltm/profile/client-ssl?"+filter, nil, &profiles); err != nil {
		return fmt.Errorf("list client-ssl profiles of partition %s: %w", p.cfg.Partition, err)
	}
	get := func(tag ownerTag) *providers.LoadBalancer {
		lb := byLB[tag.LB]
		if lb == nil {
			lb = &providers.LoadBalancer{Name: tag.LB, Listeners: []providers.Listener{}}
			byLB[tag.LB] = lb
		}
		markL7(lb, tag)
		return lb
	}
	for i := range policies.Items {
		pol := &policies.Items[i]
		tag, owned := parseOwner(pol.Description, cluster)
		if !owned || pol.Partition != p.cfg.Partition || pol.Status == "draft" || strings.Contains(pol.FullPath, "/Drafts/") {
			continue
		}
		lb := get(tag)
		lb.HTTP.Rules = modelRules(rulesOf(pol), p.cfg.Partition)
	}
	for _, pr := range profiles.Items {
		tag, owned := parseOwner(pr.Description, cluster)
		if !owned || pr.Partition != p.cfg.Partition || tag.TLS == nil {
			continue
		}
		lb := get(tag)
		lb.HTTP.TLS = append(lb.HTTP.TLS, providers.TLSCert{Secret: tag.TLS.Secret, Hosts: tag.TLS.Hosts, Fingerprint: tag.TLS.Fingerprint})
	}
	for _, lb := range byLB {
		if lb.HTTP != nil {
			slices.SortFunc(lb.HTTP.TLS, func(a, b providers.TLSCert) int { return cmp.Compare(a.Secret, b.Secret) })
			providers.SortPools(lb.Pools)
		}
	}
	return nil
}

// markL7 makes lb an L7 load balancer when tag says it is one.
func markL7(lb *providers.LoadBalancer, tag ownerTag) {
	if !tag.L7 {
		return
	}
	lb.Kind = providers.L7
	lb.Ingress = cmp.Or(lb.Ingress, tag.Ingress)
	if lb.HTTP == nil {
		lb.HTTP = &providers.HTTPRoutes{Rules: []providers.Rule{}}
	}
}

// modelRules turns policy rules back into model rules: the rules
// rule-<i>.<j> of one i are the path tests of one model rule.
func modelRules(rules []policyRule, partition string) []providers.Rule {
	type group struct {
		host, pool string
		matches    []providers.PathMatch
	}
	var order []string
	groups := map[string]*group{}
	for _, r := range rules {
		key, _, _ := strings.Cut(strings.TrimPrefix(r.Name, "rule-"), ".")
		g := groups[key]
		if g == nil {
			g = &group{host: r.Host, pool: strings.TrimPrefix(r.Pool, "/"+partition+"/")}
			groups[key] = g
			order = append(order, key)
		}
		g.matches = append(g.matches, providers.PathMatch{Path: r.Path, Prefix: r.Prefix})
	}
	out := []providers.Rule{}
	for _, key := range order {
		g := groups[key]
		if path, typ, ok := providers.PathOf(g.matches); ok {
			out = append(out, providers.Rule{Host: g.host, Path: path, PathType: typ, Pool: g.pool})
		}
	}
	providers.SortRules(out)
	return out
}
