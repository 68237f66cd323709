package edge

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/edge/api"
	"github.com/nodeportlocal/npl/internal/secretfile"
	"github.com/nodeportlocal/npl/lbmodel"
)

// maxBody bounds a request body.
const maxBody = 8 << 20

// Handler serves the API of package api. The calls of a cluster are
// served only to a client whose certificate names the cluster
// (api.ClusterURI); the others are answered 403.
func (e *Edge) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/clusters/{cluster}/loadbalancers/{name}", authorized(e.handlePut))
	mux.HandleFunc("DELETE /v1/clusters/{cluster}/loadbalancers/{name}", authorized(e.handleDelete))
	mux.HandleFunc("GET /v1/clusters/{cluster}/loadbalancers/{name}", authorized(e.handleGet))
	mux.HandleFunc("GET /v1/clusters/{cluster}/loadbalancers", authorized(e.handleList))
	mux.HandleFunc("GET "+api.StatusPath, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, e.Status(r.Context()))
	})
	return mux
}

// authorized serves h to a client whose verified certificate names the
// cluster of the path, and answers 403 to any other: a certificate of the
// client CA says who the client is, not which clusters it may change.
func authorized(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		cluster := r.PathValue("cluster")
		if err := lbmodel.CheckClusterName(cluster); err != nil {
			writeError(w, fmt.Errorf("%w: cluster name: %v", ErrInvalid, err))
			return
		}
		cert := clientCert(r)
		if cert == nil || !api.NamesCluster(cert, cluster) {
			writeJSON(w, http.StatusForbidden, api.Error{Error: fmt.Sprintf(
				"the client certificate %q does not name cluster %s: it needs the URI SAN %s",
				clientName(r), cluster, api.ClusterURI(cluster))})
			return
		}
		h(w, r)
	}
}

func (e *Edge) handlePut(w http.ResponseWriter, r *http.Request) {
	cluster, name := r.PathValue("cluster"), r.PathValue("name")
	var req api.LoadBalancerRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeJSON(w, http.StatusRequestEntityTooLarge, api.Error{Error: fmt.Sprintf(
				"load balancer %s: the body is larger than the limit of %d bytes", name, tooLarge.Limit)})
			return
		}
		writeError(w, fmt.Errorf("%w: load balancer %s: body: %v", ErrInvalid, name, err))
		return
	}
	lb := req.Model()
	if err := AttachCertificates(lb, req.Certificates); err != nil {
		writeError(w, err)
		return
	}
	if lb.Name != name {
		writeError(w, fmt.Errorf("%w: the body names load balancer %q, the path %q", ErrInvalid, lb.Name, name))
		return
	}
	ctx := klog.NewContext(r.Context(), klog.FromContext(r.Context()).WithValues("client", clientName(r)))
	res, err := e.Put(ctx, cluster, lb, req.Replaces)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (e *Edge) handleDelete(w http.ResponseWriter, r *http.Request) {
	ctx := klog.NewContext(r.Context(), klog.FromContext(r.Context()).WithValues("client", clientName(r)))
	deleted, err := e.Delete(ctx, r.PathValue("cluster"), r.PathValue("name"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, api.DeleteResult{Deleted: deleted})
}

func (e *Edge) handleList(w http.ResponseWriter, r *http.Request) {
	lbs, err := e.List(r.Context(), r.PathValue("cluster"))
	if err != nil {
		writeError(w, err)
		return
	}
	list := api.List{LoadBalancers: make([]api.LoadBalancer, 0, len(lbs))}
	for i := range lbs {
		list.LoadBalancers = append(list.LoadBalancers, api.FromModel(&lbs[i]))
	}
	writeJSON(w, http.StatusOK, list)
}

func (e *Edge) handleGet(w http.ResponseWriter, r *http.Request) {
	lbs, err := e.List(r.Context(), r.PathValue("cluster"))
	if err != nil {
		writeError(w, err)
		return
	}
	for _, lb := range lbs {
		if lb.Name == r.PathValue("name") {
			writeJSON(w, http.StatusOK, api.FromModel(&lb))
			return
		}
	}
	writeJSON(w, http.StatusNotFound, api.Error{Error: "load balancer " + r.PathValue("name") + " is not served"})
}

// clientCert is the verified client certificate, nil when there is none.
func clientCert(r *http.Request) *x509.Certificate {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return nil
	}
	return r.TLS.VerifiedChains[0][0]
}

// clientName is the subject of the verified client certificate, for logs.
func clientName(r *http.Request) string {
	if c := clientCert(r); c != nil {
		return c.Subject.CommonName
	}
	return ""
}

func writeError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrInvalid):
		status = http.StatusBadRequest
	case errors.Is(err, ErrConflict):
		status = http.StatusConflict
	case errors.Is(err, ErrRejected):
		status = http.StatusUnprocessableEntity
	case errors.Is(err, ErrUnavailable):
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, api.Error{Error: err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// ServerTLS returns the TLS settings of the API: the edge's certificate and
// key from files, and client certificates required and verified against
// the CA certificates of clientCAFile. Nothing of the files is logged.
func ServerTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("server certificate %s and key %s: %w", certFile, keyFile, err)
	}
	pool, err := secretfile.LoadCAPool(clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("client CA: %w", err)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}, nil
}

// Serve serves the API with TLS on ln until ctx ends, then shuts down.
func (e *Edge) Serve(ctx context.Context, ln net.Listener, tlsConfig *tls.Config) error {
	srv := &http.Server{
		Handler:           e.Handler(),
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(serverLog{}, "", 0),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	}
}

// serverLog sends the HTTP server's own messages (refused TLS handshakes,
// among them clients without a valid certificate) to the log.
type serverLog struct{}

func (serverLog) Write(p []byte) (int, error) {
	klog.InfoS("API connection", "message", strings.TrimSpace(string(p)))
	return len(p), nil
}
