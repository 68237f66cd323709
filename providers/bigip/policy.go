package bigip

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/nodeportlocal/npl/providers"
)

// The LTM policy of an L7 load balancer: named like it, first-match rules
// that test the HTTP host and URI path and forward to a pool. Policies are
// changed as BIG-IP 12.1 and later require: a draft, then publish.

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
	Name                string                       `json:"name"`
	Ordinal             int                          `json:"ordinal"`
	ConditionsReference collectionOf[conditionState] `json:"conditionsReference"`
	ActionsReference    collectionOf[actionState]    `json:"actionsReference"`
}

type policyState struct {
	objectHeader
	Strategy       string                  `json:"strategy"`
	Requires       []string                `json:"requires"`
	Controls       []string                `json:"controls"`
	Status         string                  `json:"status"`
	RulesReference collectionOf[ruleState] `json:"rulesReference"`
}

type ruleBody struct {
	Name       string           `json:"name"`
	Ordinal    int              `json:"ordinal"`
	Conditions []conditionState `json:"conditions"`
	Actions    []actionState    `json:"actions"`
}

// policyBody is the policy as the provider makes it: with a name when it
// creates the draft, without when it writes the draft's content.
type policyBody struct {
	Name        string     `json:"name,omitempty"`
	Partition   string     `json:"partition,omitempty"`
	SubPath     string     `json:"subPath,omitempty"`
	Description string     `json:"description"`
	Strategy    string     `json:"strategy"`
	Requires    []string   `json:"requires"`
	Controls    []string   `json:"controls"`
	Rules       []ruleBody `json:"rules"`
}

const policyStrategy = "/Common/first-match"

// policyKind: a policy is created as a draft and published; it changes
// through a draft of it, written whole, and published.
var policyKind = objectKind[policyState, policyBody]{
	what: "policy", plural: "policies", collection: "ltm/policy", query: "?expandSubcollections=true",
	create: func(ctx context.Context, p *provider, name string, body policyBody) error {
		err := p.api.do(ctx, http.MethodPost, "ltm/policy", body, nil)
		if isConflict(err) {
			// A draft left by a failed publish: replace its content.
			err = p.writeDraft(ctx, name, body)
		}
		if err != nil {
			return fmt.Errorf("make a draft: %w", err)
		}
		return p.publish(ctx, name)
	},
	update: func(ctx context.Context, p *provider, name string, _ map[string]any, body policyBody) error {
		err := p.api.do(ctx, http.MethodPatch, objectPath("ltm/policy", p.cfg.Partition, name)+"?options=create-draft", map[string]any{}, nil)
		if err != nil && !isConflict(err) {
			return fmt.Errorf("make a draft: %w", err)
		}
		if err := p.writeDraft(ctx, name, body); err != nil {
			return fmt.Errorf("write the draft: %w", err)
		}
		return p.publish(ctx, name)
	},
}

// draftName is the name of the draft of policy name in object paths.
func draftName(name string) string { return "Drafts~" + name }

func (p *provider) writeDraft(ctx context.Context, name string, body policyBody) error {
	body.Name, body.Partition, body.SubPath = "", "", ""
	return p.api.do(ctx, http.MethodPut, objectPath("ltm/policy", p.cfg.Partition, draftName(name)), body, nil)
}

func (p *provider) publish(ctx context.Context, name string) error {
	publish := map[string]any{"command": "publish", "name": fullPath(p.cfg.Partition, "Drafts/"+name)}
	if err := p.api.do(ctx, http.MethodPost, "ltm/policy", publish, nil); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	return nil
}

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

// ensurePolicy makes the published policy of load balancer tag.LB hold
// rules.
func (p *provider) ensurePolicy(ctx context.Context, tag ownerTag, rules []policyRule) error {
	name := tag.LB
	desc := tag.String()
	cur, err := readObject(ctx, p, &policyKind, name)
	if err != nil {
		return err
	}
	return ensureObject(ctx, p, &policyKind, desired[policyState, policyBody]{
		name: name, lb: tag.LB,
		body: policyBody{Name: name, Partition: p.cfg.Partition, SubPath: "Drafts", Description: desc, Strategy: policyStrategy,
			Requires: []string{"http"}, Controls: []string{"forwarding"}, Rules: ruleBodies(rules)},
		// What differs, for the decision and the log: the draft is written
		// whole.
		diff: func(cur *policyState) map[string]any {
			fields := map[string]any{}
			if cur.Description != desc {
				fields["description"] = desc
			}
			if cur.Strategy != policyStrategy {
				fields["strategy"] = policyStrategy
			}
			if !slices.Contains(cur.Requires, "http") {
				fields["requires"] = []string{"http"}
			}
			if !slices.Contains(cur.Controls, "forwarding") {
				fields["controls"] = []string{"forwarding"}
			}
			if !slices.Equal(rulesOf(cur), rules) {
				fields["rules"] = len(rules)
			}
			return fields
		},
		logValues: []any{"rules", len(rules)},
	}, cur)
}

// deletePolicy deletes the policy of load balancer lb and a draft of it,
// those that exist and are the load balancer's.
func (p *provider) deletePolicy(ctx context.Context, lb string) error {
	policies, err := listObjects(ctx, p, &policyKind, false)
	if err != nil {
		return err
	}
	var names []string
	// The published policy goes first: a virtual may not use a draft.
	for _, name := range []string{lb, draftName(lb)} {
		fp := fullPath(p.cfg.Partition, strings.ReplaceAll(name, "~", "/"))
		i := slices.IndexFunc(policies, func(st policyState) bool { return st.FullPath == fp })
		if i >= 0 && p.owns(policies[i].Description, lb) {
			names = append(names, name)
		}
	}
	return deleteUnwanted(ctx, p, &policyKind, names, nil, lb)
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
