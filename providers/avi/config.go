// Package avi is the npl provider for the Avi Controller (VMware NSX
// Advanced Load Balancer), driven through the alb-sdk. It lays a load
// balancer out as AKO does for an L4 Service in NodePortLocal mode: a VsVip,
// one Pool per listener, an L4PolicySet that selects the pool by port and
// protocol, and a VirtualService, all tagged with the cluster. An L7 load
// balancer (an Ingress) is a VsVip, one Pool per backend Service port, an
// SSLKeyAndCertificate per TLS Secret, an HTTPPolicySet whose rules match
// host and path and switch to a pool, and an HTTP VirtualService with SSL on
// its HTTPS port (see l7.go).
package avi

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nodeportlocal/npl/internal/secretfile"
	"github.com/nodeportlocal/npl/internal/strictjson"
	"github.com/nodeportlocal/npl/providers"
)

// Name is the provider's name in npl-lbsync's configuration.
const Name = "avi"

// fieldPrefix starts every configuration error, so that it names the field.
const fieldPrefix = "provider.avi."

// Config is the decoded and checked provider.avi section.
type Config struct {
	// Controller is host[:port] of the controller.
	Controller string
	// Tenant, Cloud and ServiceEngineGroup place the objects; defaults
	// admin, Default-Cloud and Default-Group.
	Tenant             string
	Cloud              string
	ServiceEngineGroup string
	// VIPNetwork is the network VsVips get their address from.
	VIPNetwork string
	// Version is the API version to speak (X-Avi-Version); empty means the
	// controller's own version, read at Open.
	Version string
	// UsernameFile and PasswordFile hold the credentials; they are read at
	// every login, so a rotated password is picked up.
	UsernameFile string
	PasswordFile string
	// CAFile holds the PEM certificates the controller's certificate is
	// verified against; required unless InsecureSkipVerify.
	CAFile             string
	InsecureSkipVerify bool
	// Timeout bounds every API request; default 30s.
	Timeout time.Duration
	// ClusterName comes from the common configuration: it prefixes names
	// and marks ownership (created_by npl-<ClusterName>).
	ClusterName string
}

// section is the wire form of provider.avi.
type section struct {
	Controller         string `json:"controller"`
	Tenant             string `json:"tenant"`
	Cloud              string `json:"cloud"`
	ServiceEngineGroup string `json:"serviceEngineGroup"`
	VIPNetwork         string `json:"vipNetwork"`
	Version            string `json:"version"`
	UsernameFile       string `json:"usernameFile"`
	PasswordFile       string `json:"passwordFile"`
	CAFile             string `json:"caFile"`
	InsecureSkipVerify bool   `json:"insecureSkipVerify"`
	Timeout            string `json:"timeout"`
}

var _ providers.ParseFunc = Parse

// Parse decodes the provider.avi section (JSON) strictly and checks it: the
// credential files must be readable and the CA file must hold a certificate.
// Every error names the field, as in "provider.avi.passwordFile: open …".
// It never reads a secret into the returned Config.
func Parse(common providers.Common, raw []byte) (providers.Config, error) {
	var s section
	if err := strictjson.Decode(raw, &s, fieldPrefix); err != nil {
		return nil, err
	}

	c := &Config{
		Controller:         strings.TrimSpace(s.Controller),
		Tenant:             orDefault(s.Tenant, "admin"),
		Cloud:              orDefault(s.Cloud, "Default-Cloud"),
		ServiceEngineGroup: orDefault(s.ServiceEngineGroup, "Default-Group"),
		VIPNetwork:         s.VIPNetwork,
		Version:            s.Version,
		UsernameFile:       s.UsernameFile,
		PasswordFile:       s.PasswordFile,
		CAFile:             s.CAFile,
		InsecureSkipVerify: s.InsecureSkipVerify,
		Timeout:            30 * time.Second,
		ClusterName:        common.ClusterName,
	}
	if common.ClusterName == "" {
		return nil, errors.New("provider.avi: clusterName is required: it marks the objects the provider owns")
	}
	host, err := controllerHost(c.Controller)
	if err != nil {
		return nil, fmt.Errorf("%scontroller: %w", fieldPrefix, err)
	}
	c.Controller = host
	if c.VIPNetwork == "" {
		return nil, fmt.Errorf("%svipNetwork: required", fieldPrefix)
	}
	for _, f := range []struct{ field, path string }{
		{"usernameFile", c.UsernameFile},
		{"passwordFile", c.PasswordFile},
	} {
		if f.path == "" {
			return nil, fmt.Errorf("%s%s: required", fieldPrefix, f.field)
		}
		if _, err := secretfile.Read(f.path); err != nil {
			return nil, fmt.Errorf("%s%s: %w", fieldPrefix, f.field, err)
		}
	}
	switch {
	case c.CAFile != "":
		if _, err := secretfile.LoadCAPool(c.CAFile); err != nil {
			return nil, fmt.Errorf("%scaFile: %w", fieldPrefix, err)
		}
	case !c.InsecureSkipVerify:
		return nil, fmt.Errorf("%scaFile: required unless insecureSkipVerify is true", fieldPrefix)
	}
	if s.Timeout != "" {
		d, err := time.ParseDuration(s.Timeout)
		if err != nil {
			return nil, fmt.Errorf("%stimeout: %w", fieldPrefix, err)
		}
		if d <= 0 {
			return nil, fmt.Errorf("%stimeout: must be positive, got %s", fieldPrefix, s.Timeout)
		}
		c.Timeout = d
	}
	return c, nil
}

// controllerHost checks host[:port]; an https:// prefix is accepted and
// dropped, since the SDK adds it itself.
func controllerHost(s string) (string, error) {
	if s == "" {
		return "", errors.New("required")
	}
	if strings.HasPrefix(s, "http://") {
		return "", errors.New("the Avi API is served over https only")
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "https://"), "/")
	u, err := url.Parse("https://" + s)
	if err != nil || u.Host != s || u.Hostname() == "" {
		return "", fmt.Errorf("%q is not host[:port]", s)
	}
	return s, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
