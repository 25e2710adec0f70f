{{/*
The chart name, cut to 63 characters (a DNS label).
*/}}
{{- define "podmortem.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name: `<release>-<chart>`, or the release name alone when it already contains the chart
name. Cut to 63 characters because some Kubernetes name fields are limited to that (DNS labels).
*/}}
{{- define "podmortem.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The name of one component (`operator`, `agent`, ...): the full name cut so that the name with its
suffix still fits 63 characters. Call with (dict "root" $ "suffix" "operator").
*/}}
{{- define "podmortem.componentName" -}}
{{- $room := int (sub 62 (len .suffix)) }}
{{- printf "%s-%s" (include "podmortem.fullname" .root | trunc $room | trimSuffix "-") .suffix }}
{{- end }}

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "podmortem.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every resource. helm.sh/chart changes with each chart version, so it stays here and
never reaches a selector (selectors are immutable).
*/}}
{{- define "podmortem.labels" -}}
helm.sh/chart: {{ include "podmortem.chart" . }}
{{ include "podmortem.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: podmortem
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels: stable across upgrades.
*/}}
{{- define "podmortem.selectorLabels" -}}
app.kubernetes.io/name: {{ include "podmortem.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Labels and selector labels of one component. Call with (dict "root" $ "component" "operator").
*/}}
{{- define "podmortem.componentLabels" -}}
{{ include "podmortem.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "podmortem.componentSelectorLabels" -}}
{{ include "podmortem.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
ServiceAccount names.
*/}}
{{- define "podmortem.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create }}
{{- default (include "podmortem.componentName" (dict "root" . "suffix" "operator")) .Values.operator.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.operator.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "podmortem.agent.serviceAccountName" -}}
{{- if .Values.agent.serviceAccount.create }}
{{- default (include "podmortem.componentName" (dict "root" . "suffix" "agent")) .Values.agent.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.agent.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The image reference; a digest wins over the tag.
*/}}
{{- define "podmortem.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The Secret holding the agent token, and where both containers find it.
*/}}
{{- define "podmortem.agentTokenSecretName" -}}
{{- default (include "podmortem.componentName" (dict "root" . "suffix" "agent-token")) .Values.agentToken.existingSecret }}
{{- end }}

{{- define "podmortem.agentTokenDir" -}}
/var/run/secrets/podmortem/agent-token
{{- end }}

{{/*
The Lease the operator replicas elect a leader with.
*/}}
{{- define "podmortem.leaseName" -}}
{{- include "podmortem.componentName" (dict "root" . "suffix" "operator") }}
{{- end }}

{{/*
Foreign kinds as `resource.group` for messages and RBAC grouping.
*/}}
{{- define "podmortem.foreignKindsJson" -}}
{{- $kinds := list }}
{{- range .Values.foreignKinds }}
{{- $kinds = append $kinds (dict "group" .group "version" (default "" .version) "resource" .resource) }}
{{- end }}
{{- toJson $kinds }}
{{- end }}

{{/*
Checks that fail the render with a message saying what to change, for combinations a schema
cannot express.
*/}}
{{- define "podmortem.validate" -}}
{{- if and .Values.operator.enabled (gt (int .Values.operator.replicaCount) 1) }}
{{- if not .Values.operator.leaderElection.enabled }}
{{- fail "operator.replicaCount > 1 needs operator.leaderElection.enabled=true: two leaders would follow every log twice." }}
{{- end }}
{{- if not .Values.persistence.enabled }}
{{- fail "operator.replicaCount > 1 needs persistence.enabled=true with accessModes [ReadWriteMany]: with an emptyDir each replica has its own log store, and a failover loses the logs." }}
{{- end }}
{{- if and (not .Values.persistence.existingClaim) (not (has "ReadWriteMany" .Values.persistence.accessModes)) }}
{{- fail "operator.replicaCount > 1 needs persistence.accessModes to include ReadWriteMany: replicas on different nodes must share the log store." }}
{{- end }}
{{- end }}
{{- if and .Values.operator.http.tls.certManager.enabled (not .Values.operator.http.tls.certManager.issuerRef.name) }}
{{- fail "operator.http.tls.certManager.enabled=true needs operator.http.tls.certManager.issuerRef.name: the cert-manager issuer that signs the log API's certificate." }}
{{- end }}
{{- if and .Values.webhook.enabled (not .Values.operator.enabled) }}
{{- fail "webhook.enabled=true needs operator.enabled=true: the operator serves the webhook." }}
{{- end }}
{{- if and .Values.webhook.enabled .Values.webhook.certManager.enabled (not .Values.webhook.certManager.issuerRef.name) }}
{{- fail "webhook.certManager.enabled=true needs webhook.certManager.issuerRef.name: the cert-manager issuer that signs the webhook's certificate." }}
{{- end }}
{{- if and .Values.agent.enabled (eq .Values.agent.kernelLog.source "kmsg") (not .Values.agent.kernelLog.mountDevKmsg) }}
{{- fail "agent.kernelLog.source=kmsg needs agent.kernelLog.mountDevKmsg=true (or use source auto or syslog)." }}
{{- end }}
{{- range $server, $limits := .Values.serverLimits }}
{{- if gt (int64 $limits.maxConnectionsPerPeer) (int64 $limits.maxConnections) }}
{{- fail (printf "serverLimits.%s.maxConnectionsPerPeer (%v) must not exceed serverLimits.%s.maxConnections (%v): the servers would refuse to start." $server $limits.maxConnectionsPerPeer $server $limits.maxConnections) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The agent pods' label selector as `k=v,k=v`, for the operator to find the agent on a node.
*/}}
{{- define "podmortem.agentSelector" -}}
{{- $labels := include "podmortem.componentSelectorLabels" (dict "root" . "component" "agent") | fromYaml }}
{{- $pairs := list }}
{{- range $key := keys $labels | sortAlpha }}
{{- $pairs = append $pairs (printf "%s=%s" $key (get $labels $key)) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}

{{/*
The Secret with the log API's TLS certificate (tls.crt, tls.key); empty when the log API is plain HTTP.
*/}}
{{- define "podmortem.httpTlsSecret" -}}
{{- $tls := .Values.operator.http.tls }}
{{- if $tls.secretName }}
{{- $tls.secretName }}
{{- else if $tls.certManager.enabled }}
{{- include "podmortem.componentName" (dict "root" . "suffix" "operator-tls") }}
{{- end }}
{{- end }}

{{/*
Where the operator container reads the log API's certificate.
*/}}
{{- define "podmortem.httpTlsDir" -}}
/etc/podmortem/http-tls
{{- end }}

{{/*
The scheme of the log API: https with a certificate.
*/}}
{{- define "podmortem.httpScheme" -}}
{{- if include "podmortem.httpTlsSecret" . }}https{{ else }}http{{ end }}
{{- end }}

{{/*
The sidecar's image: its own repository if set, else the operator's image (which has the command).
*/}}
{{- define "podmortem.sidecarImage" -}}
{{- $image := .Values.sidecar.image }}
{{- if not $image.repository }}
{{- include "podmortem.image" . }}
{{- else if $image.digest }}
{{- printf "%s@%s" $image.repository $image.digest }}
{{- else }}
{{- printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag) }}
{{- end }}
{{- end }}

{{/*
The webhook's Service (its certificate is for this name), its TLS Secret and where the operator reads it.
*/}}
{{- define "podmortem.webhookServiceName" -}}
{{- include "podmortem.componentName" (dict "root" . "suffix" "webhook") }}
{{- end }}

{{- define "podmortem.webhookTlsSecret" -}}
{{- include "podmortem.componentName" (dict "root" . "suffix" "webhook-tls") }}
{{- end }}

{{- define "podmortem.webhookTlsDir" -}}
/etc/podmortem/webhook-tls
{{- end }}

{{/*
The DNS names the API server may call the webhook Service by.
*/}}
{{- define "podmortem.webhookDnsNames" -}}
{{- $svc := include "podmortem.webhookServiceName" . }}
{{- $ns := .Release.Namespace }}
{{- toJson (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns)) }}
{{- end }}

{{/*
The five variables of one server's deadlines and caps (podmortem.cli.server_limit_options), as env
items: (dict "env" "HTTP" "limits" .Values.serverLimits.logApi).
*/}}
{{- define "podmortem.serverLimitsEnv" -}}
- name: PODMORTEM_{{ .env }}_HEADER_TIMEOUT_SECONDS
  value: {{ .limits.headerTimeoutSeconds | quote }}
- name: PODMORTEM_{{ .env }}_BODY_TIMEOUT_SECONDS
  value: {{ .limits.bodyTimeoutSeconds | quote }}
- name: PODMORTEM_{{ .env }}_IDLE_TIMEOUT_SECONDS
  value: {{ .limits.idleTimeoutSeconds | quote }}
- name: PODMORTEM_{{ .env }}_MAX_CONNECTIONS
  value: {{ int64 .limits.maxConnections | quote }}
- name: PODMORTEM_{{ .env }}_MAX_CONNECTIONS_PER_PEER
  value: {{ int64 .limits.maxConnectionsPerPeer | quote }}
{{- end }}

{{/*
The follow selector's namespaces, comma-separated; each must be watched (the operator never sees the
pods of a namespace it does not watch, and would refuse the setting at start).
*/}}
{{- define "podmortem.followNamespaces" -}}
{{- $watched := .Values.watchNamespaces -}}
{{- range .Values.followSelector.namespaces -}}
{{- if and $watched (not (has . $watched)) -}}
{{- fail (printf "followSelector.namespaces: %s is not in watchNamespaces (%s): its pods are never seen" . (join ", " $watched)) -}}
{{- end -}}
{{- end -}}
{{- join "," .Values.followSelector.namespaces -}}
{{- end -}}
