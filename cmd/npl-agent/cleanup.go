package main

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/agent/datapath"
	"github.com/nodeportlocal/npl/agent/kubeapi"
	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/internal/cli"
)

func newCleanupCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "cleanup",
		Short: "Remove this node's NodePortLocal chains, jumps and Pod annotations (on uninstall)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.nodeName == "" {
				return cli.Usagef("--node-name is required (or set $NODE_NAME)")
			}
			return cleanup(cmd.Context(), o)
		},
	}
}

// cleanup removes the rules of both backends and families, then the annotation
// of every Pod on the node. It tries everything and reports every failure.
func cleanup(ctx context.Context, o *options) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := klog.FromContext(ctx).WithValues("node", o.nodeName)
	var errs []error
	if err := datapath.CleanupAll(ctx); err != nil {
		errs = append(errs, err)
	}

	restCfg, err := cli.RESTConfig(*o.kubeconfig, "npl-agent-cleanup/"+o.nodeName)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	client, err := kubeapi.NewForConfig(restCfg)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	pods, err := client.ListPods(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", o.nodeName).String(),
	})
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list pods of node %s: %w", o.nodeName, err))...)
	}
	patch := []byte(`{"metadata":{"annotations":{"` + contract.PodKey + `":null}}}`)
	removed := 0
	for _, p := range pods.Items {
		if _, ok := p.Annotations[contract.PodKey]; !ok {
			continue
		}
		err := client.PatchPodStatus(ctx, p.Namespace, p.Name, patch)
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove annotation of pod %s/%s: %w", p.Namespace, p.Name, err))
			continue
		}
		removed++
	}
	logger.Info("Cleaned up", "annotationsRemoved", removed)
	return errors.Join(errs...)
}
