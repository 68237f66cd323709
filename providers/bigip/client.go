package bigip

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	f5 "github.com/f5devcentral/go-bigip"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/internal/secretfile"
)

const (
	// maxParallelCalls bounds the calls in flight to the BIG-IP, whose REST
	// service handles few at a time.
	maxParallelCalls = 4
	// tokenLifetime is what go-bigip asks BIG-IP for (its default, also the
	// longest it accepts without a refresh token).
	tokenLifetime = 1200 * time.Second
	// tokenRenewAfter is when the provider logs in again, ahead of expiry,
	// because go-bigip never refreshes a token.
	tokenRenewAfter = tokenLifetime - 5*time.Minute
	// apiCallRetries is go-bigip's retry count. One means no retry: the
	// controller backs off itself. go-bigip still sleeps 10 s on a 503 or an
	// "active asynchronous task" answer before giving up.
	apiCallRetries = 1
)

// client makes iControl REST calls through go-bigip. go-bigip sessions are
// not safe for concurrent use (APICall writes Transport.Proxy on each call),
// so the client holds one session, with its own transport, per call in
// flight.
type client struct {
	cfg  *Config
	tls  *tls.Config
	idle chan *f5.BigIP
	now  func() time.Time // the clock that ages tokens; time.Now outside tests

	mu      sync.Mutex // guards token and tokenAt
	token   string
	tokenAt time.Time
}

// apiError is an error answer of the BIG-IP: go-bigip returns only its
// message, the client keeps the status too.
type apiError struct {
	Code    int
	Message string
}

func (e *apiError) Error() string {
	if e.Code == 0 {
		return e.Message
	}
	return fmt.Sprintf("HTTP %d: %s", e.Code, e.Message)
}

// statusOf returns the HTTP status of an error answer, 0 for other errors.
func statusOf(err error) int {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return 0
}

func isNotFound(err error) bool { return statusOf(err) == http.StatusNotFound }
func isConflict(err error) bool { return statusOf(err) == http.StatusConflict }

func newClient(ctx context.Context, cfg *Config) (*client, error) {
	c := &client{cfg: cfg, idle: make(chan *f5.BigIP, maxParallelCalls), now: time.Now}
	c.tls = &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: cfg.InsecureSkipVerify} //nolint:gosec // the user asked for it.
	if cfg.CAFile != "" && !cfg.InsecureSkipVerify {
		pool, err := secretfile.LoadCAPool(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("caFile: %w", err)
		}
		c.tls.RootCAs = pool
	}
	user, password, err := cfg.credentials()
	if err != nil {
		return nil, err
	}
	for range maxParallelCalls {
		b := f5.NewSession(c.sessionConfig(user, password))
		b.Transport = c.newTransport()
		if cfg.TokenAuth {
			// Calls carry the token, never the password.
			b.User, b.Password = "", ""
		}
		c.idle <- b
	}
	if cfg.TokenAuth {
		if _, err := c.currentToken(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *client) sessionConfig(user, password string) *f5.Config {
	return &f5.Config{
		Address:            c.cfg.URL,
		Username:           user,
		Password:           password,
		CertVerifyDisable:  c.cfg.InsecureSkipVerify || strings.HasPrefix(c.cfg.URL, "http://"),
		TrustedCertificate: c.cfg.CAFile,
		ConfigOptions: &f5.ConfigOptions{
			APICallTimeout: c.cfg.Timeout,
			TokenTimeout:   tokenLifetime,
			APICallRetries: apiCallRetries,
		},
	}
}

func (c *client) newTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       c.tls.Clone(),
		TLSHandshakeTimeout:   10 * time.Second,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// currentToken returns a token younger than tokenRenewAfter, logging in when
// there is none.
func (c *client) currentToken(ctx context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.token != "" && c.now().Sub(c.tokenAt) < tokenRenewAfter {
		return c.token, nil
	}
	return c.loginLocked(ctx)
}

// renewToken logs in again after BIG-IP refused stale, unless another call
// already replaced it.
func (c *client) renewToken(ctx context.Context, stale string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.token != stale && c.token != "" {
		return c.token, nil
	}
	return c.loginLocked(ctx)
}

// loginLocked creates a go-bigip token session and keeps its token. The
// session's own transport serves only the login.
func (c *client) loginLocked(ctx context.Context) (token string, err error) {
	user, password, err := c.cfg.credentials()
	if err != nil {
		return "", err
	}
	defer func() {
		// go-bigip panics when the token PATCH answer has no numeric timeout.
		if r := recover(); r != nil {
			err = fmt.Errorf("log in to %s as %s: unexpected token answer: %v", c.cfg.URL, user, r)
		}
	}()
	b, err := f5.NewTokenSession(c.sessionConfig(user, password))
	if b != nil && b.Transport != nil {
		b.Transport.CloseIdleConnections()
	}
	if err != nil {
		return "", fmt.Errorf("log in to %s as %s: %w", c.cfg.URL, user, err)
	}
	c.token, c.tokenAt = b.Token, c.now()
	klog.FromContext(ctx).V(2).Info("Logged in to BIG-IP", "url", c.cfg.URL, "user", user)
	return c.token, nil
}

// do sends one call; path is under /mgmt/tm/ (for example "ltm/pool"). It
// decodes the answer into out when out is not nil. With token authentication
// a 401 triggers one new login and one retry.
func (c *client) do(ctx context.Context, method, path string, body, out any) error {
	return c.doIn(ctx, "", method, path, body, out)
}

// doIn is do within the transaction txn ("": none), whose id the call
// carries in X-F5-REST-Coordination-Id: BIG-IP queues the write until
// the transaction is committed.
func (c *client) doIn(ctx context.Context, txn, method, path string, body, out any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var raw string
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode %s body: %w", path, err)
		}
		raw = string(b)
	}
	log := klog.FromContext(ctx)
	if method == http.MethodGet {
		log.V(5).Info("BIG-IP call", "method", method, "path", path)
	} else {
		log.V(4).Info("BIG-IP call", "method", method, "path", path)
	}
	var token string
	if c.cfg.TokenAuth {
		var err error
		if token, err = c.currentToken(ctx); err != nil {
			return err
		}
	}
	data, err := c.call(ctx, method, path, raw, token, txn)
	if c.cfg.TokenAuth && statusOf(err) == http.StatusUnauthorized {
		log.V(2).Info("BIG-IP refused the token, logging in again", "path", path)
		if token, err = c.renewToken(ctx, token); err != nil {
			return err
		}
		data, err = c.call(ctx, method, path, raw, token, txn)
	}
	if err != nil {
		return err
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("decode answer of %s %s: %w", method, path, err)
		}
	}
	return nil
}

// call runs go-bigip's APICall on an idle session, within transaction txn
// when not empty (go-bigip's BigIP.Transaction), and turns its answer into
// data or an *apiError that keeps the HTTP status.
func (c *client) call(ctx context.Context, method, path, body, token, txn string) ([]byte, error) {
	var b *f5.BigIP
	select {
	case b = <-c.idle:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() {
		b.Transaction = ""
		c.idle <- b
	}()
	b.Token, b.Transaction = token, txn
	req := &f5.APIRequest{Method: strings.ToLower(method), URL: "mgmt/tm/" + path}
	if body != "" {
		req.Body, req.ContentType = body, "application/json"
	}
	data, err := b.APICall(req)
	return data, classify(data, err)
}

// classify recovers the status of an error answer: go-bigip returns the
// JSON body with an error holding only the message, "HTTP <code> :: body"
// for a non-JSON body, and no error at all for an error with an empty
// message.
func classify(data []byte, err error) error {
	var body struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	// Only error bodies have a "code"; checking first spares parsing every
	// answer twice.
	if len(data) > 0 && data[0] == '{' && bytes.Contains(data, []byte(`"code"`)) && json.Unmarshal(data, &body) == nil && body.Code >= 400 {
		msg := body.Message
		if msg == "" {
			msg = http.StatusText(body.Code)
		}
		return &apiError{Code: body.Code, Message: msg}
	}
	if err == nil {
		return nil
	}
	var code int
	if _, scanErr := fmt.Sscanf(err.Error(), "HTTP %d ::", &code); scanErr == nil {
		return &apiError{Code: code, Message: err.Error()}
	}
	if strings.HasPrefix(err.Error(), "service unavailable after") {
		return &apiError{Code: http.StatusServiceUnavailable, Message: err.Error()}
	}
	return err
}

// upload sends a file to BIG-IP's upload directory (/var/config/rest/
// downloads/<name>) with go-bigip's UploadBytes, for a sys/file object to
// load by sourcePath. With token authentication a 401 triggers one new
// login and one retry.
func (c *client) upload(ctx context.Context, name string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	klog.FromContext(ctx).V(4).Info("BIG-IP upload", "file", name, "bytes", len(data))
	var token string
	if c.cfg.TokenAuth {
		var err error
		if token, err = c.currentToken(ctx); err != nil {
			return err
		}
	}
	err := c.uploadOnce(ctx, name, data, token)
	if c.cfg.TokenAuth && statusOf(err) == http.StatusUnauthorized {
		if token, err = c.renewToken(ctx, token); err != nil {
			return err
		}
		err = c.uploadOnce(ctx, name, data, token)
	}
	if err != nil {
		return fmt.Errorf("upload %s: %w", name, err)
	}
	return nil
}

func (c *client) uploadOnce(ctx context.Context, name string, data []byte, token string) error {
	var b *f5.BigIP
	select {
	case b = <-c.idle:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { c.idle <- b }()
	b.Token = token
	_, err := b.UploadBytes(data, name)
	return classify(nil, err)
}

// txnCall is one write of a transaction.
type txnCall struct {
	method, path string
	body         any
}

// transaction applies calls all together or not at all: an iControl REST
// transaction (as go-bigip's StartTransaction and CommitTransaction make),
// the calls queued in it, then committed. BIG-IP validates the whole at the
// commit, so that a virtual server may be deleted and another created on
// its destination with no moment where neither or both exist. A failure
// before the commit discards the transaction.
func (c *client) transaction(ctx context.Context, calls []txnCall) error {
	var started struct {
		TransID int64 `json:"transId"`
	}
	if err := c.do(ctx, http.MethodPost, "transaction", map[string]any{}, &started); err != nil {
		return fmt.Errorf("start a transaction: %w", err)
	}
	id := strconv.FormatInt(started.TransID, 10)
	for _, call := range calls {
		if err := c.doIn(ctx, id, call.method, call.path, call.body, nil); err != nil {
			_ = c.do(ctx, http.MethodDelete, "transaction/"+id, nil, nil)
			return fmt.Errorf("transaction %s: %s %s: %w", id, call.method, call.path, err)
		}
	}
	if err := c.do(ctx, http.MethodPatch, "transaction/"+id, map[string]any{"state": "VALIDATING"}, nil); err != nil {
		return fmt.Errorf("commit transaction %s: %w", id, err)
	}
	return nil
}
