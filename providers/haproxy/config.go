package haproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/nodeportlocal/npl/internal/secretfile"
	"github.com/nodeportlocal/npl/internal/strictjson"
	"github.com/nodeportlocal/npl/providers"
)

// Name is the provider's name in npl-lbsync's configuration (provider.name).
const Name = "haproxy"

const fieldPrefix = "provider." + Name + "."

const defaultTimeout = 30 * time.Second

// Config is the validated configuration of the HAProxy provider. It holds
// file names, never key material.
type Config struct {
	// Edges are the base URLs (https://host:port) of the npl-edge APIs; a
	// change counts as applied only when every edge has it.
	Edges []string
	// CertFile and KeyFile are the client certificate and key the provider
	// presents to the edges.
	CertFile string
	KeyFile  string
	// CAFile holds the CA certificates that verify the edges' certificates.
	CAFile string
	// Timeout bounds each call to an edge.
	Timeout time.Duration

	common providers.Common
}

type section struct {
	Edges    []string `json:"edges"`
	CertFile string   `json:"certFile"`
	KeyFile  string   `json:"keyFile"`
	CAFile   string   `json:"caFile"`
	Timeout  string   `json:"timeout"`
}

// Parse decodes the provider.haproxy section strictly and checks it: at
// least one https edge URL, and readable certificate, key and CA files (TLS
// verification cannot be turned off). Errors name the field.
func Parse(common providers.Common, data []byte) (providers.Config, error) {
	var s section
	if err := strictjson.Decode(data, &s, fieldPrefix); err != nil {
		return nil, err
	}
	if common.ClusterName == "" {
		return nil, errors.New("provider.haproxy: clusterName is required: it marks the load balancers the provider owns")
	}
	c := &Config{CertFile: s.CertFile, KeyFile: s.KeyFile, CAFile: s.CAFile, Timeout: defaultTimeout, common: common}
	if len(s.Edges) == 0 {
		return nil, errors.New(fieldPrefix + "edges: required: the https URLs of the npl-edge APIs")
	}
	for i, raw := range s.Edges {
		u, err := parseEdgeURL(raw)
		if err != nil {
			return nil, fmt.Errorf(fieldPrefix+"edges[%d]: %w", i, err)
		}
		if slices.Contains(c.Edges, u) {
			return nil, fmt.Errorf(fieldPrefix+"edges[%d]: %s is given twice", i, u)
		}
		c.Edges = append(c.Edges, u)
	}
	for _, f := range []struct{ field, path string }{{"certFile", c.CertFile}, {"keyFile", c.KeyFile}, {"caFile", c.CAFile}} {
		if f.path == "" {
			return nil, fmt.Errorf(fieldPrefix+"%s: required (mutual TLS with the edges)", f.field)
		}
	}
	if _, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile); err != nil {
		return nil, fmt.Errorf(fieldPrefix+"certFile: the certificate %s and key %s: %w", c.CertFile, c.KeyFile, err)
	}
	if _, err := secretfile.LoadCAPool(c.CAFile); err != nil {
		return nil, fmt.Errorf(fieldPrefix+"caFile: %w", err)
	}
	if s.Timeout != "" {
		d, err := time.ParseDuration(s.Timeout)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf(fieldPrefix+"timeout: %q is not a positive duration such as \"30s\"", s.Timeout)
		}
		c.Timeout = d
	}
	return c, nil
}

func parseEdgeURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "", fmt.Errorf("want https://host:port: %w", err)
	case u.Scheme != "https":
		return "", fmt.Errorf("want https://host:port, got %q (the edge API is mutual TLS only)", raw)
	case u.Hostname() == "":
		return "", fmt.Errorf("want https://host:port, %q has no host", raw)
	case u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("want https://host:port with no credentials, path or query, got %q", raw)
	}
	return "https://" + u.Host, nil
}

// Open builds the provider. It makes no call: an unreachable edge fails the
// first Ensure, Delete or List with a message that names it.
func (c *Config) Open(_ context.Context) (providers.Provider, error) {
	tlsConfig, err := c.clientTLS()
	if err != nil {
		return nil, fmt.Errorf("open haproxy provider: %w", err)
	}
	transport := &http.Transport{
		TLSClientConfig:     tlsConfig,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
	}
	return newProvider(c, &http.Client{Transport: transport, Timeout: c.Timeout}), nil
}

// clientTLS verifies the edges against CAFile and presents the client
// certificate, read from its files at every handshake so that a renewed
// certificate is used without a restart.
func (c *Config) clientTLS() (*tls.Config, error) {
	pool, err := secretfile.LoadCAPool(c.CAFile)
	if err != nil {
		return nil, fmt.Errorf("caFile: %w", err)
	}
	certFile, keyFile := c.CertFile, c.KeyFile
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		RootCAs:    pool,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("client certificate: %w", err)
			}
			return &cert, nil
		},
	}, nil
}
