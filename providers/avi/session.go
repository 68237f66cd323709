package avi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/vmware/alb-sdk/go/clients"
	"github.com/vmware/alb-sdk/go/session"

	"github.com/nodeportlocal/npl/internal/secretfile"
)

// apiError is an error answer of the controller, with its message, so that
// a Service's SyncFailed event shows what the controller said.
type apiError struct {
	Status  int
	Message string
}

func (e *apiError) Error() string { return fmt.Sprintf("Avi %d: %s", e.Status, e.Message) }

// statusOf returns the controller's HTTP status behind err, or 0.
func statusOf(err error) int {
	var e *apiError
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// aviSession is one SDK session and the transport that owns its login. A
// session serves one operation at a time.
type aviSession struct {
	client *clients.AviClient
	auth   *authTransport
}

// newSession logs a new SDK session in.
func (p *Provider) newSession(ctx context.Context, version string) (*aviSession, error) {
	auth := &authTransport{
		base:  p.base,
		host:  p.cfg.Controller,
		creds: credentials{usernameFile: p.cfg.UsernameFile, passwordFile: p.cfg.PasswordFile},
	}
	sdkTransport := &http.Transport{Protocols: new(http.Protocols)}
	sdkTransport.Protocols.SetHTTP1(true)
	sdkTransport.RegisterProtocol("https", auth)

	unbind := auth.bind(ctx)
	defer unbind()
	opts := []func(*session.AviSession) error{
		session.SetTenant(p.cfg.Tenant),
		session.SetTimeout(p.cfg.Timeout),
		session.SetTransport(sdkTransport),
		// Fail fast: npl-lbsync retries with backoff. Without this the SDK
		// polls the controller's status for up to four minutes.
		session.DisableControllerStatusCheckOnFailure(true),
		session.SetMaxApiRetries(1),
	}
	if version != "" {
		opts = append(opts, session.SetVersion(version))
	}
	// The username is not secret; the password never reaches the SDK (see
	// authTransport).
	user, err := secretfile.Read(p.cfg.UsernameFile)
	if err != nil {
		return nil, fmt.Errorf("read username: %w", err)
	}
	client, err := clients.NewAviClient(p.cfg.Controller, user, opts...)
	if err != nil {
		return nil, fmt.Errorf("log in to %s: %w", p.cfg.Controller, explain(auth, err))
	}
	return &aviSession{client: client, auth: auth}, nil
}

// explain turns what the SDK returned into an error that says what the
// controller answered, from what the transport saw.
func explain(auth *authTransport, err error) error {
	if f := auth.lastFailure(); f != nil {
		if f.status != 0 {
			return &apiError{Status: f.status, Message: f.message}
		}
		if f.err != nil {
			return fmt.Errorf("%s %s: %w", f.method, f.path, f.err)
		}
	}
	var aviErr session.AviError
	if errors.As(err, &aviErr) && aviErr.HttpStatusCode != 0 {
		msg := http.StatusText(aviErr.HttpStatusCode)
		if aviErr.Message != nil {
			msg = *aviErr.Message
		}
		return &apiError{Status: aviErr.HttpStatusCode, Message: msg}
	}
	return err
}

// call runs one SDK call and explains its error.
func (s *aviSession) call(fn func(*session.AviSession) error) error {
	s.auth.resetFailure()
	if err := fn(s.client.AviSession); err != nil {
		return explain(s.auth, err)
	}
	return nil
}

// listPageSize is the page size of collection reads, as AKO uses.
const listPageSize = 100

// maxPages stops a collection read that would never end.
const maxPages = 10000

// list reads every object of typ matching query, following next.
func list[T any](s *aviSession, typ string, query url.Values) ([]*T, error) {
	q := url.Values{}
	for k, v := range query {
		q[k] = v
	}
	q.Set("include_name", "true")
	q.Set("page_size", fmt.Sprint(listPageSize))
	uri := "api/" + typ + "?" + q.Encode()
	var out []*T
	for page := 0; uri != ""; page++ {
		if page == maxPages {
			return nil, fmt.Errorf("list %s: more than %d pages", typ, maxPages)
		}
		var res session.AviCollectionResult
		err := s.call(func(sess *session.AviSession) (err error) {
			res, err = sess.GetCollectionRaw(uri)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", typ, err)
		}
		if res.Count > 0 && len(res.Results) > 0 {
			var items []*T
			if err := json.Unmarshal(res.Results, &items); err != nil {
				return nil, fmt.Errorf("list %s: decode: %w", typ, err)
			}
			out = append(out, items...)
		}
		uri = nextURI(res.Next)
	}
	return out, nil
}

// nextURI turns a collection's next link (a full URL) into the path the SDK
// wants (api/…), or "" when there is none.
func nextURI(next string) string {
	if i := strings.Index(next, "/api/"); i >= 0 {
		return next[i+1:]
	}
	return ""
}

// getByName reads the object of typ named name, or nil.
func getByName[T any](s *aviSession, typ, name string, query url.Values) (*T, error) {
	q := url.Values{"name": {name}}
	for k, v := range query {
		q[k] = v
	}
	items, err := list[T](s, typ, q)
	if err != nil {
		return nil, err
	}
	for _, it := range items {
		if it != nil {
			return it, nil
		}
	}
	return nil, nil
}

// getUUID reads one object by uuid.
func getUUID[T any](s *aviSession, typ, uuid string) (*T, error) {
	var out *T
	err := s.call(func(sess *session.AviSession) error {
		return sess.Get("api/"+typ+"/"+uuid+"?include_name=true", &out)
	})
	if err != nil {
		return nil, fmt.Errorf("get %s %s: %w", typ, uuid, err)
	}
	return out, nil
}

func create[T any](s *aviSession, typ string, obj *T) (*T, error) {
	var out *T
	err := s.call(func(sess *session.AviSession) error { return sess.Post("api/"+typ, obj, &out) })
	return out, err
}

func update[T any](s *aviSession, typ, uuid string, obj *T) (*T, error) {
	var out *T
	err := s.call(func(sess *session.AviSession) error { return sess.Put("api/"+typ+"/"+uuid, obj, &out) })
	return out, err
}

// remove deletes one object; one that is already gone is not an error.
func remove(s *aviSession, typ, uuid string) error {
	err := s.call(func(sess *session.AviSession) error { return sess.Delete("api/" + typ + "/" + uuid) })
	if statusOf(err) == http.StatusNotFound {
		return nil
	}
	return err
}
