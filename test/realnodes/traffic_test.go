package realnodes

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubectl/pkg/util/podutils"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/test/harness/podreply"
)

// Bounds of a request stream: each target gets a request every
// streamInterval, at most streamMaxPerTarget of them, for at most
// streamMaxDuration.
const (
	streamInterval     = 25 * time.Millisecond
	streamMaxPerTarget = 20000
	streamMaxDuration  = 5 * time.Minute
)

// datapathCheckInterval is the agent's drift check in the stories.
const datapathCheckInterval = 3 * time.Second

// streamResult is what a request stream saw.
type streamResult struct {
	sent, failed int
	errs         []string // the first few failures
	// failing is, per target that failed, the first and last failure.
	failing map[string][2]time.Time
}

func (r streamResult) String() string {
	if r.failed == 0 {
		return fmt.Sprintf("%d requests, none failed", r.sent)
	}
	var spans []string
	for _, addr := range slices.Sorted(maps.Keys(r.failing)) {
		w := r.failing[addr]
		spans = append(spans, fmt.Sprintf("%s for %s", addr, w[1].Sub(w[0]).Round(time.Millisecond)))
	}
	return fmt.Sprintf("%d requests, %d failed (first to last failure: %s), first: %v", r.sent, r.failed, strings.Join(spans, ", "), r.errs)
}

// requestStream sends requests from outside the nodes (the test's network
// namespace) until stopped, a new connection per request, so each one goes
// through the node's DNAT afresh.
type requestStream struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	res    streamResult
}

var streamClient = &http.Client{
	Timeout:   2 * time.Second,
	Transport: &http.Transport{DisableKeepAlives: true},
}

// get asks addr for / and returns the namespace/name of the Pod that
// answered.
func get(ctx context.Context, addr string) (string, error) { return getWith(ctx, streamClient, addr) }

// getWith is get through client.
func getWith(ctx context.Context, client *http.Client, addr string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	pod := resp.Header.Get(podreply.Header)
	_, name, _ := strings.Cut(pod, "/")
	if resp.StatusCode != http.StatusOK || pod == "" || string(body) != podreply.Body(name) {
		return "", fmt.Errorf("GET %s: %s %q from %q", addr, resp.Status, body, pod)
	}
	return pod, nil
}

// streamTo sends requests to every target (address -> namespace/name of the
// Pod that must answer) in turn; a failure or another Pod's answer counts.
func streamTo(targets map[string]string) *requestStream {
	return startStream(func(ctx context.Context) []string { return slices.Sorted(maps.Keys(targets)) },
		func(ctx context.Context, addr string, err error, pod string) error {
			if err != nil {
				return err
			}
			if pod != targets[addr] {
				return fmt.Errorf("%s answered by %s; want %s", addr, pod, targets[addr])
			}
			return nil
		})
}

// streamToListed sends requests to the members the load balancer of app's
// Service lists at each moment: a failed request counts when its member was
// listed both before it and after it.
func streamToListed(s *story, app string) *requestStream {
	return startStream(func(ctx context.Context) []string {
		m, _ := s.poolMembers(ctx, app)
		return m
	}, func(ctx context.Context, addr string, err error, _ string) error {
		if err == nil {
			return nil
		}
		after, lerr := s.poolMembers(ctx, app)
		if lerr != nil {
			return fmt.Errorf("%v (and the members after it: %v)", err, lerr)
		}
		if slices.Contains(after, addr) {
			return fmt.Errorf("%s listed before and after: %w", addr, err)
		}
		return nil
	})
}

// startStream runs rounds: each round takes the targets, sends one request
// to each, and judges each answer (judge returns the failure or nil).
func startStream(targets func(context.Context) []string, judge func(ctx context.Context, addr string, err error, pod string) error) *requestStream {
	ctx, cancel := context.WithTimeout(context.Background(), streamMaxDuration)
	rs := &requestStream{cancel: cancel}
	rs.wg.Add(1)
	go func() {
		defer rs.wg.Done()
		for round := 0; round < streamMaxPerTarget && ctx.Err() == nil; round++ {
			began := time.Now()
			var wg sync.WaitGroup
			for _, addr := range targets(ctx) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sent := time.Now()
					pod, err := get(ctx, addr)
					if ctx.Err() != nil {
						return // stopped mid-request: not the datapath's doing
					}
					ferr := judge(ctx, addr, err, pod)
					rs.mu.Lock()
					defer rs.mu.Unlock()
					rs.res.sent++
					if ferr != nil {
						now := time.Now()
						if rs.res.failing == nil {
							rs.res.failing = map[string][2]time.Time{}
						}
						w, seen := rs.res.failing[addr]
						if !seen {
							w[0] = now
						}
						w[1] = now
						rs.res.failing[addr] = w
						rs.res.failed++
						if len(rs.res.errs) < 5 {
							rs.res.errs = append(rs.res.errs, fmt.Sprintf("sent %s, failed after %s: %v",
								sent.Format("15:04:05.000"), now.Sub(sent).Round(time.Millisecond), ferr))
						}
					}
				}()
			}
			wg.Wait()
			select {
			case <-ctx.Done():
			case <-time.After(streamInterval - time.Since(began)):
			}
		}
	}()
	return rs
}

// stop ends the stream and returns what it saw.
func (rs *requestStream) stop() streamResult {
	rs.cancel()
	rs.wg.Wait()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.res
}

// appPods lists the ready, annotated Pods of the workload app (web or
// cart) with their one mapping: nodeIP:nodePort -> namespace/name.
func (s *story) appPods(ctx context.Context, app string) (map[string]string, []corev1.Pod, error) {
	pods, err := s.client.CoreV1().Pods(workloadNS).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		return nil, nil, err
	}
	members := map[string]string{}
	var ready []corev1.Pod
	for _, p := range pods.Items {
		if !podutils.IsPodReady(&p) || p.DeletionTimestamp != nil {
			continue
		}
		entries, err := contract.Parse(p.Annotations[contract.PodKey])
		if err != nil || len(entries) != 1 {
			return nil, nil, fmt.Errorf("pod %s: annotation %q (%v)", p.Name, p.Annotations[contract.PodKey], err)
		}
		members[net.JoinHostPort(entries[0].NodeIP, strconv.Itoa(entries[0].NodePort))] = p.Namespace + "/" + p.Name
		ready = append(ready, p)
	}
	return members, ready, nil
}

// poolMembers lists the enabled members of the load balancer of app's
// Service as the edge serves them, sorted.
func (s *story) poolMembers(_ context.Context, app string) ([]string, error) {
	have, _, err := s.edgeMembers(workloadNS, app)
	return have, err
}

// poolIs checks that the members of the load balancer of app's Service are
// exactly the ready app Pods' mappings, and returns those.
func (s *story) poolIs(ctx context.Context, app string) (map[string]string, error) {
	members, _, err := s.appPods(ctx, app)
	if err != nil {
		return nil, err
	}
	have, err := s.poolMembers(ctx, app)
	if err != nil {
		return nil, err
	}
	if want := slices.Sorted(maps.Keys(members)); !slices.Equal(have, want) {
		return nil, fmt.Errorf("%s members %v; want the %s Pods' %v", app, have, app, want)
	}
	return members, nil
}

// agentMetric sums a counter of the agents over the nodes that are on, read
// from their metrics ports (the agents use the nodes' network).
func (s *story) agentMetric(ctx context.Context, name string) (float64, error) {
	var sum float64
	for _, n := range s.c.Nodes() {
		if s.off[n.Name] {
			continue
		}
		v, err := agentMetricOn(ctx, n.IP.String(), name)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// agentMetricOn reads the metric name (summed over its label sets) from the
// agent on the node at ip.
func agentMetricOn(ctx context.Context, ip, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(ip, "9101")+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %w", ip, line, err)
		}
		sum, found = sum+v, true
	}
	if !found {
		return 0, fmt.Errorf("the agent on %s has no metric %s", ip, name)
	}
	return sum, sc.Err()
}
