{{/*
Names. fullname is at most 42 characters, so that the longest suffix
("-agent-cleanup-wait") still gives a valid object name.
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
{{- $_ := set $section "createPartition" $p.createPartition }}
{{- $_ := set $section "tokenAuth" $p.tokenAuth }}
{{- range $k := list "partition" "timeout" }}
{{- if index $p $k }}{{ $_ := set $section $k (index $p $k) }}{{ end }}
{{- end }}
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
  "vipPool" $v.vipPool
  "resyncPeriod" $v.lbsync.resyncPeriod
  "drainSeconds" $v.lbsync.drainSeconds
  "ipFamily" $v.ipFamily
  "provider" (dict "name" $name $name $section)
}}
{{- toYaml $cfg }}
{{- end }}

{{/*
The volume npl-lbsync and the uninstall Job read /etc/npl from: the
configuration, the CA (from the ConfigMap when given as caData) and the
credentials (from the Secret), read-only.
*/}}
{{- define "npl.lbsync.configVolume" -}}
- name: config
  projected:
    defaultMode: 0440
    sources:
      - configMap:
          name: {{ include "npl.lbsync.configName" . }}
          items:
            - key: config.yaml
              path: config.yaml
            {{- if eq (include "npl.caSource" .) "configmap" }}
            - key: {{ .Values.provider.name }}-ca.crt
              path: {{ .Values.provider.name }}/ca.crt
            {{- end }}
      {{- if include "npl.provider.hasCredentials" . }}
      - secret:
          name: {{ include "npl.credentialsSecretName" . }}
          items:
            - key: username
              path: {{ .Values.provider.name }}/username
            - key: password
              path: {{ .Values.provider.name }}/password
            {{- if eq (include "npl.caSource" .) "secret" }}
            - key: ca.crt
              path: {{ .Values.provider.name }}/ca.crt
            {{- end }}
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
