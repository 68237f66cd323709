package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeportlocal/npl/internal/cli"
	"github.com/nodeportlocal/npl/internal/serve"
	"github.com/nodeportlocal/npl/lbsync/config"
	"github.com/nodeportlocal/npl/lbsync/controller"
	"github.com/nodeportlocal/npl/lbsync/webhook"
)

// serveWebhook serves the readiness-gate injection webhook over TLS on every
// replica (it only reads caches), until ctx ends.
func serveWebhook(ctx context.Context, o *options, client kubernetes.Interface, ctrl *controller.Controller, cfg *config.Config) error {
	certs := &certReloader{certFile: filepath.Join(o.webhookCertDir, "tls.crt"), keyFile: filepath.Join(o.webhookCertDir, "tls.key")}
	if _, err := certs.get(nil); err != nil {
		return cli.Usagef("--webhook-cert-dir: %v", err)
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	nsInformer := factory.Core().V1().Namespaces()
	lister := nsInformer.Lister()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), nsInformer.Informer().HasSynced) {
		return fmt.Errorf("wait for the namespace cache: %w", ctx.Err())
	}
	mux := http.NewServeMux()
	mux.Handle("POST "+webhook.Path, &webhook.Injector{Services: ctrl.Services(), Namespaces: lister, Claim: cfg.Claim()})
	if err := serve.ListenTLS(ctx, "webhook", o.webhookAddr, mux, &tls.Config{
		GetCertificate: certs.get, MinVersion: tls.VersionTLS12,
	}); err != nil {
		return cli.Usagef("%v", err)
	}
	return nil
}

// certReloader serves the webhook's certificate and loads it again when the
// files change, so a renewed certificate (cert-manager, a chart upgrade)
// needs no restart.
type certReloader struct {
	certFile, keyFile string

	mu      sync.Mutex
	stamp   time.Time
	current *tls.Certificate
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	stamp := time.Time{}
	for _, f := range []string{r.certFile, r.keyFile} {
		if fi, err := os.Stat(f); err == nil && fi.ModTime().After(stamp) {
			stamp = fi.ModTime()
		}
	}
	if r.current != nil && !stamp.After(r.stamp) {
		return r.current, nil
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		if r.current != nil {
			return r.current, nil // keep serving the last good one
		}
		return nil, fmt.Errorf("load webhook certificate: %w", err)
	}
	r.current, r.stamp = &cert, stamp
	return r.current, nil
}
