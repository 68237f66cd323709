package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// EchoBasicImage is the image (any tag) of the backend of the Gateway API
// conformance suite. The kubelet stand-in runs no images; for a container
// of this one it runs BinDir/echo-basic (built by `make tools` from the
// conformance module go.mod pins) inside the Pod's network namespace.
const EchoBasicImage = "registry.k8s.io/gateway-api/echo-basic"

// CoreDNSImage is the image (any tag) of the DNS backend of the suite's
// UDPRoute tests. The kubelet stand-in serves a container of it with a DNS
// server of its own (dnsserver.go) on port 53, UDP and TCP, in the Pod's
// network namespace; the Corefile it is given is not read.
const CoreDNSImage = "registry.k8s.io/coredns/coredns"

// echoBasicBinary is the file name of echo-basic in BinDir.
const echoBasicBinary = "echo-basic"

// processReadyTimeout bounds how long a started process may take to listen.
const processReadyTimeout = 15 * time.Second

// ErrNoEchoBasic is the error of CheckEchoBasic, and of a Pod of
// EchoBasicImage the kubelet stand-in cannot start without the binary.
var ErrNoEchoBasic = errors.New("run 'make tools'")

// CheckEchoBasic returns an error, one line saying how to get it, when
// binDir lacks the echo-basic binary.
func CheckEchoBasic(binDir string) error {
	p := filepath.Join(binDir, echoBasicBinary)
	if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("npl test cluster: %s not found (Pods of %s need it): %w", p, EchoBasicImage, ErrNoEchoBasic)
	}
	return nil
}

// runsAsProcess reports whether the kubelet stand-in runs c as a process
// rather than with its built-in servers.
func runsAsProcess(c corev1.Container) bool { return imageName(c.Image) == EchoBasicImage }

// servesItsOwnPorts reports whether c's ports are served by what the
// kubelet stand-in runs for its image (echo-basic, or the DNS server of
// CoreDNSImage) rather than by the built-in servers of declared ports.
func servesItsOwnPorts(c corev1.Container) bool {
	return runsAsProcess(c) || imageName(c.Image) == CoreDNSImage
}

// imageName is an image reference without its tag or digest.
func imageName(image string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	return image
}

// runningContainers are the containers that keep running: the sidecar init
// containers, then the containers.
func runningContainers(pod *corev1.Pod) []corev1.Container {
	var out []corev1.Container
	for _, c := range pod.Spec.InitContainers {
		if isSidecar(c) {
			out = append(out, c)
		}
	}
	return append(out, pod.Spec.Containers...)
}

// sandbox is where a Pod's processes run: its network namespace and
// addresses, and a directory of its own for volumes.
type sandbox struct {
	netns  string
	dir    string
	podIP  netip.Addr
	hostIP netip.Addr
}

// startPodProcesses starts, inside the sandbox's network namespace, the
// containers that run as processes (runsAsProcess), with their environment
// resolved as a kubelet would and their volumes written under sb.dir, and
// returns once each listens on its ports (readyProbes). Closing the returned closers kills
// them and removes sb.dir. Their output goes to logDir.
func startPodProcesses(ctx context.Context, client kubernetes.Interface, binDir, logDir string, pod *corev1.Pod, sb sandbox) ([]io.Closer, error) {
	var containers []corev1.Container
	for _, c := range runningContainers(pod) {
		if runsAsProcess(c) {
			containers = append(containers, c)
		}
	}
	if len(containers) == 0 {
		return nil, nil
	}
	if err := CheckEchoBasic(binDir); err != nil {
		return nil, err
	}
	closers := []io.Closer{removeDir(sb.dir)}
	fail := func(err error) ([]io.Closer, error) {
		for i := len(closers) - 1; i >= 0; i-- {
			_ = closers[i].Close()
		}
		return nil, err
	}
	volumes, err := writeVolumes(ctx, client, pod, filepath.Join(sb.dir, "volumes"))
	if err != nil {
		return fail(err)
	}
	for _, c := range containers {
		env, err := containerEnv(ctx, client, pod, c, sb)
		if err != nil {
			return fail(fmt.Errorf("container %s: %w", c.Name, err))
		}
		env = rewriteMountPaths(env, c.VolumeMounts, volumes)
		p, err := startPodProcess(filepath.Join(binDir, echoBasicBinary), sb.netns, env,
			filepath.Join(logDir, fmt.Sprintf("pod-%s_%s_%s.log", pod.Namespace, pod.Name, c.Name)))
		if err != nil {
			return fail(fmt.Errorf("container %s: %w", c.Name, err))
		}
		closers = append(closers, p)
		for _, pr := range readyProbes(env) {
			if err := p.waitListening(ctx, pr.network, netip.AddrPortFrom(sb.podIP, pr.port)); err != nil {
				return fail(fmt.Errorf("container %s: %w", c.Name, err))
			}
		}
	}
	return closers, nil
}

// probe is an address echo-basic listens on: a TCP port that accepts
// connections, or a UDP port that answers a datagram.
type probe struct {
	network string
	port    uint16
}

// readyProbes are the ports echo-basic listens on in the mode its env
// selects, as echo-basic reads it (GRPC_ECHO_SERVER before TCP_ECHO_SERVER
// before UDP_ECHO_SERVER): gRPC on HTTP_PORT (3000) and, with a
// certificate (TLS_SERVER_CERT, TLS_SERVER_PRIV_KEY), HTTPS_PORT (8443);
// the TCP echo on TCP_PORT (3000) and, with a certificate, TLS_PORT
// (8443); the UDP echo on UDP_PORT (8080); else HTTP on HTTP_PORT (3000),
// h2c on H2C_PORT (3001) and, with a certificate (TLS_SERVER_CERT,
// TLS_SERVER_PRIVKEY), HTTPS on HTTPS_PORT (8443).
func readyProbes(env []corev1.EnvVar) []probe {
	port := func(name string, def uint16) uint16 {
		if p, err := strconv.ParseUint(lookupEnv(env, name), 10, 16); err == nil && p > 0 {
			return uint16(p)
		}
		return def
	}
	tcp := func(name string, def uint16) probe { return probe{"tcp", port(name, def)} }
	withCert := func(key string) bool { return lookupEnv(env, "TLS_SERVER_CERT") != "" && lookupEnv(env, key) != "" }
	var out []probe
	switch {
	case lookupEnv(env, "GRPC_ECHO_SERVER") != "":
		out = append(out, tcp("HTTP_PORT", 3000))
		if withCert("TLS_SERVER_PRIV_KEY") {
			out = append(out, tcp("HTTPS_PORT", 8443))
		}
	case lookupEnv(env, "TCP_ECHO_SERVER") != "":
		out = append(out, tcp("TCP_PORT", 3000))
		if withCert("TLS_SERVER_PRIV_KEY") {
			out = append(out, tcp("TLS_PORT", 8443))
		}
	case lookupEnv(env, "UDP_ECHO_SERVER") != "":
		out = append(out, probe{"udp", port("UDP_PORT", 8080)})
	default:
		out = append(out, tcp("HTTP_PORT", 3000), tcp("H2C_PORT", 3001))
		if withCert("TLS_SERVER_PRIVKEY") {
			out = append(out, tcp("HTTPS_PORT", 8443))
		}
	}
	return out
}

func lookupEnv(env []corev1.EnvVar, name string) string {
	v := ""
	for _, e := range env {
		if e.Name == name {
			v = e.Value // the last one wins, as in a container
		}
	}
	return v
}

// podProcess is a container run as a process; Close kills it.
type podProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // the exit, once done is closed
	log  *os.File
}

func startPodProcess(bin, netns string, env []corev1.EnvVar, logPath string) (*podProcess, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	// ip netns exec also gives the process the namespace's /sys. The
	// environment is the container's only, as in a container.
	cmd := exec.Command("ip", "netns", "exec", netns, bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, e := range env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &podProcess{cmd: cmd, done: make(chan struct{}), log: log}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// waitListening waits until addr accepts connections (network tcp) or
// answers a datagram (udp), failing early when the process exits.
func (p *podProcess) waitListening(ctx context.Context, network string, addr netip.AddrPort) error {
	ctx, cancel := context.WithTimeout(ctx, processReadyTimeout)
	defer cancel()
	for {
		if probeOnce(ctx, network, addr) == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it listened on %s %s: %v (see %s)", filepath.Base(p.cmd.Args[len(p.cmd.Args)-1]), network, addr, p.err, p.log.Name())
		case <-ctx.Done():
			return fmt.Errorf("nothing listens on %s %s after %s (see %s)", network, addr, processReadyTimeout, p.log.Name())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// probeOnce connects to addr (tcp), or sends it a datagram and reads an
// answer within 200ms (udp).
func probeOnce(ctx context.Context, network string, addr netip.AddrPort) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr.String())
	if err != nil || network != "udp" {
		if conn != nil {
			conn.Close()
		}
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
		return err
	}
	if _, err := conn.Write([]byte("npl-ready")); err != nil {
		return err
	}
	_, err = conn.Read(make([]byte, 2048))
	return err
}

// Close kills the process and waits for it.
func (p *podProcess) Close() error {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return p.log.Close()
}

type removeDir string

func (d removeDir) Close() error { return os.RemoveAll(string(d)) }

// varRef is a $(NAME) reference in an env value; $$ escapes a $.
var varRef = regexp.MustCompile(`\$\$|\$\([A-Za-z_][A-Za-z0-9_.-]*\)`)

// containerEnv resolves a container's environment as a kubelet does: envFrom
// first, then env in order; values expand $(NAME) of variables defined
// before; fieldRef, secretKeyRef and configMapKeyRef are read.
func containerEnv(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, c corev1.Container, sb sandbox) ([]corev1.EnvVar, error) {
	var env []corev1.EnvVar
	defined := map[string]string{}
	set := func(name, value string) {
		defined[name] = value
		env = append(env, corev1.EnvVar{Name: name, Value: value})
	}
	for _, from := range c.EnvFrom {
		data, err := envFromData(ctx, client, pod.Namespace, from)
		if err != nil {
			return nil, err
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			set(from.Prefix+k, data[k])
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expandVars(e.Value, defined))
			continue
		}
		v, err := envValueFrom(ctx, client, pod, *e.ValueFrom, sb)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		set(e.Name, v)
	}
	return env, nil
}

// expandVars replaces $(NAME) by the value of a defined variable; unknown
// references stay as written, and $$ becomes $.
func expandVars(s string, defined map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(ref string) string {
		if ref == "$$" {
			return "$"
		}
		if v, ok := defined[ref[2:len(ref)-1]]; ok {
			return v
		}
		return ref
	})
}

func envValueFrom(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, from corev1.EnvVarSource, sb sandbox) (string, error) {
	switch {
	case from.FieldRef != nil:
		return podField(pod, from.FieldRef.FieldPath, sb)
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		s, err := client.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return "", optionalMissing(err, ref.Optional, "secret "+ref.Name)
		}
		if v, ok := s.Data[ref.Key]; ok {
			return string(v), nil
		}
		return "", optionalMissing(nil, ref.Optional, fmt.Sprintf("key %s of secret %s", ref.Key, ref.Name))
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		cm, err := client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return "", optionalMissing(err, ref.Optional, "configmap "+ref.Name)
		}
		if v, ok := cm.Data[ref.Key]; ok {
			return v, nil
		}
		return "", optionalMissing(nil, ref.Optional, fmt.Sprintf("key %s of configmap %s", ref.Key, ref.Name))
	}
	return "", errors.New("only fieldRef, secretKeyRef and configMapKeyRef are supported by the kubelet stand-in")
}

// optionalMissing is nil for a missing optional source, else the error.
func optionalMissing(err error, optional *bool, what string) error {
	notFound := err == nil || apierrors.IsNotFound(err)
	if notFound && optional != nil && *optional {
		return nil
	}
	if err == nil {
		return fmt.Errorf("%s not found", what)
	}
	return fmt.Errorf("read %s: %w", what, err)
}

func envFromData(ctx context.Context, client kubernetes.Interface, ns string, from corev1.EnvFromSource) (map[string]string, error) {
	switch {
	case from.SecretRef != nil:
		s, err := client.CoreV1().Secrets(ns).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
		if err != nil {
			return nil, optionalMissing(err, from.SecretRef.Optional, "secret "+from.SecretRef.Name)
		}
		out := map[string]string{}
		for k, v := range s.Data {
			out[k] = string(v)
		}
		return out, nil
	case from.ConfigMapRef != nil:
		cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
		if err != nil {
			return nil, optionalMissing(err, from.ConfigMapRef.Optional, "configmap "+from.ConfigMapRef.Name)
		}
		return cm.Data, nil
	}
	return nil, nil
}

// fieldKey matches metadata.labels['key'] and metadata.annotations['key'].
var fieldKey = regexp.MustCompile(`^metadata\.(labels|annotations)\['(.+)'\]$`)

// podField is the value of a downward API field path.
func podField(pod *corev1.Pod, path string, sb sandbox) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs":
		return sb.podIP.String(), nil
	case "status.hostIP", "status.hostIPs":
		return sb.hostIP.String(), nil
	}
	if m := fieldKey.FindStringSubmatch(path); m != nil {
		if m[1] == "labels" {
			return pod.Labels[m[2]], nil
		}
		return pod.Annotations[m[2]], nil
	}
	return "", fmt.Errorf("field path %q is not supported by the kubelet stand-in", path)
}

// writeVolumes writes the Pod's secret and configMap volumes (and creates
// its emptyDirs) under dir, one directory per volume, and returns the
// directories by volume name.
func writeVolumes(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, dir string) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		vdir := filepath.Join(dir, v.Name)
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return nil, fmt.Errorf("volume %s: %w", v.Name, err)
		}
		out[v.Name] = vdir
		var data map[string][]byte
		var items []corev1.KeyToPath
		switch {
		case v.EmptyDir != nil:
			continue
		case v.Secret != nil:
			s, err := client.CoreV1().Secrets(pod.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				if err := optionalMissing(err, v.Secret.Optional, "secret "+v.Secret.SecretName); err != nil {
					return nil, fmt.Errorf("volume %s: %w", v.Name, err)
				}
				continue
			}
			data, items = s.Data, v.Secret.Items
		case v.ConfigMap != nil:
			cm, err := client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				if err := optionalMissing(err, v.ConfigMap.Optional, "configmap "+v.ConfigMap.Name); err != nil {
					return nil, fmt.Errorf("volume %s: %w", v.Name, err)
				}
				continue
			}
			data = map[string][]byte{}
			for k, s := range cm.Data {
				data[k] = []byte(s)
			}
			for k, b := range cm.BinaryData {
				data[k] = b
			}
			items = v.ConfigMap.Items
		default:
			// Projected, hostPath, ...: nothing the suite's backends mount.
			continue
		}
		if len(items) == 0 {
			for k := range data {
				items = append(items, corev1.KeyToPath{Key: k, Path: k})
			}
		}
		for _, it := range items {
			b, ok := data[it.Key]
			if !ok {
				return nil, fmt.Errorf("volume %s: no key %s", v.Name, it.Key)
			}
			p := filepath.Join(vdir, filepath.Clean("/"+it.Path))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			if err := os.WriteFile(p, b, 0o600); err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
		}
	}
	return out, nil
}

// rewriteMountPaths replaces, in env values, a volume mount's path (and
// paths under it) by the directory that holds the volume's files: the
// processes share the machine's file system, where mount paths such as
// /etc/secret-volume do not exist.
func rewriteMountPaths(env []corev1.EnvVar, mounts []corev1.VolumeMount, volumes map[string]string) []corev1.EnvVar {
	mounts = append([]corev1.VolumeMount(nil), mounts...)
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].MountPath) > len(mounts[j].MountPath) })
	out := make([]corev1.EnvVar, len(env))
	for i, e := range env {
		out[i] = e
		for _, m := range mounts {
			dir, ok := volumes[m.Name]
			if !ok {
				continue
			}
			mp := strings.TrimSuffix(m.MountPath, "/")
			if e.Value == mp || strings.HasPrefix(e.Value, mp+"/") {
				out[i].Value = filepath.Join(dir, m.SubPath) + strings.TrimPrefix(e.Value, mp)
				break
			}
		}
	}
	return out
}
