package edgebed

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/util/podutils"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/edge/haproxy"
	"github.com/nodeportlocal/npl/lbmodel"
)

// What the Pod Ready → first request through the VIP benchmarks watch (on
// the stand-in kubelets here, on real kubelets in test/realnodes): when
// each Pod turns Ready and gets its annotation, when HAProxy has its server
// and serves it, and when a stream of requests to the VIP first lands on it.

// Percentile is the p-th percentile (0 < p <= 100) of sorted ds, in ms.
func Percentile(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	i := (len(ds)*p + 99) / 100
	return float64(ds[max(i-1, 0)].Microseconds()) / 1000
}

// ReadyWatch records when each Pod of a namespace is first seen with each
// of its conditions True (Ready, ContainersReady, the npl.io/lb-registered
// gate's) through a watch, and when first seen with its NodePortLocal
// annotation. A watch the API server ends is opened again from the last
// version seen.
type ReadyWatch struct {
	mu sync.Mutex
	// trueAt is, per condition type and Pod, when the condition was first
	// seen True.
	trueAt      map[corev1.PodConditionType]map[string]time.Time
	annotatedAt map[string]time.Time
	// readyNow holds the Pods Ready and not terminating as last seen.
	readyNow map[string]bool
	cancel   context.CancelFunc
	done     chan struct{}
}

// WatchReady starts a ReadyWatch on the Pods of ns that selector selects.
func WatchReady(ctx context.Context, client kubernetes.Interface, ns, selector string) (*ReadyWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	rw := &ReadyWatch{trueAt: map[corev1.PodConditionType]map[string]time.Time{}, annotatedAt: map[string]time.Time{},
		readyNow: map[string]bool{}, cancel: cancel, done: make(chan struct{})}
	open := func(rv string) (watch.Interface, error) {
		return client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: rv})
	}
	w, err := open("")
	if err != nil {
		cancel()
		return nil, err
	}
	go func() {
		defer close(rw.done)
		rv := ""
		for {
			rv = rw.follow(ctx, w, rv)
			w.Stop()
			for {
				if ctx.Err() != nil {
					return
				}
				if w, err = open(rv); err == nil {
					break
				}
				rv = ""
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	return rw, nil
}

// follow records the events of w until it ends or ctx is done, and returns
// the resource version to watch from next ("" after an error event: the
// version is too old, start over).
func (rw *ReadyWatch) follow(ctx context.Context, w watch.Interface, rv string) string {
	for {
		var ev watch.Event
		var open bool
		select {
		case <-ctx.Done():
			return rv
		case ev, open = <-w.ResultChan():
			if !open {
				return rv
			}
		}
		p, ok := ev.Object.(*corev1.Pod)
		if !ok {
			rv = ""
			continue
		}
		rv = p.ResourceVersion
		now := time.Now()
		rw.mu.Lock()
		if ev.Type == watch.Deleted || p.DeletionTimestamp != nil {
			delete(rw.readyNow, p.Name)
			rw.mu.Unlock()
			continue
		}
		if _, seen := rw.annotatedAt[p.Name]; !seen && p.Annotations[contract.PodKey] != "" {
			rw.annotatedAt[p.Name] = now
		}
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				continue
			}
			if rw.trueAt[c.Type] == nil {
				rw.trueAt[c.Type] = map[string]time.Time{}
			}
			if _, seen := rw.trueAt[c.Type][p.Name]; !seen {
				rw.trueAt[c.Type][p.Name] = now
			}
		}
		rw.readyNow[p.Name] = podutils.IsPodReady(p)
		rw.mu.Unlock()
	}
}

// Stop ends the watch.
func (rw *ReadyWatch) Stop() {
	rw.cancel()
	<-rw.done
}

// Times returns when pod was first seen Ready and annotated (zero: not
// seen).
func (rw *ReadyWatch) Times(pod string) (ready, annotated time.Time) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return rw.trueAt[corev1.PodReady][pod], rw.annotatedAt[pod]
}

// TrueAt returns when pod was first seen with its condition cond True
// (zero: not seen).
func (rw *ReadyWatch) TrueAt(pod string, cond corev1.PodConditionType) time.Time {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return rw.trueAt[cond][pod]
}

// ReadyNames names, sorted, the Pods of pods whose Ready condition is True,
// terminating ones left out.
func ReadyNames(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		if p.DeletionTimestamp == nil && podutils.IsPodReady(&p) {
			out = append(out, p.Name)
		}
	}
	slices.Sort(out)
	return out
}

// ReadyNow names, sorted, the Pods the watch last saw Ready and not
// terminating: what a List would say, without the List's cost to the API
// server on every poll of a benchmark.
func (rw *ReadyWatch) ReadyNow() []string {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	var out []string
	for name, ready := range rw.readyNow {
		if ready {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// FirstAnswers sends requests to a URL from the bed's client namespace, a
// number of workers at a time, each on a new connection, and records when
// each Pod (named by the answer's body) first answered.
type FirstAnswers struct {
	mu       sync.Mutex
	first    map[string]time.Time
	ok, fail int
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// StartFirstAnswers starts the stream; it runs until Stop or maxDuration.
func StartFirstAnswers(ctx context.Context, b *Bed, url string, workers int, maxDuration time.Duration) *FirstAnswers {
	ctx, cancel := context.WithTimeout(ctx, maxDuration)
	fa := &FirstAnswers{first: map[string]time.Time{}, cancel: cancel}
	c := b.ClientHTTP(3 * time.Second)
	for range workers {
		fa.wg.Go(func() {
			for ctx.Err() == nil {
				body, err := Get(ctx, c, url)
				now := time.Now()
				if ctx.Err() != nil {
					return
				}
				fa.mu.Lock()
				if err != nil {
					fa.fail++
				} else {
					fa.ok++
					if name := strings.TrimSpace(body); fa.first[name].IsZero() {
						fa.first[name] = now
					}
				}
				fa.mu.Unlock()
			}
		})
	}
	return fa
}

// Stop ends the stream.
func (fa *FirstAnswers) Stop() {
	fa.cancel()
	fa.wg.Wait()
}

// First returns when pod first answered (zero: not yet).
func (fa *FirstAnswers) First(pod string) time.Time {
	fa.mu.Lock()
	defer fa.mu.Unlock()
	return fa.first[pod]
}

// Counts returns the requests answered and failed so far.
func (fa *FirstAnswers) Counts() (ok, failed int) {
	fa.mu.Lock()
	defer fa.mu.Unlock()
	return fa.ok, fa.fail
}

// ServersUp polls an edge's HAProxy every 10 ms (`show servers state`) and
// records when each server of a backend is first there and first up and
// enabled: the control path's share of the time to the first request,
// without the stream's sampling.
type ServersUp struct {
	mu      sync.Mutex
	first   map[string]time.Time
	present map[string]time.Time
	cancel  context.CancelFunc
	done    chan struct{}
}

// StartServersUp starts polling backend on e.
func StartServersUp(ctx context.Context, e *EdgeHost, backend string) *ServersUp {
	ctx, cancel := context.WithCancel(ctx)
	su := &ServersUp{first: map[string]time.Time{}, present: map[string]time.Time{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(su.done)
		for ctx.Err() == nil {
			sts, err := haproxy.ShowServersState(ctx, e.AdminSocket())
			now := time.Now()
			if err == nil {
				su.mu.Lock()
				for _, st := range sts {
					if st.Backend == backend && su.present[st.Name].IsZero() {
						su.present[st.Name] = now
					}
					if st.Backend == backend && st.Up && st.Enabled() && su.first[st.Name].IsZero() {
						su.first[st.Name] = now
					}
				}
				su.mu.Unlock()
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return su
}

// Stop ends the polling.
func (su *ServersUp) Stop() {
	su.cancel()
	<-su.done
}

// Times returns when server was first present and first up (zero: not
// seen).
func (su *ServersUp) Times(server string) (present, up time.Time) {
	su.mu.Lock()
	defer su.mu.Unlock()
	return su.present[server], su.first[server]
}

// PodTimeline is one Pod's way to its first request, from Ready: when it
// was seen annotated, its server added to HAProxy, up, and when the first
// request landed on it (negative: before Ready). With the readiness gate,
// ContainersReady and Registered are when its containers were seen ready
// and its npl.io/lb-registered condition True (negative or 0: before Ready
// or seen with it; 0 too when never seen).
type PodTimeline struct {
	Pod                         string
	Annotated, Added, Up, First time.Duration
	ContainersReady, Registered time.Duration
}

func (t PodTimeline) String() string {
	return fmt.Sprintf("%s: annotated %v, server added %v, up %v, first request %v after Ready", t.Pod,
		t.Annotated.Round(time.Millisecond), t.Added.Round(time.Millisecond), t.Up.Round(time.Millisecond), t.First.Round(time.Millisecond))
}

// Timeline puts together what rw, su and fa saw of pod, whose annotation
// names its one member; fa is nil for a run without a stream (First 0).
func Timeline(pod *corev1.Pod, rw *ReadyWatch, su *ServersUp, fa *FirstAnswers) (PodTimeline, error) {
	ready, annotated := rw.Times(pod.Name)
	if ready.IsZero() || annotated.IsZero() {
		return PodTimeline{}, fmt.Errorf("pod %s answered, but the watch never saw it Ready and annotated", pod.Name)
	}
	es, err := contract.Parse(pod.Annotations[contract.PodKey])
	if err != nil || len(es) != 1 {
		return PodTimeline{}, fmt.Errorf("pod %s: annotation %q", pod.Name, pod.Annotations[contract.PodKey])
	}
	present, up := su.Times(haproxy.ServerName(lbmodel.Member{IP: es[0].NodeIP, Port: int32(es[0].NodePort)}))
	if up.IsZero() {
		return PodTimeline{}, fmt.Errorf("pod %s answered but its server was never seen up", pod.Name)
	}
	since := func(cond corev1.PodConditionType) time.Duration {
		if at := rw.TrueAt(pod.Name, cond); !at.IsZero() {
			return min(at.Sub(ready), 0)
		}
		return 0
	}
	var first time.Duration
	if fa != nil {
		first = fa.First(pod.Name).Sub(ready)
	}
	return PodTimeline{Pod: pod.Name, Annotated: annotated.Sub(ready), Added: present.Sub(ready), Up: up.Sub(ready),
		First: first, ContainersReady: since(corev1.ContainersReady), Registered: since(contract.RegisteredReadinessGate)}, nil
}

// ReportReadyToVIP reports the percentiles of timelines as b's metrics and
// logs the five slowest: p50/p99 Ready → first request (what came before
// Ready counts as 0); served-p50/p99 Ready → the server up in HAProxy's
// runtime state (what the control path takes, without the stream's
// sampling); annotated-p50/p99 Ready → annotation (negative: before Ready);
// added-p50/p99 Ready → the server present; lbsync-p50/p99 (unless gate)
// from the later of Ready and the annotation until the server is present,
// npl-lbsync's and the edge's share; sampling-p50/p99 from the server up
// until the first request. With the gate: gate-hold-p50/p99 from the
// containers seen ready until Ready, what the gate adds to a Pod's start,
// split into gate-lbsync-p50/p99, from the later of the containers ready and
// the annotation until the gate's condition is seen True (npl-lbsync, the
// edge and npl-lbsync's patch), and gate-kubelet-p50/p99, from there until
// Ready (the kubelet sees the condition and writes Ready).
func ReportReadyToVIP(b *testing.B, timelines []PodTimeline, gate bool) {
	var lat, served, added, annotated, applied, sampled, held, gateLBSync, gateKubelet []time.Duration
	for _, t := range timelines {
		held, gateKubelet = append(held, -t.ContainersReady), append(gateKubelet, -t.Registered)
		gateLBSync = append(gateLBSync, t.Registered-max(t.ContainersReady, t.Annotated))
		lat, served, added = append(lat, max(t.First, 0)), append(served, max(t.Up, 0)), append(added, max(t.Added, 0))
		annotated = append(annotated, t.Annotated)
		// npl-lbsync may add the member once the Pod is annotated and
		// Ready.
		applied = append(applied, t.Added-max(t.Annotated, 0))
		sampled = append(sampled, t.First-t.Up)
	}
	slow := slices.Clone(timelines)
	slices.SortFunc(slow, func(a, b PodTimeline) int { return cmp.Compare(b.First, a.First) })
	for _, t := range slow[:min(5, len(slow))] {
		b.Logf("slow: %s", t)
	}
	// report reports the p50 and p99 of ds as <prefix>p50-ms and
	// <prefix>p99-ms.
	report := func(prefix string, ds []time.Duration) {
		slices.Sort(ds)
		b.ReportMetric(Percentile(ds, 50), prefix+"p50-ms")
		b.ReportMetric(Percentile(ds, 99), prefix+"p99-ms")
	}
	report("annotated-", annotated)
	if !gate {
		// With the gate the member is added before Ready, once the
		// containers are ready, which the watch does not time.
		report("lbsync-", applied)
	} else {
		report("gate-hold-", held)
		report("gate-lbsync-", gateLBSync)
		report("gate-kubelet-", gateKubelet)
	}
	report("sampling-", sampled)
	report("added-", added)
	report("served-", served)
	b.ReportMetric(float64(len(lat)), "pods")
	report("", lat)
}

// ReportControlPath reports the control path on its own, from the
// timelines of a run without a stream (and without the readiness gate):
// served-p50/p99-ms, Pod Ready → its server up and enabled in HAProxy's
// runtime state, and the parts it is made of, each as <part>-p50/p99-ms and
// <part>-share-% (the part's sum over every Pod against the sum of the
// served times): agent-, Ready → npl-agent's annotation (0 when it came
// first, as real kubelets report a Pod's IP before its probe passes);
// lbsync-, from the later of the two → the server present (npl-lbsync's
// sync and Ensure, npl-edge's runtime commands); health-, present → up
// (HAProxy's health check, when a server starts down). It logs the five
// slowest Pods.
func ReportControlPath(b *testing.B, timelines []PodTimeline) {
	var served, agent, lbsync, health []time.Duration
	var sums [4]time.Duration
	for _, t := range timelines {
		up, a, l, h := controlPath(t)
		served, agent, lbsync, health = append(served, up), append(agent, a), append(lbsync, l), append(health, h)
		for i, d := range []time.Duration{up, a, l, h} {
			sums[i] += d
		}
	}
	slow := slices.Clone(timelines)
	slices.SortFunc(slow, func(a, b PodTimeline) int { return cmp.Compare(b.Up, a.Up) })
	for _, t := range slow[:min(5, len(slow))] {
		b.Logf("slow: %s", t)
	}
	for i, part := range []struct {
		prefix string
		ds     []time.Duration
	}{{"served-", served}, {"agent-", agent}, {"lbsync-", lbsync}, {"health-", health}} {
		slices.Sort(part.ds)
		b.ReportMetric(Percentile(part.ds, 50), part.prefix+"p50-ms")
		b.ReportMetric(Percentile(part.ds, 99), part.prefix+"p99-ms")
		if i > 0 && sums[0] > 0 {
			b.ReportMetric(100*float64(sums[i])/float64(sums[0]), part.prefix+"share-%")
		}
	}
	b.ReportMetric(float64(len(served)), "pods")
}

// controlPath splits t's time from Ready until its server is up into the
// parts ReportControlPath names: agent, lbsync and health, which sum to
// served; a part that came before Ready counts 0.
func controlPath(t PodTimeline) (served, agent, lbsync, health time.Duration) {
	served = max(t.Up, 0)
	agent = min(max(t.Annotated, 0), served)
	lbsync = min(max(t.Added-agent, 0), served-agent)
	return served, agent, lbsync, served - agent - lbsync
}
