package bench

import (
	"context"
	"testing"
	"time"

	"github.com/nodeportlocal/npl/test/harness/stack"
)

const (
	// changesPerOp annotation changes at changeRate per second make one
	// iteration of BenchmarkLBSyncConvergence: 3 iterations (make bench)
	// are 600 changes over 30 s.
	changesPerOp = 200
	changeRate   = 20
	// providerChanges membership changes at providerChangeRate per second
	// follow each cold sync of BenchmarkLBSyncProvider.
	providerChanges    = 50
	providerChangeRate = 10
)

// coldStart starts an npl-lbsync (mock provider) for set and returns how long
// it took to apply the last pool to the mock (from the write times in its
// log), and to answer /readyz (the first sync of every Service done, status
// included). The caller stops it.
func (f *lbFixture) coldStart(ctx context.Context, set *serviceSet) (l *stack.LBSync, pools, ready time.Duration, err error) {
	start := time.Now()
	l, err = f.startSyncer(ctx, set, mockProvider, "")
	if err != nil {
		return nil, 0, 0, err
	}
	readyAt, err := waitSynced(l, 10*time.Minute)
	if err != nil {
		return l, 0, 0, err
	}
	// Every Service is synced once: the mock holds every pool already,
	// unless a sync failed and waits for its retry.
	if _, err := waitPools(l, set, time.Minute); err != nil {
		return l, 0, 0, err
	}
	log := &writeLog{path: l.LogPath, writes: map[string][]time.Time{}}
	if err := log.read(); err != nil {
		return l, 0, 0, err
	}
	return l, log.last().Sub(start), readyAt.Sub(start), nil
}

// BenchmarkLBSyncFirstStart starts npl-lbsync (mock provider) on the 1000
// Services × 10 Pods as no npl-lbsync has seen them yet, every Pod Ready and
// annotated, and measures the time to the last pool applied (pools-s), to
// /readyz (ready-s), and the writes to the Services from the start to
// /readyz (writes/service, from a watch: 1 when the claim rides with the
// status write). The run is bound by npl-lbsync's API client rate
// (--kube-api-qps, 100/s by default). Before each iteration, untimed, the
// previous npl-lbsync stops and every claim is removed. Target: pools-s <
// 15, writes/service 1.
func BenchmarkLBSyncFirstStart(b *testing.B) { benchStart(b, true) }

// BenchmarkLBSyncColdStart starts npl-lbsync (mock provider, empty) on the
// 1000 Services × 10 Pods already claimed, as after a restart or a failover
// to a new leader: caches filled from nothing, every load balancer applied
// to an empty mock, no write to the cluster. It measures the time to the
// last pool applied (pools-s) and to /readyz (ready-s). Target: pools-s < 15.
func BenchmarkLBSyncColdStart(b *testing.B) { benchStart(b, false) }

// restart stops f's npl-lbsync and starts it again on f.main, timed (the
// timer runs during the start only); with unclaimed, it first finds every
// Service unclaimed again. It returns the new npl-lbsync (kept running for
// the benchmarks after this one), the times to its last pool and to ready,
// and its writes to the Services until ready.
func (f *lbFixture) restart(ctx context.Context, b *testing.B, unclaimed bool) (l *stack.LBSync, pools, ready time.Duration, writes int) {
	if err := f.stopSyncer(); err != nil {
		b.Fatal(err)
	}
	if unclaimed {
		if err := f.main.resetClaims(ctx, f.e.client); err != nil {
			b.Fatal(err)
		}
	}
	count, err := f.main.countWrites(ctx, f.e.client)
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	l, pools, ready, err = f.coldStart(ctx, f.main)
	b.StopTimer()
	f.syncer = l
	if err != nil {
		b.Fatal(err)
	}
	return l, pools, ready, count()
}

// benchStart measures npl-lbsync starts on the main fixture; with
// unclaimed, each start first finds every Service unclaimed again.
func benchStart(b *testing.B, unclaimed bool) {
	f := lbEnv(b)
	ctx := context.Background()
	var pools, ready []time.Duration
	writes := 0
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		_, p, r, w := f.restart(ctx, b, unclaimed)
		pools, ready, writes = append(pools, p), append(ready, r), writes+w
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(median(pools).Seconds(), "pools-s")
	b.ReportMetric(median(ready).Seconds(), "ready-s")
	b.ReportMetric(float64(writes)/float64(b.N*f.main.services), "writes/service")
	b.ReportMetric(float64(f.main.services), "services")
	b.ReportMetric(float64(f.main.pods()), "pods")
}

// BenchmarkLBSyncConvergence measures the latency from a Pod annotation
// write (a member's new node port) to the mock provider call that applies
// it (from npl-lbsync's -v=2 log), at 20 changes per second, 200 per
// iteration, each on another load balancer, while npl-lbsync holds the 1000
// pools; and the provider writes per change (writes/change, target 1).
// Resyncs (every 20 s) run meanwhile, as they would. Target: p99 < 250 ms.
func BenchmarkLBSyncConvergence(b *testing.B) {
	f := lbEnv(b)
	l, log, before := f.watchWrites(b)
	ctx := context.Background()
	latencies, all := measureBatches(b, log, func() ([]change, error) {
		return f.main.changeBatch(ctx, f.e.client, changesPerOp, changeRate)
	})
	time.Sleep(time.Second) // a second write for one change would come now
	after, err := l.MockState()
	if err != nil {
		b.Fatal(err)
	}
	if err := f.main.checkMock(after, all); err != nil {
		b.Fatal(err)
	}
	reportLatency(b, "converge", latencies)
	b.ReportMetric(float64(after.Counters.Writes-before.Counters.Writes)/float64(len(all)), "writes/change")
	b.ReportMetric(float64(len(all)), "changes")
}

// BenchmarkLBSyncResync waits, with no change in the cluster, for one
// resync pass (resyncPeriod 20s), which calls the provider for each of the
// 1000 Services, and reports the provider writes it caused (writes/resync,
// target 0) and how long the pass took (pass-ms, from the first provider
// call seen to the last).
func BenchmarkLBSyncResync(b *testing.B) {
	f := lbEnv(b)
	l := f.ensureSyncer(b)
	ensures := func() (float64, error) {
		return l.Metric("npl_lbsync_provider_calls_total", `verb="ensure"`)
	}
	var writes int64
	var passes []time.Duration
	b.ResetTimer()
	for range b.N {
		st, err := l.MockState()
		if err != nil {
			b.Fatal(err)
		}
		e0, err := ensures()
		if err != nil {
			b.Fatal(err)
		}
		var began, ended time.Time
		if err := pollUntil(lbResync+time.Minute, 20*time.Millisecond, "a resync pass", func() (bool, error) {
			e, err := ensures()
			if err != nil {
				return false, err
			}
			if e > e0 && began.IsZero() {
				began = time.Now()
			}
			ended = time.Now()
			return e >= e0+float64(f.main.services), nil
		}); err != nil {
			b.Fatal(err)
		}
		passes = append(passes, ended.Sub(began))
		after, err := l.MockState()
		if err != nil {
			b.Fatal(err)
		}
		writes += after.Counters.Writes - st.Counters.Writes
	}
	b.StopTimer()
	b.ReportMetric(float64(writes)/float64(b.N), "writes/resync")
	b.ReportMetric(ms(median(passes)), "pass-ms")
	b.ReportMetric(float64(f.main.services), "services")
}

// BenchmarkLBSyncHeap reports the heap npl-lbsync uses per cached Pod once
// it holds the 1000 pools: go_memstats_heap_inuse_bytes minus that of a
// synced npl-lbsync with no Pod, over the Pods (B/pod; the share of the
// Services and of the in-process mock's state is counted in). The in-use
// heap also holds the garbage not yet collected, up to the size of the live
// heap with the default GOGC=100, so B/pod-gogc10 is the same measured with
// GOGC=10, closer to the live heap. Target: < 4 KiB. With
// $NPL_BENCH_HEAP_PROFILE=<file>, it saves npl-lbsync's heap profile (after
// the measure) to that file.
func BenchmarkLBSyncHeap(b *testing.B) {
	f := lbEnv(b)
	pods := float64(f.main.pods())
	if f.heapGC10 == 0 {
		_ = f.stopSyncer()
		l, err := f.startSyncer(context.Background(), f.main, mockProvider, "10")
		if err == nil {
			if _, err = waitSynced(l, 5*time.Minute); err == nil {
				f.heapGC10, err = heapInUse(l)
			}
			_ = l.Stop()
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	l := f.ensureSyncer(b)
	var heap, rss float64
	b.ResetTimer()
	for range b.N {
		h, err := heapInUse(l)
		if err != nil {
			b.Fatal(err)
		}
		r, err := l.Metric("process_resident_memory_bytes")
		if err != nil {
			b.Fatal(err)
		}
		heap, rss = h, max(rss, r)
	}
	b.StopTimer()
	if err := saveHeapProfile(l); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric((heap-f.baseline)/pods, "B/pod")
	b.ReportMetric((f.heapGC10-f.baselineGC10)/pods, "B/pod-gogc10")
	b.ReportMetric(heap/mib, "MiB-heap")
	b.ReportMetric(rss/mib, "MiB-rss")
	b.ReportMetric(pods, "pods")
}

// BenchmarkLBSyncProvider runs npl-lbsync end to end with the Avi and the
// BIG-IP simulators behind the real client libraries: the cold sync of the
// 1000 Services into an empty load balancer (sync-s: process start to the
// first sync done; writes/LB: the simulator's write requests), then 50
// membership changes at 10 per second (writes/change). The Services are
// already claimed with their requested VIPs, so npl-lbsync writes nothing
// to the cluster and the provider is what is measured.
func BenchmarkLBSyncProvider(b *testing.B) {
	for _, name := range []string{"avi", "bigip"} {
		b.Run(name, func(b *testing.B) {
			f := lbEnv(b)
			if err := f.stopSyncer(); err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var syncs []time.Duration
			var coldWrites, changeWrites, failures float64
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				backend, err := stack.StartBackend(name, b.TempDir(), f.main.vips)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				l, err := f.startSyncer(ctx, f.main, backend.ProviderConfig(), "")
				if err != nil {
					backend.Close()
					b.Fatal(err)
				}
				at, err := waitSynced(l, 10*time.Minute)
				b.StopTimer()
				if err == nil {
					syncs = append(syncs, at.Sub(start))
					coldWrites += float64(backend.Writes())
					var w, fails float64
					w, fails, err = f.providerChanges(ctx, l, backend)
					changeWrites += w
					failures += fails
				}
				_ = l.Stop()
				backend.Close()
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			b.ReportMetric(median(syncs).Seconds(), "sync-s")
			b.ReportMetric(coldWrites/float64(b.N*f.main.services), "writes/LB")
			b.ReportMetric(changeWrites/float64(b.N*providerChanges), "writes/change")
			b.ReportMetric(failures/float64(b.N), "sync-failures")
			b.ReportMetric(float64(f.main.services), "services")
		})
	}
}

// providerChanges checks a few pools after the cold sync, makes
// providerChanges membership changes, waits until the load balancer holds
// them, and returns the writes they caused and the failed syncs of the run.
func (f *lbFixture) providerChanges(ctx context.Context, l *stack.LBSync, backend stack.Backend) (writes, failures float64, err error) {
	set := f.main
	for _, i := range []int{0, set.services / 2, set.services - 1} {
		if err := set.checkBackend(backend, i); err != nil {
			return 0, 0, err
		}
	}
	w0 := backend.Writes()
	changes, err := set.changeBatch(ctx, f.e.client, providerChanges, providerChangeRate)
	if err != nil {
		return 0, 0, err
	}
	if err := pollUntil(time.Minute, 100*time.Millisecond, "the changes on "+backend.Name(), func() (bool, error) {
		for _, c := range changes {
			if err := set.checkBackend(backend, c.svc); err != nil {
				return false, err
			}
		}
		return true, nil
	}); err != nil {
		return 0, 0, err
	}
	time.Sleep(time.Second) // a second write for one change would come now
	failures, err = l.Metric("npl_lbsync_sync_failures_total")
	if err != nil {
		return 0, 0, err
	}
	return float64(backend.Writes() - w0), failures, nil
}
