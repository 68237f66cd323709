{{/*
Names. fullname is at most 42 characters, so that the longest suffixes
("-agent-cleanup-wait", "-lbsync-webhook-tls") still give valid object names.
*/}}
{{- define "npl.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 42 | trimSuffix "-" }}
{{- end }}

{{- define "npl.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 42 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 42 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 42 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "npl.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Standard labels; call with (dict "ctx" $ "component" "agent"). */}}
{{- define "npl.labels" -}}
helm.sh/chart: {{ include "npl.chart" .ctx }}
{{ include "npl.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: npl
{{- end }}

{{- define "npl.selectorLabels" -}}
app.kubernetes.io/name: {{ include "npl.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Object names of each component. */}}
{{- define "npl.agent.fullname" -}}{{ include "npl.fullname" . }}-agent{{- end }}
{{- define "npl.agentCleanup.fullname" -}}{{ include "npl.fullname" . }}-agent-cleanup{{- end }}
{{- define "npl.lbsync.fullname" -}}{{ include "npl.fullname" . }}-lbsync{{- end }}
{{- define "npl.uninstall.fullname" -}}{{ include "npl.fullname" . }}-uninstall{{- end }}
{{- define "npl.lbsync.configName" -}}{{ include "npl.fullname" . }}-lbsync-config{{- end }}
{{- define "npl.lbsync.leaseName" -}}{{ include "npl.fullname" . }}-lbsync{{- end }}
{{- define "npl.webhook.fullname" -}}{{ include "npl.fullname" . }}-lbsync-webhook{{- end }}

{{/* The Secret of the webhook's serving certificate. */}}
{{- define "npl.webhook.secretName" -}}
{{- default (printf "%s-tls" (include "npl.webhook.fullname" .)) .Values.lbsync.webhook.certSecret }}
{{- end }}

{{- define "npl.agent.serviceAccountName" -}}
{{- default (include "npl.agent.fullname" .) .Values.serviceAccount.agentName }}
{{- end }}

{{- define "npl.lbsync.serviceAccountName" -}}
{{- default (include "npl.lbsync.fullname" .) .Values.serviceAccount.lbsyncName }}
{{- end }}

{{/* Image reference; call with (dict "ctx" $ "image" .Values.agent.image). */}}
{{- define "npl.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) }}
{{- end }}

{{/* clusterName, required by the schema and here. */}}
{{- define "npl.clusterName" -}}
{{- required "clusterName is required: it prefixes every load balancer object and marks the objects npl-lbsync owns" .Values.clusterName }}
{{- end }}

{{/* Whether the chosen provider takes credentials (mock does not). */}}
{{- define "npl.provider.hasCredentials" -}}
{{- if has .Values.provider.name (list "avi" "bigip") }}true{{ end }}
{{- end }}

{{/* Whether the chosen provider presents a client certificate (haproxy). */}}
{{- define "npl.provider.hasClientCert" -}}
{{- if eq .Values.provider.name "haproxy" }}true{{ end }}
{{- end }}

{{/* Name of the Secret holding the provider credentials. */}}
{{- define "npl.credentialsSecretName" -}}
{{- $p := index .Values.provider .Values.provider.name }}
{{- default (printf "%s-%s-credentials" (include "npl.fullname" .) .Values.provider.name) (get $p "existingSecret") }}
{{- end }}

{{/*
Whether the load balancer's certificate is verified: Avi always speaks
https, BIG-IP when its url does.
*/}}
{{- define "npl.provider.verifiesTLS" -}}
{{- $p := index .Values.provider .Values.provider.name }}
{{- if and (include "npl.provider.hasCredentials" .) (not (get $p "insecureSkipVerify")) }}
{{- if or (eq .Values.provider.name "avi") (hasPrefix "https://" (get $p "url")) }}true{{ end }}
{{- end }}
{{- end }}

{{/*
Where the provider's CA file comes from: "configmap" (caData), "secret"
(ca.crt of existingSecret, required when TLS is verified and caData is not
set) or "" (no CA file).
*/}}
{{- define "npl.caSource" -}}
{{- $p := index .Values.provider .Values.provider.name }}
{{- if include "npl.provider.hasCredentials" . }}
{{- if get $p "caData" }}configmap
{{- else if and (get $p "existingSecret") (include "npl.provider.verifiesTLS" .) }}secret
{{- end }}
{{- else if include "npl.provider.hasClientCert" . }}
{{- if get $p "caData" }}configmap
{{- else if get $p "existingSecret" }}secret
{{- end }}
{{- end }}
{{- end }}

{{/* Directory the provider's files are mounted in. */}}
{{- define "npl.providerDir" -}}/etc/npl/{{ .Values.provider.name }}{{- end }}

{{/*
The npl-lbsync configuration file. It names the mounted credential files,
never their content. Values are checked here so that a mistake fails the
install with a message rather than crash-looping npl-lbsync.
*/}}
{{- define "npl.lbsyncConfig" -}}
{{- $v := .Values }}
{{- $name := $v.provider.name }}
{{- $p := index $v.provider $name }}
{{- $dir := include "npl.providerDir" . }}
{{- $section := dict }}
{{- if eq $name "avi" }}
{{- $_ := set $section "controller" (required "provider.avi.controller is required" $p.controller) }}
{{- $_ := set $section "vipNetwork" (required "provider.avi.vipNetwork is required" $p.vipNetwork) }}
{{- range $k := list "tenant" "cloud" "serviceEngineGroup" "version" "timeout" }}
{{- if index $p $k }}{{ $_ := set $section $k (index $p $k) }}{{ end }}
{{- end }}
{{- else if eq $name "bigip" }}
{{- $_ := set $section "url" (required "provider.bigip.url is required" $p.url) }}
{{- if and (hasPrefix "http://" $p.url) (not $p.insecure) }}{{ fail "provider.bigip.url: an http:// URL sends the BIG-IP login in clear: use https, or set provider.bigip.insecure (a test BIG-IP only)" }}{{ end }}
{{- if $p.insecure }}{{ $_ := set $section "insecure" true }}{{ end }}
{{- $_ := set $section "createPartition" $p.createPartition }}
{{- $_ := set $section "tokenAuth" $p.tokenAuth }}
{{- range $k := list "partition" "timeout" }}
{{- if index $p $k }}{{ $_ := set $section $k (index $p $k) }}{{ end }}
{{- end }}
{{- end }}
{{- if eq $name "haproxy" }}
{{- if not $p.edges }}{{ fail "provider.haproxy.edges is required: the https URLs of the npl-edge APIs" }}{{ end }}
{{- $_ := set $section "edges" $p.edges }}
{{- if $p.timeout }}{{ $_ := set $section "timeout" $p.timeout }}{{ end }}
{{- if not $p.existingSecret }}{{ fail "provider.haproxy.existingSecret is required: a Secret with tls.crt and tls.key (the client certificate for the edges) and, unless caData is set, ca.crt (the CA that signs the edges' certificates)" }}{{ end }}
{{- $_ := set $section "certFile" (printf "%s/tls.crt" $dir) }}
{{- $_ := set $section "keyFile" (printf "%s/tls.key" $dir) }}
{{- $_ := set $section "caFile" (printf "%s/ca.crt" $dir) }}
{{- end }}
{{- if include "npl.provider.hasCredentials" . }}
{{- if not (or $p.existingSecret (and $p.username $p.password)) }}
{{- fail (printf "provider.%s: set existingSecret, or username and password" $name) }}
{{- end }}
{{- $_ := set $section "usernameFile" (printf "%s/username" $dir) }}
{{- $_ := set $section "passwordFile" (printf "%s/password" $dir) }}
{{- if $p.insecureSkipVerify }}{{ $_ := set $section "insecureSkipVerify" true }}{{ end }}
{{- if include "npl.caSource" . }}
{{- $_ := set $section "caFile" (printf "%s/ca.crt" $dir) }}
{{- else if include "npl.provider.verifiesTLS" . }}
{{- fail (printf "provider.%s: set caData (the CA that signed the load balancer's certificate), existingSecret with ca.crt, or insecureSkipVerify" $name) }}
{{- end }}
{{- end }}
{{- $cfg := dict
  "clusterName" (include "npl.clusterName" .)
  "serviceType" $v.serviceType
  "loadBalancerClass" $v.loadBalancerClass
  "defaultLoadBalancer" $v.defaultLoadBalancer
  "ingressClass" $v.ingressClass.name
  "ingressSharedVIP" $v.ingressClass.sharedVIP
  "gatewayAPI" (dict "enabled" $v.gatewayAPI.enabled)
  "vipPool" $v.vipPool
  "allowedVIPs" $v.allowedVIPs
  "resyncPeriod" $v.lbsync.resyncPeriod
  "drainSeconds" $v.lbsync.drainSeconds
  "nodePortRange" ($v.lbsync.nodePortRange | default $v.agent.portRange)
  "ipFamily" $v.ipFamily
  "provider" (dict "name" $name $name $section)
}}
{{- toYaml $cfg }}
{{- end }}

{{/*
The volume npl-lbsync and the uninstall Job read /etc/npl from: the
configuration, the CA (from the ConfigMap when given as caData) and the
credentials (from the Secret), read-only. npl-lbsync also gets the webhook's
certificate and key in /etc/npl/webhook: a volume mounted inside this
read-only one could not have its mount point created, so it is one more
source. Call with (dict "ctx" $ "webhook" true).
*/}}
{{- define "npl.lbsync.configVolume" -}}
{{- $ctx := .ctx -}}
- name: config
  projected:
    defaultMode: 0440
    sources:
      - configMap:
          name: {{ include "npl.lbsync.configName" $ctx }}
          items:
            - key: config.yaml
              path: config.yaml
            {{- if eq (include "npl.caSource" $ctx) "configmap" }}
            - key: {{ $ctx.Values.provider.name }}-ca.crt
              path: {{ $ctx.Values.provider.name }}/ca.crt
            {{- end }}
      {{- if include "npl.provider.hasCredentials" $ctx }}
      - secret:
          name: {{ include "npl.credentialsSecretName" $ctx }}
          items:
            - key: username
              path: {{ $ctx.Values.provider.name }}/username
            - key: password
              path: {{ $ctx.Values.provider.name }}/password
            {{- if eq (include "npl.caSource" $ctx) "secret" }}
            - key: ca.crt
              path: {{ $ctx.Values.provider.name }}/ca.crt
            {{- end }}
      {{- end }}
      {{- if include "npl.provider.hasClientCert" $ctx }}
      - secret:
          name: {{ include "npl.credentialsSecretName" $ctx }}
          items:
            - key: tls.crt
              path: {{ $ctx.Values.provider.name }}/tls.crt
            - key: tls.key
              path: {{ $ctx.Values.provider.name }}/tls.key
            {{- if eq (include "npl.caSource" $ctx) "secret" }}
            - key: ca.crt
              path: {{ $ctx.Values.provider.name }}/ca.crt
            {{- end }}
      {{- end }}
      {{- if and .webhook $ctx.Values.lbsync.webhook.enabled }}
      - secret:
          name: {{ include "npl.webhook.secretName" $ctx }}
          items:
            - key: tls.crt
              path: webhook/tls.crt
            - key: tls.key
              path: webhook/tls.key
      {{- end }}
{{- end }}

{{/*
The webhook's serving certificate, as JSON {"crt", "key", "ca" (PEM),
"notAfter" (RFC 3339)}, when the chart makes it (certSecret empty). It is
computed once per render and kept on the root context, because the Secret,
the MutatingWebhookConfiguration and the Deployment's checksum must agree.
The Secret already in the cluster is kept across upgrades until a year
before it expires; lookup finds nothing under `helm template`, which then
generates a new CA and certificate at each run.
*/}}
{{- define "npl.webhook.tls" -}}
{{- if not (hasKey . "nplWebhookTLS") }}
{{- $secret := lookup "v1" "Secret" .Release.Namespace (include "npl.webhook.secretName" .) | default dict }}
{{- $data := get $secret "data" | default dict }}
{{- $notAfter := dig "metadata" "annotations" "npl.io/webhook-cert-not-after" "" $secret }}
{{- $renewAt := now | dateModify "+8760h" }}
{{- $tls := dict }}
{{- if and (get $data "tls.crt") (get $data "tls.key") (get $data "ca.crt") ((toDate "2006-01-02T15:04:05Z07:00" $notAfter).After $renewAt) }}
{{- $tls = dict "crt" (get $data "tls.crt" | b64dec) "key" (get $data "tls.key" | b64dec) "ca" (get $data "ca.crt" | b64dec) "notAfter" $notAfter }}
{{- else }}
{{- $svc := include "npl.webhook.fullname" . }}
{{- $host := printf "%s.%s.svc" $svc .Release.Namespace }}
{{- $ca := genCA (printf "%s-ca" $svc) 3650 }}
{{- $cert := genSignedCert $host nil (list $host (printf "%s.%s" $svc .Release.Namespace) $svc) 3650 $ca }}
{{- $tls = dict "crt" $cert.Cert "key" $cert.Key "ca" $ca.Cert "notAfter" (dateInZone "2006-01-02T15:04:05Z07:00" (now | dateModify "+87600h") "UTC") }}
{{- end }}
{{- $_ := set . "nplWebhookTLS" $tls }}
{{- end }}
{{- get . "nplWebhookTLS" | toJson }}
{{- end }}

{{/*
The caBundle of the MutatingWebhookConfiguration (base64 PEM), or nothing
when cert-manager's CA injector fills it in. Fails on settings that would
leave the API server unable to reach or trust the webhook.
*/}}
{{- define "npl.webhook.caBundle" -}}
{{- $w := .Values.lbsync.webhook }}
{{- if has (int $w.port) (list (int .Values.lbsync.metricsPort) (int .Values.lbsync.healthPort)) }}
{{- fail (printf "lbsync.webhook.port %v is also the metrics or health port" $w.port) }}
{{- end }}
{{- if not $w.certSecret }}
{{- (include "npl.webhook.tls" . | fromJson).ca | b64enc }}
{{- else if $w.caBundle }}
{{- $w.caBundle | b64enc }}
{{- else if not (hasKey $w.annotations "cert-manager.io/inject-ca-from") }}
{{- fail "lbsync.webhook.certSecret: set lbsync.webhook.caBundle (the CA that signed its certificate), or the annotation cert-manager.io/inject-ca-from in lbsync.webhook.annotations" }}
{{- end }}
{{- end }}

{{/* The agent's iptables setup, shared by the DaemonSet and its cleanup. */}}
{{- define "npl.agent.iptablesEnv" -}}
- name: NPL_IPTABLES_MODE
  value: {{ .Values.agent.iptablesMode | quote }}
- name: NPL_IPTABLES_BIN_DIR
  value: /run/npl/iptables
{{- end }}

{{- define "npl.agent.iptablesVolumeMounts" -}}
- name: xtables-lock
  mountPath: /run/xtables.lock
- name: run-npl
  mountPath: /run/npl
{{- end }}

{{- define "npl.agent.iptablesVolumes" -}}
# The host's xtables lock, shared with kube-proxy and the CNI, as kube-proxy
# mounts it.
- name: xtables-lock
  hostPath:
    path: /run/xtables.lock
    type: FileOrCreate
# Writable scratch space for the iptables wrapper (the root is read-only).
- name: run-npl
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
{{- end }}

{{/* Annotations of an uninstall hook; call with the weight. */}}
{{- define "npl.uninstallHook" -}}
helm.sh/hook: pre-delete
helm.sh/hook-weight: {{ . | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}
