package bigip

import (
	"cmp"
	"context"
	"crypto/sha1" //nolint:gosec // BIG-IP's file checksums are SHA-1; they only detect changes.
	"encoding/hex"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Certificates, keys and client-ssl profiles of L7 load balancers.

const (
	// profileClientSSL is the parent of the client-ssl profiles.
	profileClientSSL = "/Common/clientssl"
	// fingerprintInName is how much of the certificate's fingerprint names
	// its files.
	fingerprintInName = 12
	// uploadDir is where BIG-IP keeps uploaded files.
	uploadDir = "/var/config/rest/downloads/"
)

type fileState struct {
	objectHeader
	Checksum string `json:"checksum"`
}

type chainLink struct {
	Name string `json:"name"`
	Cert string `json:"cert"`
	Key  string `json:"key"`
}

type clientSSLState struct {
	objectHeader
	DefaultsFrom string      `json:"defaultsFrom"`
	CertKeyChain []chainLink `json:"certKeyChain"`
	SNIDefault   string      `json:"sniDefault"`
	ServerName   string      `json:"serverName"`
}

// The ssl-cert and ssl-key files: uploaded, then created or pointed at the
// upload (sourcePath).
var (
	sslCertKind = objectKind[fileState, map[string]any]{what: "ssl-cert", plural: "ssl-certs",
		collection: "sys/file/ssl-cert", updateMethod: http.MethodPatch, untagged: true}
	sslKeyKind = objectKind[fileState, map[string]any]{what: "ssl-key", plural: "ssl-keys",
		collection: "sys/file/ssl-key", updateMethod: http.MethodPatch, untagged: true}
	fileKinds = []*objectKind[fileState, map[string]any]{&sslCertKind, &sslKeyKind}
)

// clientSSLKind: a client-ssl profile goes with its certificate and key, so
// deleting it deletes them.
var clientSSLKind = objectKind[clientSSLState, map[string]any]{
	what: "client-ssl profile", plural: "client-ssl profiles", collection: "ltm/profile/client-ssl",
	updateMethod: http.MethodPatch, readBeforeDelete: true,
	afterDelete: func(ctx context.Context, p *provider, cur *clientSSLState) error {
		for _, l := range cur.CertKeyChain {
			if name, found := strings.CutPrefix(l.Cert, "/"+p.cfg.Partition+"/"); found {
				if err := p.deleteFiles(ctx, name); err != nil {
					return err
				}
			}
		}
		return nil
	},
}

// fileChecksum is the checksum BIG-IP computes of a file: SHA1:<size>:<hex>.
func fileChecksum(data []byte) string {
	sum := sha1.Sum(data) //nolint:gosec // BIG-IP's checksum format.
	return "SHA1:" + strconv.Itoa(len(data)) + ":" + hex.EncodeToString(sum[:])
}

// ensureFile makes the ssl-cert or ssl-key (k) name hold data: uploaded and
// created when missing, uploaded again and replaced when its checksum
// differs.
func (p *provider) ensureFile(ctx context.Context, k *objectKind[fileState, map[string]any], name string, data []byte) error {
	cur, err := readObject(ctx, p, k, name)
	if err != nil {
		return err
	}
	upload := name + "." + strings.TrimPrefix(k.what, "ssl-")
	source := "file://" + uploadDir + upload
	return ensureObject(ctx, p, k, desired[fileState, map[string]any]{
		name: name,
		body: map[string]any{"name": name, "partition": p.cfg.Partition, "sourcePath": source},
		diff: func(cur *fileState) map[string]any {
			if cur.Checksum == fileChecksum(data) {
				return nil
			}
			return map[string]any{"sourcePath": source}
		},
		prepare: func(ctx context.Context) error { return p.api.upload(ctx, upload, data) },
	}, cur)
}

// ensureCert makes the certificate, key and client-ssl profile of c match,
// and returns the files the profile used before and no longer does.
func (p *provider) ensureCert(ctx context.Context, tag ownerTag, c certPlan) ([]string, error) {
	if err := p.ensureFile(ctx, &sslCertKind, c.file, c.cert.CertPEM); err != nil {
		return nil, err
	}
	if err := p.ensureFile(ctx, &sslKeyKind, c.file, c.cert.KeyPEM); err != nil {
		return nil, err
	}
	tag.TLS = &tlsTag{Secret: c.cert.Secret, Hosts: c.cert.Hosts, Fingerprint: c.cert.Fingerprint, Ports: c.cert.Ports}
	desc := tag.String()
	file := fullPath(p.cfg.Partition, c.file)
	chain := []chainLink{{Name: "default", Cert: file, Key: file}}
	serverName := cmp.Or(c.serverName, "none")
	sniDefault := strconv.FormatBool(c.sniDefault)

	cur, err := readObject(ctx, p, &clientSSLKind, c.profile)
	if err != nil {
		return nil, err
	}
	var old []string
	err = ensureObject(ctx, p, &clientSSLKind, desired[clientSSLState, map[string]any]{
		name: c.profile, lb: tag.LB,
		body: map[string]any{
			"name": c.profile, "partition": p.cfg.Partition, "description": desc, "defaultsFrom": profileClientSSL,
			"certKeyChain": chain, "sniDefault": sniDefault, "serverName": serverName,
		},
		diff: func(cur *clientSSLState) map[string]any {
			fields := map[string]any{}
			if !slices.Equal(cur.CertKeyChain, chain) {
				fields["certKeyChain"] = chain
				for _, l := range cur.CertKeyChain {
					for _, f := range []string{l.Cert, l.Key} {
						if name, found := strings.CutPrefix(f, "/"+p.cfg.Partition+"/"); found && name != c.file && !slices.Contains(old, name) {
							old = append(old, name)
						}
					}
				}
			}
			if cur.Description != desc {
				fields["description"] = desc
			}
			if cur.DefaultsFrom != profileClientSSL {
				fields["defaultsFrom"] = profileClientSSL
			}
			if cur.SNIDefault != sniDefault {
				fields["sniDefault"] = sniDefault
			}
			if cmp.Or(cur.ServerName, "none") != serverName {
				fields["serverName"] = serverName
			}
			return fields
		},
	}, cur)
	if err != nil {
		return nil, err
	}
	return old, nil
}

// deleteFiles deletes the ssl-cert and ssl-key name; gone ones are fine.
func (p *provider) deleteFiles(ctx context.Context, name string) error {
	for _, k := range fileKinds {
		if err := deleteObject(ctx, p, k, name, ""); err != nil {
			return err
		}
	}
	return nil
}
