{{/* Names */}}
{{- define "stargate-router.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "stargate-router.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "stargate-router.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "stargate-router.selectorLabels" -}}
app.kubernetes.io/name: {{ include "stargate-router.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "stargate-router.labels" -}}
helm.sh/chart: {{ include "stargate-router.chart" . }}
{{ include "stargate-router.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: router
app.kubernetes.io/part-of: stargate
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "stargate-router.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "stargate-router.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "stargate-router.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The Stargate side: workload kind, Service and namespace (SPEC §3). */}}
{{- define "stargate-router.workloadKind" -}}
{{- $kind := .Values.stargate.workloadKind -}}
{{- if not (has $kind (list "Deployment" "StatefulSet")) -}}
{{- fail (printf "stargate.workloadKind must be Deployment or StatefulSet, got %q" $kind) -}}
{{- end -}}
{{- $kind -}}
{{- end -}}

{{/* Upstream's Stargate chart names its headless Service so for either workload kind. */}}
{{- define "stargate-router.stargateServiceName" -}}
{{- default "llm-request-router-headless" .Values.stargate.serviceName -}}
{{- end -}}

{{- define "stargate-router.stargateNamespace" -}}
{{- default .Release.Namespace .Values.stargate.namespace -}}
{{- end -}}

{{/* Peer discovery watches the router's own Service, in the release namespace. */}}
{{- define "stargate-router.peerRoleSeparate" -}}
{{- if ne (include "stargate-router.stargateNamespace" .) .Release.Namespace -}}true{{- end -}}
{{- end -}}

{{/* host:port for a --*-listen-addr flag. */}}
{{- define "stargate-router.listenAddr" -}}
{{- $host := index . 0 -}}
{{- $port := index . 1 -}}
{{- printf "%s:%d" $host (int64 $port) -}}
{{- end -}}

{{/* Mount directories of TLS material (one directory per source, never subPath). */}}
{{- define "stargate-router.tlsDir" -}}/etc/stargate-router/tls{{- end -}}

{{- define "stargate-router.caSourceSet" -}}
{{- if or .secretName .configMapName -}}true{{- end -}}
{{- end -}}

{{/*
Flags the chart derives from other values; they are not accepted under `config`.
*/}}
{{- define "stargate-router.managedFlags" -}}
{{- list "listen-addr" "reverse-tunnel-listen-addr" "health-listen-addr" "target-namespace" "target-service-name" "tls-cert-path" "tls-key-path" "front-door-tls" "client-ca-path" "upstream-tls-cert-path" "enable-peer-discovery" "peer-service" "rebalance" | toJson -}}
{{- end -}}

{{/*
One `config` value as a flag argument; numbers from values files arrive as float64: whole ones
are printed as integers (not 1e+06), fractions (--rebalance-tolerance) as they are.
*/}}
{{- define "stargate-router.flagValue" -}}
{{- if and (kindIs "float64" .) (ne (floor .) .) -}}
{{- . -}}
{{- else if or (kindIs "float64" .) (kindIs "int64" .) (kindIs "int" .) -}}
{{- int64 . -}}
{{- else -}}
{{- . -}}
{{- end -}}
{{- end -}}

{{/*
--grpc-pylon-dial-addr: config.grpc-pylon-dial-addr, else this chart's Service (a URI only
Pylons inside the cluster can dial; Pylons outside dial the Gateway, which must be set).
*/}}
{{- define "stargate-router.grpcPylonDialAddr" -}}
{{- $set := index .Values.config "grpc-pylon-dial-addr" -}}
{{- if $set -}}
{{- $set -}}
{{- else -}}
{{- $scheme := ternary "https" "http" .Values.tls.frontDoor.enabled -}}
{{- $port := default .Values.ports.frontDoor .Values.service.ports.frontDoor -}}
{{- printf "%s://%s.%s.svc:%d" $scheme (include "stargate-router.fullname" .) .Release.Namespace (int64 $port) -}}
{{- end -}}
{{- end -}}

{{/*
terminationGracePeriodSeconds follows the drain: the preStop sleep, then the drain timeout
(--shutdown-drain-timeout-ms, rounded up to seconds), then 5 s to close tunnels and exit.
*/}}
{{- define "stargate-router.terminationGracePeriodSeconds" -}}
{{- $drainMs := int64 (default 30000 (index .Values.config "shutdown-drain-timeout-ms")) -}}
{{- $drain := div (add $drainMs 999) 1000 -}}
{{- $needed := add (int64 .Values.preStopSleepSeconds) $drain -}}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds -}}
{{- add $needed 5 -}}
{{- else if lt (int64 .Values.terminationGracePeriodSeconds) $needed -}}
{{- fail (printf "terminationGracePeriodSeconds %d is shorter than preStopSleepSeconds + the drain timeout (%d s): the kubelet would kill the router mid-drain; leave it null to follow the drain" (int64 .Values.terminationGracePeriodSeconds) $needed) -}}
{{- else -}}
{{- int64 .Values.terminationGracePeriodSeconds -}}
{{- end -}}
{{- end -}}

{{/* The router's container arguments (every flag of lib/config/flags.ts is reachable). */}}
{{- define "stargate-router.args" -}}
{{- $managed := include "stargate-router.managedFlags" . | fromJsonArray -}}
{{- $tlsDir := include "stargate-router.tlsDir" . -}}
- {{ printf "--listen-addr=%s" (include "stargate-router.listenAddr" (list .Values.listenHost .Values.ports.frontDoor)) | quote }}
- {{ printf "--reverse-tunnel-listen-addr=%s" (include "stargate-router.listenAddr" (list .Values.listenHost .Values.ports.tunnel)) | quote }}
- {{ printf "--health-listen-addr=%s" (include "stargate-router.listenAddr" (list .Values.listenHost .Values.ports.health)) | quote }}
- {{ printf "--target-service-name=%s" (include "stargate-router.stargateServiceName" .) | quote }}
{{- if .Values.stargate.namespace }}
- {{ printf "--target-namespace=%s" .Values.stargate.namespace | quote }}
{{- end }}
- {{ printf "--grpc-pylon-dial-addr=%s" (include "stargate-router.grpcPylonDialAddr" .) | quote }}
{{- with .Values.tls.serverIdentity }}
{{- if .secretName }}
- {{ printf "--tls-cert-path=%s/server/%s" $tlsDir .certKey | quote }}
- {{ printf "--tls-key-path=%s/server/%s" $tlsDir .keyKey | quote }}
{{- end }}
{{- end }}
{{- if .Values.tls.frontDoor.enabled }}
{{- if not .Values.tls.serverIdentity.secretName }}
{{- fail "tls.frontDoor.enabled needs tls.serverIdentity.secretName: the front door serves that identity" }}
{{- end }}
- "--front-door-tls"
{{- end }}
{{- if include "stargate-router.caSourceSet" .Values.tls.upstreamTrust }}
- {{ printf "--upstream-tls-cert-path=%s/upstream-trust/%s" $tlsDir .Values.tls.upstreamTrust.key | quote }}
{{- end }}
{{- if and (index .Values.config "upstream-tls") (not (include "stargate-router.caSourceSet" .Values.tls.upstreamTrust)) (not .Values.tls.serverIdentity.secretName) (not (index .Values.config "upstream-tls-system-ca")) }}
{{- fail "config.upstream-tls needs a trust bundle for Stargate certificates: set tls.upstreamTrust (or tls.serverIdentity, whose certificate is then trusted), or config.upstream-tls-system-ca to trust the system CA store" }}
{{- end }}
{{- if include "stargate-router.caSourceSet" .Values.tls.clientCa }}
{{- if not .Values.tls.serverIdentity.secretName }}
{{- fail "tls.clientCa needs tls.serverIdentity.secretName: client certificates are verified during the router's own TLS handshake" }}
{{- end }}
- {{ printf "--client-ca-path=%s/client-ca/%s" $tlsDir .Values.tls.clientCa.key | quote }}
{{- end }}
{{- if .Values.peerDiscovery.enabled }}
{{- if index .Values.config "peers-file" }}
{{- fail "config.peers-file is for runs without Kubernetes; peerDiscovery.enabled finds peers through the chart's Service: set one or the other" }}
{{- end }}
- "--enable-peer-discovery"
- {{ printf "--peer-service=%s" (include "stargate-router.fullname" .) | quote }}
{{- end }}
{{- if .Values.rebalance.enabled }}
{{- if not .Values.peerDiscovery.enabled }}
{{- fail "rebalance.enabled needs peerDiscovery.enabled: replicas balance by reading each other's load" }}
{{- end }}
- "--rebalance"
{{- end }}
{{- range $name, $value := .Values.config }}
{{- if eq $name "grpc-pylon-dial-addr" }}
{{- /* rendered above, with the chart's default */ -}}
{{- else if has $name $managed }}
{{- fail (printf "config.%s is set by the chart from other values; see the comments in values.yaml" $name) }}
{{- else if or (kindIs "invalid" $value) (and (kindIs "string" $value) (eq $value "")) }}
{{- /* null or "": the router's default */ -}}
{{- else if kindIs "bool" $value }}
{{- if $value }}
- {{ printf "--%s" $name | quote }}
{{- end }}
{{- else if kindIs "slice" $value }}
{{- range $value }}
- {{ printf "--%s=%s" $name (toString .) | quote }}
{{- end }}
{{- else }}
- {{ printf "--%s=%s" $name (include "stargate-router.flagValue" $value) | quote }}
{{- end }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/* A CA bundle volume from a Secret or a ConfigMap (whole object, mounted as a directory). */}}
{{- define "stargate-router.caVolume" -}}
{{- $name := index . 0 -}}
{{- $source := index . 1 -}}
{{- if and $source.secretName $source.configMapName -}}
{{- fail (printf "%s: set secretName or configMapName, not both" $name) -}}
{{- end -}}
{{- if $source.secretName -}}
- name: {{ $name }}
  secret:
    secretName: {{ $source.secretName }}
    defaultMode: 292
{{- else if $source.configMapName -}}
- name: {{ $name }}
  configMap:
    name: {{ $source.configMapName }}
    defaultMode: 292
{{- end -}}
{{- end -}}

{{/* Service spec fields shared by the Service and the optional UDP Service. */}}
{{- define "stargate-router.serviceSpecExtras" -}}
{{- $svc := .Values.service -}}
{{- if and $svc.externalTrafficPolicy (ne $svc.type "ClusterIP") }}
externalTrafficPolicy: {{ $svc.externalTrafficPolicy }}
{{- end }}
{{- if eq $svc.type "LoadBalancer" }}
{{- with $svc.loadBalancerClass }}
loadBalancerClass: {{ . }}
{{- end }}
{{- with $svc.loadBalancerSourceRanges }}
loadBalancerSourceRanges:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
{{- /* ClientIP would pin every Pylon behind one NAT address to one replica and undo balancing. */ -}}
{{- with (ternary "None" $svc.sessionAffinity .Values.rebalance.enabled) }}
sessionAffinity: {{ . }}
{{- end }}
{{- end -}}
