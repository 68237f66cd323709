package bigip

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// The LTM policies of an L7 load balancer: one named like it for an
// Ingress's, one per HTTP(S) listener named like its virtual for a
// Gateway's (rules.go makes their rules). Policies are changed as BIG-IP
// 12.1 and later require: a draft, then publish.

type conditionState struct {
	Name           string `json:"name"`
	HTTPHost       bool   `json:"httpHost,omitempty"`
	HTTPURI        bool   `json:"httpUri,omitempty"`
	HTTPMethod     bool   `json:"httpMethod,omitempty"`
	HTTPHeader     bool   `json:"httpHeader,omitempty"`
	Host           bool   `json:"host,omitempty"`
	Path           bool   `json:"path,omitempty"`
	QueryParameter bool   `json:"queryParameter,omitempty"`
	// TmName names the header or the query parameter tested.
	TmName          string `json:"tmName,omitempty"`
	Equals          bool   `json:"equals,omitempty"`
	StartsWith      bool   `json:"startsWith,omitempty"`
	EndsWith        bool   `json:"endsWith,omitempty"`
	Not             bool   `json:"not,omitempty"`
	CaseInsensitive bool   `json:"caseInsensitive,omitempty"`
	// CaseSensitive is set on every test but the host's: BIG-IP compares
	// case-insensitively unless told otherwise (and answers
	// caseInsensitive: true then), where paths, methods, header values
	// and query parameters are case-sensitive.
	CaseSensitive bool     `json:"caseSensitive,omitempty"`
	Request       bool     `json:"request,omitempty"`
	Values        []string `json:"values"`
}

type actionState struct {
	Name      string `json:"name"`
	Forward   bool   `json:"forward,omitempty"`
	Select    bool   `json:"select,omitempty"`
	Pool      string `json:"pool,omitempty"`
	HTTPReply bool   `json:"httpReply,omitempty"`
	Redirect  bool   `json:"redirect,omitempty"`
	Location  string `json:"location,omitempty"`
	// HTTPHeader changes the header TmName: Replace or Insert Value, or
	// Remove it.
	HTTPHeader bool    `json:"httpHeader,omitempty"`
	HTTPURI    bool    `json:"httpUri,omitempty"`
	HTTPHost   bool    `json:"httpHost,omitempty"`
	Replace    bool    `json:"replace,omitempty"`
	Insert     bool    `json:"insert,omitempty"`
	Remove     bool    `json:"remove,omitempty"`
	TmName     string  `json:"tmName,omitempty"`
	Value      *string `json:"value,omitempty"`
	// Path is the new path of an httpUri replace.
	Path     string `json:"path,omitempty"`
	Request  bool   `json:"request,omitempty"`
	Response bool   `json:"response,omitempty"`
}

type ruleState struct {
	Name                string                       `json:"name"`
	Ordinal             int                          `json:"ordinal"`
	Description         string                       `json:"description"`
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

// ruleBody is a policy rule as the provider writes it and reads it back
// (ruleState.body).
type ruleBody struct {
	Name    string `json:"name"`
	Ordinal int    `json:"ordinal"`
	// Description holds what of the model rule the conditions and actions
	// do not tell (ruleNote); empty for the rules of an Ingress.
	Description string           `json:"description,omitempty"`
	Conditions  []conditionState `json:"conditions"`
	Actions     []actionState    `json:"actions"`
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
		if isPublishedExists(err) {
			// The published policy was made since it was read: answer as
			// a create that meets an object, so that ensureObject reads it
			// and changes it through a draft of it.
			return &apiError{Code: http.StatusConflict, Message: err.Error()}
		}
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

// isPublishedExists reports whether err is BIG-IP's answer to a draft
// created while its published policy exists: 400 "01070734:3:
// Configuration error: Published policy "/P/x" exists, use create-draft to
// create a draft copy" (a draft of an existing policy is made from it).
func isPublishedExists(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Code == http.StatusBadRequest && strings.Contains(ae.Message, "01070734") &&
		strings.Contains(ae.Message, "use create-draft")
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

// body reads a rule back as the provider writes it: its conditions and
// actions in name order.
func (r ruleState) body() ruleBody {
	b := ruleBody{Name: r.Name, Ordinal: r.Ordinal, Description: r.Description,
		Conditions: slices.Clone(r.ConditionsReference.Items), Actions: slices.Clone(r.ActionsReference.Items)}
	slices.SortStableFunc(b.Conditions, func(x, y conditionState) int { return compareNames(x.Name, y.Name) })
	slices.SortStableFunc(b.Actions, func(x, y actionState) int { return compareNames(x.Name, y.Name) })
	for i := range b.Conditions {
		if b.Conditions[i].Values == nil {
			b.Conditions[i].Values = []string{}
		}
	}
	return b
}

// compareNames orders the names "0", "1", ... numerically.
func compareNames(a, b string) int {
	x, errX := strconv.Atoi(a)
	y, errY := strconv.Atoi(b)
	if errX != nil || errY != nil {
		return cmp.Compare(a, b)
	}
	return cmp.Compare(x, y)
}

// bodiesOf reads a policy's rules back in ordinal order.
func bodiesOf(st *policyState) []ruleBody {
	rules := slices.Clone(st.RulesReference.Items)
	slices.SortStableFunc(rules, func(a, b ruleState) int { return cmp.Compare(a.Ordinal, b.Ordinal) })
	out := make([]ruleBody, 0, len(rules))
	for _, r := range rules {
		out = append(out, r.body())
	}
	return out
}

// ensurePolicy makes the published policy name of load balancer tag.LB
// hold rules.
func (p *provider) ensurePolicy(ctx context.Context, tag ownerTag, name string, rules []ruleBody) error {
	desc := tag.String()
	cur, err := readObject(ctx, p, &policyKind, name)
	if err != nil {
		return err
	}
	return ensureObject(ctx, p, &policyKind, desired[policyState, policyBody]{
		name: name, lb: tag.LB,
		body: policyBody{Name: name, Partition: p.cfg.Partition, SubPath: "Drafts", Description: desc, Strategy: policyStrategy,
			Requires: []string{"http"}, Controls: []string{"forwarding"}, Rules: rules},
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
			if !reflect.DeepEqual(bodiesOf(cur), rules) {
				fields["rules"] = len(rules)
			}
			return fields
		},
		logValues: []any{"policy", name, "rules", len(rules)},
	}, cur)
}

// deletePolicies deletes the policies of load balancer lb that keep
// does not hold (nil: all of them), published and drafts: the published
// ones first, as a virtual may not use a draft.
func (p *provider) deletePolicies(ctx context.Context, lb string, keep map[string]bool) error {
	policies, err := listObjects(ctx, p, &policyKind, false)
	if err != nil {
		return err
	}
	var published, drafts []string
	for _, st := range policies {
		if !p.owns(st.Description, lb) {
			continue
		}
		rest := strings.TrimPrefix(st.FullPath, "/"+p.cfg.Partition+"/")
		name, isDraft := strings.CutPrefix(rest, "Drafts/")
		switch {
		case isDraft:
			drafts = append(drafts, draftName(name))
		case !keep[name]:
			published = append(published, name)
		}
	}
	slices.Sort(published)
	slices.Sort(drafts)
	return deleteUnwanted(ctx, p, &policyKind, append(published, drafts...), nil, lb)
}
