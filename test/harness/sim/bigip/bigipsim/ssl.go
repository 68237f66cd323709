package bigipsim

import (
	"crypto/rsa"
	"crypto/sha1" //nolint:gosec // BIG-IP's file checksums are SHA-1; nothing secure relies on them.
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// uploadsPath is where go-bigip's UploadBytes sends files, in chunks with a
// Content-Range header; sys/file objects then name them by sourcePath.
const (
	uploadsPath  = "/mgmt/shared/file-transfer/uploads/"
	downloadsDir = "/var/config/rest/downloads/"
)

// sslFile is a sys/file ssl-cert or ssl-key: its properties and content.
type sslFile struct {
	props   obj
	content []byte
}

// upload answers one chunk of a file upload: "start-end/total".
func (s *Server) upload(name, contentRange string, body []byte) response {
	if name == "" || strings.Contains(name, "/") {
		return badRequest("upload: invalid file name %q", name)
	}
	var start, end, total int
	if _, err := fmt.Sscanf(contentRange, "%d-%d/%d", &start, &end, &total); err != nil || end-start+1 != len(body) || end >= total {
		return badRequest("upload %s: invalid Content-Range %q for %d bytes", name, contentRange, len(body))
	}
	cur := s.st.uploads[name]
	if start == 0 {
		cur = nil
	}
	if start != len(cur) {
		return badRequest("upload %s: chunk starts at %d, %d bytes received", name, start, len(cur))
	}
	s.st.uploads[name] = append(cur, body...)
	return ok(obj{
		"remainingByteCount": total - end - 1,
		"usedChunks":         obj{"0": len(body)},
		"totalByteCount":     total,
		"localFilePath":      downloadsDir + name,
		"temporaryFilePath":  downloadsDir + "tmp/" + name,
		"generation":         0,
		"lastUpdateMicros":   time.Now().UnixMicro(),
	})
}

// serveSSLFile serves /sys/file/ssl-cert and /sys/file/ssl-key.
func (st *store) serveSSLFile(req request, typ string, rest []string) response {
	files := st.certs
	display := "Certificate"
	if typ == "ssl-key" {
		files, display = st.keys, "Key"
	}
	coll := "sys/file/" + typ
	if len(rest) > 1 {
		return notRegistered(req.path)
	}
	if len(rest) == 0 {
		switch req.method {
		case http.MethodGet:
			return listCollection(req, "tm:sys:file:"+typ+":"+typ+"collectionstate", coll, files,
				func(f *sslFile) obj { return f.props }, func(f *sslFile) any { return copyObj(f.props) })
		case http.MethodPost:
			body, r, resp, good := st.createTarget(req, display, func(fp string) bool { return files[fp] != nil })
			if !good {
				return resp
			}
			f := &sslFile{props: obj{
				"kind": "tm:sys:file:" + typ + ":" + typ + "state", "name": r.name, "partition": r.partition,
				"fullPath": r.fullPath(), "selfLink": selfLink(coll, r.fullPath()),
			}}
			if resp, good := st.loadFile(f, typ, r, body); !good {
				return resp
			}
			files[r.fullPath()] = f
			return ok(copyObj(f.props))
		}
		return methodNotAllowed(req.method, req.path)
	}
	r, good := parseURLName(rest[0])
	f := files[r.fullPath()]
	if !good || f == nil {
		return notFound(display, r.fullPath())
	}
	switch req.method {
	case http.MethodGet:
		return ok(copyObj(f.props))
	case http.MethodPut, http.MethodPatch:
		body, good := decodeBody(req.body)
		if !good {
			return invalidJSON()
		}
		if resp, good := checkRename(body, r); !good {
			return resp
		}
		next := &sslFile{props: copyObj(f.props), content: f.content}
		if resp, good := st.loadFile(next, typ, r, body); !good {
			return resp
		}
		// The profiles that use it must still hold a matching pair.
		old := *f
		*f = *next
		for _, pfp := range sortedKeys(st.sslProfiles) {
			if resp, good := st.checkCertKeyChain(st.sslProfiles[pfp], pfp); !good {
				*f = old
				return resp
			}
		}
		return ok(copyObj(f.props))
	case http.MethodDelete:
		for _, pfp := range sortedKeys(st.sslProfiles) {
			if slices.Contains(chainFiles(st.sslProfiles[pfp], typ), r.fullPath()) {
				return badRequest("01070621:3: The %s (%s) is in use by client-ssl profile %s.", strings.ToLower(display), r.fullPath(), pfp)
			}
		}
		delete(files, r.fullPath())
		st.next()
		return ok(nil)
	}
	return methodNotAllowed(req.method, req.path)
}

// loadFile reads the file a body's sourcePath names (an upload) into f,
// checks it is a PEM certificate or private key, and sets the properties
// BIG-IP derives: the checksum "SHA1:<size>:<hex>" and the key type.
func (st *store) loadFile(f *sslFile, typ string, r ref, body obj) (response, bool) {
	if src, present := body["sourcePath"]; present {
		path, _ := src.(string)
		name, found := strings.CutPrefix(strings.TrimPrefix(strings.TrimPrefix(path, "file://"), "file:"), downloadsDir)
		data, uploaded := st.uploads[name]
		if !found || !uploaded {
			return badRequest("01070712:3: Cannot create %s %s: file %s not found", typ, r.fullPath(), path), false
		}
		f.content = slices.Clone(data)
		f.props["sourcePath"] = path
	}
	if f.content == nil {
		return badRequest("01070734:3: Configuration error: %s %s needs a sourcePath", typ, r.fullPath()), false
	}
	if typ == "ssl-cert" {
		block, _ := pem.Decode(f.content)
		if block == nil || block.Type != "CERTIFICATE" {
			return badRequest("01070712:3: Values (%s) specified for certificate: not a PEM certificate", r.fullPath()), false
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return badRequest("01070712:3: Values (%s) specified for certificate: %v", r.fullPath(), err), false
		}
		sum := sha256.Sum256(cert.Raw)
		f.props["subject"] = "CN=" + cert.Subject.CommonName
		f.props["expirationDate"] = cert.NotAfter.Unix()
		f.props["fingerprint"] = "SHA256/" + strings.ToUpper(hex.EncodeToString(sum[:]))
	} else {
		kt, err := keyType(f.content)
		if err != nil {
			return badRequest("01070712:3: Values (%s) specified for key: %v", r.fullPath(), err), false
		}
		f.props["keyType"] = kt
	}
	sum := sha1.Sum(f.content) //nolint:gosec // BIG-IP's checksum format.
	f.props["checksum"] = "SHA1:" + strconv.Itoa(len(f.content)) + ":" + hex.EncodeToString(sum[:])
	f.props["size"] = len(f.content)
	merge(f.props, body, "sourcePath")
	f.props["generation"] = st.next()
	return response{}, true
}

func keyType(data []byte) (string, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return "", fmt.Errorf("not a PEM private key")
	}
	if _, err := x509.ParseECPrivateKey(block.Bytes); err == nil {
		return "ec-private", nil
	}
	if _, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return "rsa-private", nil
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return "", fmt.Errorf("not a private key: %w", err)
	}
	if _, isRSA := key.(*rsa.PrivateKey); isRSA {
		return "rsa-private", nil
	}
	return "ec-private", nil
}

// chainFiles returns the full paths of the certificates (typ ssl-cert) or
// keys (ssl-key) a client-ssl profile's certKeyChain uses.
func chainFiles(p obj, typ string) []string {
	key := "cert"
	if typ == "ssl-key" {
		key = "key"
	}
	var out []string
	chain, _ := p["certKeyChain"].([]any)
	for _, raw := range chain {
		c, _ := raw.(map[string]any)
		if v := str(c, key); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// serveClientSSL serves /ltm/profile/client-ssl[/<name>].
func (st *store) serveClientSSL(req request, rest []string) response {
	const coll = "ltm/profile/client-ssl"
	if len(rest) > 1 {
		return notRegistered(req.path)
	}
	if len(rest) == 0 {
		switch req.method {
		case http.MethodGet:
			return listCollection(req, "tm:ltm:profile:client-ssl:client-sslcollectionstate", coll, st.sslProfiles, self, anyCopy)
		case http.MethodPost:
			body, r, resp, good := st.createTarget(req, "Profile", func(fp string) bool { return st.sslProfiles[fp] != nil || fp == "/Common/clientssl" })
			if !good {
				return resp
			}
			p := obj{
				"kind": "tm:ltm:profile:client-ssl:client-sslstate", "name": r.name, "partition": r.partition,
				"fullPath": r.fullPath(), "selfLink": selfLink(coll, r.fullPath()),
				"defaultsFrom": "/Common/clientssl", "sniDefault": "false", "serverName": "none",
			}
			if resp, good := st.applyClientSSL(p, r, body); !good {
				return resp
			}
			st.sslProfiles[r.fullPath()] = p
			return ok(copyObj(p))
		}
		return methodNotAllowed(req.method, req.path)
	}
	r, good := parseURLName(rest[0])
	p := st.sslProfiles[r.fullPath()]
	if !good || p == nil {
		return notFound("Profile", r.fullPath())
	}
	switch req.method {
	case http.MethodGet:
		return ok(copyObj(p))
	case http.MethodPut, http.MethodPatch:
		body, good := decodeBody(req.body)
		if !good {
			return invalidJSON()
		}
		if resp, good := checkRename(body, r); !good {
			return resp
		}
		next := copyObj(p)
		if resp, good := st.applyClientSSL(next, r, body); !good {
			return resp
		}
		st.sslProfiles[r.fullPath()] = next
		// The virtuals that use it must stay valid (one SNI default).
		for _, vfp := range sortedKeys(st.virtuals) {
			v := st.virtuals[vfp]
			if slices.ContainsFunc(v.profiles, func(o obj) bool { return str(o, "fullPath") == r.fullPath() }) {
				vr, _ := parsePath(vfp, commonPartition)
				if resp, good := st.checkVirtual(v, vr); !good {
					st.sslProfiles[r.fullPath()] = p
					return resp
				}
			}
		}
		return ok(copyObj(next))
	case http.MethodDelete:
		for _, vfp := range sortedKeys(st.virtuals) {
			if slices.ContainsFunc(st.virtuals[vfp].profiles, func(o obj) bool { return str(o, "fullPath") == r.fullPath() }) {
				return badRequest("01070621:3: The profile (%s) is in use by virtual server %s.", r.fullPath(), vfp)
			}
		}
		delete(st.sslProfiles, r.fullPath())
		st.next()
		return ok(nil)
	}
	return methodNotAllowed(req.method, req.path)
}

// applyClientSSL validates body and writes it into p: the parent profile
// exists, every certKeyChain entry names an existing certificate and key
// that match, sniDefault is a boolean.
func (st *store) applyClientSSL(p obj, r ref, body obj) (response, bool) {
	if d, present := body["defaultsFrom"]; present {
		dr, good := parsePath(fmt.Sprint(d), commonPartition)
		if !good || (dr.fullPath() != "/Common/clientssl" && st.sslProfiles[dr.fullPath()] == nil) {
			return refNotFound("Profile", dr.fullPath()), false
		}
		body["defaultsFrom"] = dr.fullPath()
	}
	if raw, present := body["sniDefault"]; present {
		switch v := raw.(type) {
		case bool:
			body["sniDefault"] = strconv.FormatBool(v)
		case string:
			if v != "true" && v != "false" {
				return badRequest("01070734:3: Configuration error: sniDefault must be true or false, not %q", v), false
			}
		default:
			return badRequest("01070734:3: Configuration error: sniDefault must be true or false"), false
		}
	}
	if raw, present := body["certKeyChain"]; present {
		list, isList := raw.([]any)
		if !isList || len(list) == 0 {
			return badRequest("01070734:3: Configuration error: certKeyChain must be a non-empty array"), false
		}
		var chain []any
		for i, it := range list {
			c, isObj := it.(map[string]any)
			if !isObj {
				return badRequest("01070734:3: Configuration error: certKeyChain[%d] must be an object", i), false
			}
			cr, good1 := parsePath(str(c, "cert"), r.partition)
			kr, good2 := parsePath(str(c, "key"), r.partition)
			if !good1 || st.certs[cr.fullPath()] == nil {
				return refNotFound("Certificate", cr.fullPath()), false
			}
			if !good2 || st.keys[kr.fullPath()] == nil {
				return refNotFound("Key", kr.fullPath()), false
			}
			name := str(c, "name")
			if name == "" {
				name = "default"
			}
			chain = append(chain, obj{"name": name, "cert": cr.fullPath(), "key": kr.fullPath()})
		}
		body["certKeyChain"] = chain
	}
	merge(p, body)
	if resp, good := st.checkCertKeyChain(p, r.fullPath()); !good {
		return resp, false
	}
	p["generation"] = st.next()
	return response{}, true
}

// checkCertKeyChain checks that each certificate of a profile matches its
// key, as BIG-IP refuses a profile whose pair does not.
func (st *store) checkCertKeyChain(p obj, fullPath string) (response, bool) {
	chain, _ := p["certKeyChain"].([]any)
	for _, raw := range chain {
		c, _ := raw.(map[string]any)
		cert, key := st.certs[str(c, "cert")], st.keys[str(c, "key")]
		if cert == nil || key == nil {
			continue
		}
		if _, err := tls.X509KeyPair(cert.content, key.content); err != nil {
			return badRequest("01070313:3: Error reading key PEM file %s for profile %s: key and certificate do not match",
				str(c, "key"), fullPath), false
		}
	}
	return response{}, true
}
