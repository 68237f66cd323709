package bigip

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"time"

	"github.com/nodeportlocal/npl/internal/secretfile"
	"github.com/nodeportlocal/npl/internal/strictjson"
	"github.com/nodeportlocal/npl/providers"
)

// fieldPrefix names the configuration section in errors.
// Name is the provider's name in npl-lbsync's configuration.
const Name = "bigip"

const fieldPrefix = "provider." + Name + "."

const defaultTimeout = 30 * time.Second

// Config is the validated configuration of the BIG-IP provider. Parse builds
// it; it holds file names, never secrets.
type Config struct {
	// URL of the BIG-IP management interface, http(s)://host[:port].
	URL string
	// Partition holds every object the provider creates.
	Partition string
	// CreatePartition creates Partition when it does not exist.
	CreatePartition bool
	// UsernameFile and PasswordFile hold the credentials.
	UsernameFile string
	PasswordFile string
	// CAFile holds the PEM CA certificates that verify the BIG-IP's TLS
	// certificate.
	CAFile string
	// InsecureSkipVerify turns TLS verification off.
	InsecureSkipVerify bool
	// Insecure allows an http:// URL, over which go-bigip sends the login
	// (basic authentication, or the password of the token login) in clear:
	// for a test BIG-IP or simulator only.
	Insecure bool
	// TokenAuth logs in for a token (needed with remote authentication);
	// basic authentication otherwise.
	TokenAuth bool
	// Timeout bounds each API call.
	Timeout time.Duration

	common providers.Common
}

// section is the configuration as written; pointers tell unset from false.
type section struct {
	URL                string `json:"url"`
	Partition          string `json:"partition"`
	CreatePartition    *bool  `json:"createPartition"`
	UsernameFile       string `json:"usernameFile"`
	PasswordFile       string `json:"passwordFile"`
	CAFile             string `json:"caFile"`
	InsecureSkipVerify bool   `json:"insecureSkipVerify"`
	Insecure           bool   `json:"insecure"`
	TokenAuth          *bool  `json:"tokenAuth"`
	Timeout            string `json:"timeout"`
}

// partitionName is what BIG-IP accepts as a partition name.
var partitionName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$`)

// Parse decodes the provider.bigip section (JSON) strictly, fills defaults
// and checks it: the URL, the partition name, and that the credential and CA
// files are readable. Errors name the field, as provider.bigip.url.
func Parse(common providers.Common, sectionJSON []byte) (providers.Config, error) {
	var s section
	if err := strictjson.Decode(sectionJSON, &s, fieldPrefix); err != nil {
		return nil, err
	}
	c := &Config{
		Partition:          s.Partition,
		CreatePartition:    s.CreatePartition == nil || *s.CreatePartition,
		UsernameFile:       s.UsernameFile,
		PasswordFile:       s.PasswordFile,
		CAFile:             s.CAFile,
		InsecureSkipVerify: s.InsecureSkipVerify,
		Insecure:           s.Insecure,
		TokenAuth:          s.TokenAuth == nil || *s.TokenAuth,
		Timeout:            defaultTimeout,
		common:             common,
	}
	if common.ClusterName == "" {
		return nil, errors.New("provider.bigip: clusterName is required: it marks the objects the provider owns")
	}

	u, err := parseURL(s.URL)
	if err != nil {
		return nil, fmt.Errorf(fieldPrefix+"url: %w", err)
	}
	c.URL = u.String()

	if c.Partition == "" {
		c.Partition = "npl-" + common.ClusterName
	}
	if !partitionName.MatchString(c.Partition) {
		return nil, fmt.Errorf(fieldPrefix+"partition: %q is not a valid BIG-IP partition name (letters, digits, '_', '.', '-'; at most 64)", c.Partition)
	}

	for _, f := range []struct{ field, path string }{{"usernameFile", c.UsernameFile}, {"passwordFile", c.PasswordFile}} {
		if f.path == "" {
			return nil, fmt.Errorf(fieldPrefix+"%s: required", f.field)
		}
		if _, err := secretfile.Read(f.path); err != nil {
			return nil, fmt.Errorf(fieldPrefix+"%s: %w", f.field, err)
		}
	}

	switch {
	case c.CAFile != "":
		if _, err := secretfile.LoadCAPool(c.CAFile); err != nil {
			return nil, fmt.Errorf(fieldPrefix+"caFile: %w", err)
		}
	case u.Scheme == "https" && !c.InsecureSkipVerify:
		return nil, errors.New(fieldPrefix + "caFile: required for an https url unless insecureSkipVerify is true")
	}

	if s.Timeout != "" {
		d, err := time.ParseDuration(s.Timeout)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf(fieldPrefix+"timeout: %q is not a positive duration such as \"30s\"", s.Timeout)
		}
		c.Timeout = d
	}
	if u.Scheme == "http" && !c.Insecure {
		return nil, errors.New(fieldPrefix + "url: an http URL sends the BIG-IP login in clear: use https, or set insecure: true (a test BIG-IP only)")
	}
	return c, nil
}

func parseURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("required")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("want http(s)://host[:port]: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("want http(s)://host[:port], got scheme %q", u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("want http(s)://host[:port], %q has no host", raw)
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("want http(s)://host[:port] with no credentials, path or query, got %q", raw)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("port %q out of range 1-65535", p)
		}
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host}, nil
}

// credentials reads the user name and password; they are read again at each
// login so that rotated secrets are picked up.
func (c *Config) credentials() (user, password string, err error) {
	if user, err = secretfile.Read(c.UsernameFile); err != nil {
		return "", "", fmt.Errorf("usernameFile: %w", err)
	}
	if password, err = secretfile.Read(c.PasswordFile); err != nil {
		return "", "", fmt.Errorf("passwordFile: %w", err)
	}
	return user, password, nil
}

// Open builds the provider. With token authentication it logs in, so bad
// credentials or an unreachable BIG-IP fail here; basic authentication
// makes no call until the first Ensure, Delete or List.
func (c *Config) Open(ctx context.Context) (providers.Provider, error) {
	api, err := newClient(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("open BIG-IP provider for %s: %w", c.URL, err)
	}
	return newProvider(c, api), nil
}
