package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/kubectl/pkg/util/podutils"
	"sigs.k8s.io/yaml"

	"github.com/nodeportlocal/npl/contract"
)

// mapping is one row of `nplctl mappings`.
type mapping struct {
	Namespace string            `json:"namespace"`
	Pod       string            `json:"pod"`
	Node      string            `json:"node"`
	PodPort   int               `json:"podPort"`
	Protocol  contract.Protocol `json:"protocol"`
	NodeIP    string            `json:"nodeIP"`
	NodePort  int               `json:"nodePort"`
	IPFamily  contract.Family   `json:"ipFamily"`
	Services  []string          `json:"services"`
	Ready     bool              `json:"ready"`
	Error     string            `json:"error,omitempty"`
}

func newMappingsCommand(g *globals) *cobra.Command {
	var node string
	cmd := &cobra.Command{
		Use:   "mappings",
		Short: "List the node-port mappings from the Pods' nodeportlocal.antrea.io annotations",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.checkOutput(); err != nil {
				return err
			}
			rows, err := mappings(cmd.Context(), g, node)
			if err != nil {
				return err
			}
			return printMappings(cmd.OutOrStdout(), g.output, rows)
		},
	}
	cmd.Flags().StringVar(&node, "node", "", "only the Pods of this node")
	return cmd
}

func mappings(ctx context.Context, g *globals, node string) ([]mapping, error) {
	client, err := newClient(g)
	if err != nil {
		return nil, err
	}
	opts := metav1.ListOptions{}
	if node != "" {
		opts.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}
	pods, err := client.CoreV1().Pods(g.namespace).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	svcs, err := client.CoreV1().Services(g.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list services: %w", err)
	}
	rows := []mapping{}
	for i := range pods.Items {
		pod := &pods.Items[i]
		value, ok := pod.Annotations[contract.PodKey]
		if !ok {
			continue
		}
		entries, err := contract.Parse(value)
		if err != nil {
			rows = append(rows, mapping{Namespace: pod.Namespace, Pod: pod.Name, Node: pod.Spec.NodeName, Error: err.Error()})
			continue
		}
		for _, e := range entries {
			rows = append(rows, mapping{
				Namespace: pod.Namespace, Pod: pod.Name, Node: pod.Spec.NodeName,
				PodPort: e.PodPort, Protocol: e.Protocol, NodeIP: e.NodeIP, NodePort: e.NodePort, IPFamily: e.IPFamily,
				Services: servicesOf(pod, e, svcs.Items), Ready: podutils.IsPodReady(pod),
			})
		}
	}
	slices.SortFunc(rows, func(a, b mapping) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod),
			cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.PodPort, b.PodPort), cmp.Compare(a.IPFamily, b.IPFamily))
	})
	return rows, nil
}

// servicesOf names the opted-in Services whose port targets the entry.
func servicesOf(pod *corev1.Pod, e contract.Entry, svcs []corev1.Service) []string {
	out := []string{}
	for i := range svcs {
		svc := &svcs[i]
		if !contract.ServiceEnabled(svc.Annotations) || !contract.Selects(svc, pod) {
			continue
		}
		for _, sp := range svc.Spec.Ports {
			port, ok := contract.ResolveTargetPort(pod, sp)
			if proto, known := contract.ProtocolOf(sp.Protocol); ok && known && int(port) == e.PodPort && proto == e.Protocol {
				out = append(out, svc.Name)
				break
			}
		}
	}
	return out
}

func printMappings(w io.Writer, format string, rows []mapping) error {
	if format == "json" || format == "yaml" {
		return printStructured(w, format, map[string]any{"mappings": rows})
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	header := "NAMESPACE\tPOD\tNODE\tPOD-PORT\tPROTOCOL\tNODE-IP:NODE-PORT\tSERVICES\tREADY"
	if format == "wide" {
		header += "\tFAMILY"
	}
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		if r.Error != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t-\tinvalid annotation: %s\n", r.Namespace, r.Pod, r.Node, r.Error)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s:%d\t%s\t%t", r.Namespace, r.Pod, r.Node, r.PodPort, r.Protocol,
			r.NodeIP, r.NodePort, orNone(strings.Join(r.Services, ",")), r.Ready)
		if format == "wide" {
			fmt.Fprintf(tw, "\t%s", r.IPFamily)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func printStructured(w io.Writer, format string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if format == "yaml" {
		if b, err = yaml.JSONToYAML(b); err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
