package bigip

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/nodeportlocal/npl/internal/secretfile"
	"github.com/nodeportlocal/npl/providers"
)

var _ providers.Preflighter = (*Config)(nil)

// writerRoles are the BIG-IP roles that may create and delete pools,
// virtual servers, policies, profiles and SSL files in a partition.
var writerRoles = []string{"admin", "resource-admin", "manager"}

// Preflight checks, reading only, that the BIG-IP can serve npl: TLS
// verification, login, the version, that the partition exists (or may be
// created), and that the account's role on it lets it create and delete
// the objects npl makes.
func (c *Config) Preflight(ctx context.Context) []providers.Check {
	pf := &bigipPreflight{cfg: c}
	pf.run(ctx)
	return pf.checks
}

type bigipPreflight struct {
	cfg    *Config
	checks []providers.Check
	client *http.Client
	user   string
	auth   func(*http.Request)
}

func (pf *bigipPreflight) add(name, result, format string, args ...any) {
	pf.checks = append(pf.checks, providers.Check{Name: name, Result: result, Detail: fmt.Sprintf(format, args...)})
}

func (pf *bigipPreflight) run(ctx context.Context) {
	c := pf.cfg
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.InsecureSkipVerify} //nolint:gosec // the user asked for it; reported below.
	if c.CAFile != "" && !c.InsecureSkipVerify {
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
	pf.client = &http.Client{Timeout: c.Timeout, Transport: &http.Transport{TLSClientConfig: tlsConfig, Proxy: http.ProxyFromEnvironment}}
	defer pf.client.CloseIdleConnections()
	if !pf.login(ctx) || !pf.checkVersion(ctx) {
		return
	}
	role, roleKnown := pf.role(ctx)
	pf.checkPartition(ctx, role, roleKnown)
}

func (pf *bigipPreflight) checkTLS(ctx context.Context, tlsConfig *tls.Config) bool {
	u, err := url.Parse(pf.cfg.URL)
	if err != nil {
		pf.add("tls", providers.CheckProblem, "url %s: %v", pf.cfg.URL, err)
		return false
	}
	if u.Scheme == "http" {
		pf.add("tls", providers.CheckWarning, "%s is plain HTTP: the credentials and configuration travel unencrypted", pf.cfg.URL)
		return true
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "443")
	}
	c := providers.CheckTLS(ctx, host, pf.cfg.Timeout, tlsConfig, pf.cfg.InsecureSkipVerify, pf.cfg.CAFile)
	pf.checks = append(pf.checks, c)
	return c.Result != providers.CheckProblem
}

// login logs in for a token (tokenAuth) or checks basic authentication
// with a read of the version.
func (pf *bigipPreflight) login(ctx context.Context) bool {
	user, password, err := pf.cfg.credentials()
	if err != nil {
		pf.add("login", providers.CheckProblem, "%v", err)
		return false
	}
	pf.user = user
	if !pf.cfg.TokenAuth {
		pf.auth = func(r *http.Request) { r.SetBasicAuth(user, password) }
		pf.add("login", providers.CheckOK, "basic authentication as %s", user)
		return true
	}
	body, _ := json.Marshal(map[string]string{"username": user, "password": password, "loginProviderName": "tmos"})
	var answer struct {
		Token struct {
			Token string `json:"token"`
		} `json:"token"`
	}
	status, msg, err := pf.do(ctx, http.MethodPost, "/mgmt/shared/authn/login", body, &answer)
	switch {
	case err != nil:
		pf.add("login", providers.CheckProblem, "log in as %s: %v", user, err)
		return false
	case status != http.StatusOK:
		pf.add("login", providers.CheckProblem, "log in as %s: HTTP %d: %s", user, status, msg)
		return false
	}
	token := answer.Token.Token
	pf.auth = func(r *http.Request) { r.Header.Set("X-F5-Auth-Token", token) }
	pf.add("login", providers.CheckOK, "token login as %s", user)
	return true
}

// checkVersion reads the BIG-IP version: 13.1 to 17.x are supported.
func (pf *bigipPreflight) checkVersion(ctx context.Context) bool {
	var answer struct {
		Entries map[string]struct {
			NestedStats struct {
				Entries map[string]struct {
					Description string `json:"description"`
				} `json:"entries"`
			} `json:"nestedStats"`
		} `json:"entries"`
	}
	status, msg, err := pf.do(ctx, http.MethodGet, "/mgmt/tm/sys/version", nil, &answer)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("HTTP %d: %s", status, msg)
	}
	if err != nil {
		name := "version"
		if !pf.cfg.TokenAuth {
			name = "login" // the first call with basic authentication
		}
		pf.add(name, providers.CheckProblem, "read /mgmt/tm/sys/version as %s: %v", pf.user, err)
		return false
	}
	var version string
	for _, e := range answer.Entries {
		version = e.NestedStats.Entries["Version"].Description
	}
	var major, minor int
	if _, err := fmt.Sscanf(version, "%d.%d", &major, &minor); err != nil {
		pf.add("version", providers.CheckWarning, "BIG-IP version %q not understood", version)
		return true
	}
	switch {
	case major < 13 || (major == 13 && minor < 1):
		pf.add("version", providers.CheckProblem, "BIG-IP %s is older than 13.1, the oldest npl supports", version)
		return false
	case major > 17:
		pf.add("version", providers.CheckWarning, "BIG-IP %s is newer than 17.x, the newest npl is tested with", version)
	default:
		pf.add("version", providers.CheckOK, "BIG-IP %s", version)
	}
	return true
}

// role reads the account's role on the partition (or on all partitions).
func (pf *bigipPreflight) role(ctx context.Context) (string, bool) {
	var user struct {
		PartitionAccess []struct {
			Name string `json:"name"`
			Role string `json:"role"`
		} `json:"partitionAccess"`
	}
	status, msg, err := pf.do(ctx, http.MethodGet, "/mgmt/tm/auth/user/"+url.PathEscape(pf.user), nil, &user)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("HTTP %d: %s", status, msg)
	}
	if err != nil {
		pf.add("rights", providers.CheckWarning, "cannot read user %s to check its role: %v", pf.user, err)
		return "", false
	}
	role := ""
	for _, a := range user.PartitionAccess {
		if a.Name == pf.cfg.Partition || (a.Name == "all-partitions" && role == "") {
			role = a.Role
		}
	}
	if !slices.Contains(writerRoles, role) {
		if role == "" {
			role = "none"
		}
		pf.add("rights", providers.CheckProblem, "%s has the role %s on partition %s: it may not create and delete pools, "+
			"virtual servers and policies (needs %s)", pf.user, role, pf.cfg.Partition, strings.Join(writerRoles, ", "))
		return role, true
	}
	pf.add("rights", providers.CheckOK, "%s has the role %s on partition %s", pf.user, role, pf.cfg.Partition)
	return role, true
}

// checkPartition reads the partition; a missing one is created by
// npl-lbsync when createPartition is set and the account may.
func (pf *bigipPreflight) checkPartition(ctx context.Context, role string, roleKnown bool) {
	status, msg, err := pf.do(ctx, http.MethodGet, "/mgmt/tm/sys/folder/~"+pf.cfg.Partition, nil, nil)
	switch {
	case err != nil:
		pf.add("partition", providers.CheckProblem, "read partition %s: %v", pf.cfg.Partition, err)
	case status == http.StatusOK:
		pf.add("partition", providers.CheckOK, "partition %s exists", pf.cfg.Partition)
	case status != http.StatusNotFound:
		pf.add("partition", providers.CheckProblem, "read partition %s: HTTP %d: %s", pf.cfg.Partition, status, msg)
	case !pf.cfg.CreatePartition:
		pf.add("partition", providers.CheckProblem, "partition %s does not exist and createPartition is false", pf.cfg.Partition)
	case roleKnown && role != "admin":
		pf.add("partition", providers.CheckProblem, "partition %s does not exist, and %s (role %s) may not create it: "+
			"create it, or use an account with the admin role", pf.cfg.Partition, pf.user, role)
	default:
		pf.add("partition", providers.CheckOK, "partition %s does not exist; npl-lbsync creates it", pf.cfg.Partition)
	}
}

// do sends one authenticated request and decodes a 200 answer into out; it
// returns the status and, for an error answer, its message.
func (pf *bigipPreflight) do(ctx context.Context, method, path string, body []byte, out any) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(pf.cfg.URL, "/")+path, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if pf.auth != nil {
		pf.auth(req)
	}
	resp, err := pf.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, "", err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(data, &e) != nil || e.Message == "" {
			e.Message = strings.TrimSpace(string(data))
		}
		return resp.StatusCode, e.Message, nil
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, "", fmt.Errorf("decode the answer of %s: %w", path, err)
		}
	}
	return resp.StatusCode, "", nil
}
