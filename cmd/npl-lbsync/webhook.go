package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"

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
	cert, err := tls.LoadX509KeyPair(filepath.Join(o.webhookCertDir, "tls.crt"), filepath.Join(o.webhookCertDir, "tls.key"))
	if err != nil {
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
		Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
	}); err != nil {
		return cli.Usagef("%v", err)
	}
	return nil
}
