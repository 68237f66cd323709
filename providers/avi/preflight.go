package avi

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"slices"
	"strings"

	"github.com/nodeportlocal/npl/internal/secretfile"
	"github.com/nodeportlocal/npl/providers"
)

var _ providers.Preflighter = (*Config)(nil)

// requiredWrites are the Role privileges npl needs write access to: the
// objects it creates and deletes (a VsVip falls under the virtual
// service's).
var requiredWrites = []string{"PERMISSION_VIRTUALSERVICE", "PERMISSION_POOL", "PERMISSION_POOLGROUP",
	"PERMISSION_L4POLICYSET", "PERMISSION_HTTPPOLICYSET", "PERMISSION_SSLKEYANDCERTIFICATE"}

// policyWrites are the privileges of the objects only traffic policies
// make (health checks, persistence): without them those fail.
var policyWrites = []string{"PERMISSION_HEALTHMONITOR", "PERMISSION_APPLICATIONPERSISTENCEPROFILE"}

// Preflight checks, reading only, that the controller can serve npl: TLS
// verification, login, the API version, that the tenant, cloud, service
// engine group and VIP network exist, and that the account's role lets it
// create and delete the objects npl makes. It uses plain HTTPS, not the
// alb-sdk, so that nothing is logged of the session.
func (c *Config) Preflight(ctx context.Context) []providers.Check {
	pf := &preflight{cfg: c}
	pf.run(ctx)
	return pf.checks
}

type preflight struct {
	cfg     *Config
	checks  []providers.Check
	client  *http.Client
	version string
}

func (pf *preflight) add(name, result, format string, args ...any) {
	pf.checks = append(pf.checks, providers.Check{Name: name, Result: result, Detail: fmt.Sprintf(format, args...)})
}

func (pf *preflight) run(ctx context.Context) {
	c := pf.cfg
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.InsecureSkipVerify} //nolint:gosec // the user asked for it; reported below.
	if c.CAFile != "" {
		pool, err := secretfile.LoadCAPool(c.CAFile)
		if err != nil {
			pf.add("tls", providers.CheckProblem, "caFile %s: %v", c.CAFile, err)
			return
		}
		tlsConfig.RootCAs = pool
	}
	if !pf.checkTLS(ctx, tlsConfig) {
		return
	}
	jar, _ := cookiejar.New(nil)
	pf.client = &http.Client{Jar: jar, Timeout: c.Timeout, Transport: &http.Transport{TLSClientConfig: tlsConfig, Proxy: http.ProxyFromEnvironment},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer pf.client.CloseIdleConnections()
	user, ok := pf.login(ctx)
	if !ok || !pf.checkVersion(ctx) {
		return
	}
	tenant, ok := pf.exists(ctx, "tenant", "tenant", c.Tenant, nil)
	pf.exists(ctx, "cloud", "cloud", c.Cloud, nil)
	pf.exists(ctx, "serviceEngineGroup", "serviceenginegroup", c.ServiceEngineGroup, url.Values{"cloud_ref.name": {c.Cloud}})
	if c.VIPNetwork != "" {
		pf.exists(ctx, "vipNetwork", "network", c.VIPNetwork, nil)
	}
	if ok {
		pf.checkRights(ctx, user, tenant)
	}
}

// checkTLS connects and verifies the controller's certificate.
func (pf *preflight) checkTLS(ctx context.Context, tlsConfig *tls.Config) bool {
	host := pf.cfg.Controller
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(host, "443")
	}
	c := providers.CheckTLS(ctx, host, pf.cfg.Timeout, tlsConfig, pf.cfg.InsecureSkipVerify, pf.cfg.CAFile)
	pf.checks = append(pf.checks, c)
	return c.Result != providers.CheckProblem
}

// loginUser is what the login answer says of the account.
type loginUser struct {
	Username    string `json:"username"`
	IsSuperuser bool   `json:"is_superuser"`
	Access      []struct {
		RoleRef    string `json:"role_ref"`
		TenantRef  string `json:"tenant_ref"`
		AllTenants bool   `json:"all_tenants"`
	} `json:"access"`
}

func (pf *preflight) login(ctx context.Context) (*loginUser, bool) {
	user, err := secretfile.Read(pf.cfg.UsernameFile)
	if err != nil {
		pf.add("login", providers.CheckProblem, "usernameFile: %v", err)
		return nil, false
	}
	password, err := secretfile.Read(pf.cfg.PasswordFile)
	if err != nil {
		pf.add("login", providers.CheckProblem, "passwordFile: %v", err)
		return nil, false
	}
	body, _ := json.Marshal(map[string]string{"username": user, "password": password})
	var answer struct {
		User loginUser `json:"user"`
	}
	status, msg, err := pf.do(ctx, http.MethodPost, "/login", nil, body, &answer)
	if err != nil {
		pf.add("login", providers.CheckProblem, "log in as %s: %v", user, err)
		return nil, false
	}
	if status != http.StatusOK {
		pf.add("login", providers.CheckProblem, "log in as %s: Avi %d: %s", user, status, msg)
		return nil, false
	}
	pf.add("login", providers.CheckOK, "logged in as %s", user)
	return &answer.User, true
}

func (pf *preflight) checkVersion(ctx context.Context) bool {
	var answer struct {
		Version struct {
			Version string `json:"Version"`
		} `json:"version"`
	}
	status, msg, err := pf.do(ctx, http.MethodGet, "/api/initial-data", nil, nil, &answer)
	if err == nil && status != http.StatusOK {
		err = &apiError{Status: status, Message: msg}
	}
	if err != nil {
		pf.add("version", providers.CheckProblem, "read /api/initial-data: %v", err)
		return false
	}
	have := answer.Version.Version
	pf.version = have
	if want := pf.cfg.Version; want != "" {
		h, _ := parseVersion(have)
		w, ok := parseVersion(want)
		if !ok || slices.Compare(w[:], h[:]) > 0 {
			pf.add("version", providers.CheckProblem, "provider.avi.version %s: the controller runs %s and answers no newer version", want, have)
			return false
		}
		pf.version = want
	}
	if err := checkVersion(pf.version); err != nil {
		pf.add("version", providers.CheckProblem, "%v", err)
		return false
	}
	pf.add("version", providers.CheckOK, "controller %s, requests sent as X-Avi-Version %s", have, pf.version)
	return true
}

// exists checks that the object typ named name is visible in the tenant;
// it returns the object's uuid.
func (pf *preflight) exists(ctx context.Context, check, typ, name string, filter url.Values) (string, bool) {
	q := url.Values{"name": {name}}
	for k, v := range filter {
		q[k] = v
	}
	var page struct {
		Count   int `json:"count"`
		Results []struct {
			UUID string `json:"uuid"`
		} `json:"results"`
	}
	status, msg, err := pf.do(ctx, http.MethodGet, "/api/"+typ+"?"+q.Encode(), nil, nil, &page)
	if err == nil && status != http.StatusOK {
		err = &apiError{Status: status, Message: msg}
	}
	switch {
	case err != nil:
		pf.add(check, providers.CheckProblem, "read %s %s: %v", typ, name, err)
	case page.Count == 0 || len(page.Results) == 0:
		where := "in tenant " + pf.cfg.Tenant
		if filter.Get("cloud_ref.name") != "" {
			where += ", cloud " + filter.Get("cloud_ref.name")
		}
		pf.add(check, providers.CheckProblem, "%s %q does not exist %s (or the account cannot see it)", typ, name, where)
	default:
		pf.add(check, providers.CheckOK, "%s %q exists", typ, name)
		return page.Results[0].UUID, true
	}
	return "", false
}

// checkRights reads the role the account holds in the tenant and checks
// that it grants write access to every object type npl makes.
func (pf *preflight) checkRights(ctx context.Context, user *loginUser, tenantUUID string) {
	if user.IsSuperuser {
		pf.add("rights", providers.CheckOK, "%s is a superuser", user.Username)
		return
	}
	granted := map[string]bool{}
	roles := 0
	for _, a := range user.Access {
		if !a.AllTenants && lastSegment(a.TenantRef) != tenantUUID {
			continue
		}
		roles++
		var role struct {
			Name       string `json:"name"`
			Privileges []struct {
				Resource string `json:"resource"`
				Type     string `json:"type"`
			} `json:"privileges"`
		}
		status, msg, err := pf.do(ctx, http.MethodGet, "/api/role/"+lastSegment(a.RoleRef), nil, nil, &role)
		if err == nil && status != http.StatusOK {
			err = &apiError{Status: status, Message: msg}
		}
		if err != nil {
			pf.add("rights", providers.CheckWarning, "cannot read role %s to check the account's rights: %v", a.RoleRef, err)
			return
		}
		for _, p := range role.Privileges {
			if p.Type == "WRITE_ACCESS" {
				granted[p.Resource] = true
			}
		}
	}
	if roles == 0 {
		pf.add("rights", providers.CheckProblem, "%s has no role in tenant %s", user.Username, pf.cfg.Tenant)
		return
	}
	var missing []string
	for _, p := range requiredWrites {
		if !granted[p] {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		pf.add("rights", providers.CheckProblem, "%s may not create and delete what npl makes in tenant %s: no WRITE_ACCESS to %s",
			user.Username, pf.cfg.Tenant, strings.Join(missing, ", "))
		return
	}
	pf.add("rights", providers.CheckOK, "%s has WRITE_ACCESS to %s", user.Username, strings.Join(requiredWrites, ", "))
	missing = slices.DeleteFunc(slices.Clone(policyWrites), func(p string) bool { return granted[p] })
	if len(missing) > 0 {
		pf.add("rights", providers.CheckWarning, "%s has no WRITE_ACCESS to %s in tenant %s: pools whose traffic policy has a health check or persistence will fail",
			user.Username, strings.Join(missing, ", "), pf.cfg.Tenant)
	}
}

func lastSegment(ref string) string {
	ref, _, _ = strings.Cut(ref, "#")
	return ref[strings.LastIndexByte(ref, '/')+1:]
}

// do sends one request with the controller's headers and decodes a 200
// answer into out; it returns the status and, for an error answer, its
// message.
func (pf *preflight) do(ctx context.Context, method, path string, header http.Header, body []byte, out any) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, "https://"+pf.cfg.Controller+path, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Avi-Tenant", pf.cfg.Tenant)
	if pf.version != "" {
		req.Header.Set("X-Avi-Version", pf.version)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := pf.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return 0, "", err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body = io.NopCloser(bytes.NewReader(data))
		return resp.StatusCode, errorText(resp), nil
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, "", fmt.Errorf("decode the answer of %s: %w", path, err)
		}
	}
	return resp.StatusCode, "", nil
}
