{{/* Object names: <fullname>-<part>, fullname as Helm charts derive it:
     fullnameOverride, else the release name when it contains the chart's
     name (or nameOverride), else <release>-<name>. Release certready:
     certready-agent, as the kustomize overlays name it. */}}
{{- define "certready.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "certready.namespace" -}}
{{- default .Release.Namespace .Values.namespace.name -}}
{{- end -}}

{{- define "certready.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- $ref := printf "%s:%s" .Values.image.repository $tag -}}
{{- if .Values.image.digest -}}
{{- if not (hasPrefix "sha256:" .Values.image.digest) -}}
{{- fail (printf "image.digest %q: want sha256:<64 hex digits>" .Values.image.digest) -}}
{{- end -}}
{{- $ref = printf "%s@%s" $ref .Values.image.digest -}}
{{- end -}}
{{- $ref -}}
{{- end -}}

{{/* Labels every object carries: kustomize's part-of, and Helm's own. */}}
{{- define "certready.commonLabels" -}}
app.kubernetes.io/part-of: certready
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ default .Chart.AppVersion .Values.image.tag | trunc 63 | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Selector labels of a component: (list $ "agent"). */}}
{{- define "certready.selectorLabels" -}}
app.kubernetes.io/name: certready
{{- with index . 1 }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end -}}

{{/* All labels of a component's objects: (list $ "agent"), or (list $ "") for none. */}}
{{- define "certready.labels" -}}
{{ include "certready.selectorLabels" . }}
{{ include "certready.commonLabels" (index . 0) }}
{{- end -}}

{{/* Whether this cluster runs the agent side (not in Cluster API management mode). */}}
{{- define "certready.local" -}}
{{- if not .Values.capi.enabled }}true{{ end -}}
{{- end -}}

{{- define "certready.agentServiceAccount" -}}
{{- default (printf "%s-agent" (include "certready.fullname" .)) .Values.agent.serviceAccount.name -}}
{{- end -}}

{{- define "certready.approverServiceAccount" -}}
{{- default (printf "%s-approver" (include "certready.fullname" .)) .Values.approver.serviceAccount.name -}}
{{- end -}}

{{/*
The agent's --inventory: agent.inventory; "" follows the approver's
inventory when it is a ConfigMap in the release namespace (the agent dials
what the approver approves; its Role is there); "node": none. An explicit
ConfigMap elsewhere is refused.
*/}}
{{- define "certready.agentInventory" -}}
{{- $ns := include "certready.namespace" . -}}
{{- $inv := .Values.agent.inventory -}}
{{- $approver := .Values.approver.inventory | default "" -}}
{{- if and (eq $inv "") (not .Values.capi.enabled) (hasPrefix (printf "configmap:%s/" $ns) $approver) -}}
{{- $inv = $approver -}}
{{- end -}}
{{- if and $inv (ne $inv "node") -}}
{{- if hasPrefix "configmap:" $inv -}}
{{- $ref := splitList "/" (trimPrefix "configmap:" $inv) -}}
{{- if or (ne (len $ref) 2) (ne (index $ref 0) $ns) -}}
{{- fail (printf "agent.inventory=%s: the agents read the inventory ConfigMap in the release namespace %s only (their Role is there): move it, or set agent.inventory=node" $inv $ns) -}}
{{- end -}}
{{- end -}}
{{- $inv -}}
{{- end -}}
{{- end -}}

{{/* The startup taint, as --remove-startup-taint and NodeReadinessRules spell it. */}}
{{- define "certready.startupTaintKey" -}}readiness.k8s.io/KubeletServingCertNotReady{{- end -}}
{{- define "certready.softTaintKey" -}}readiness.k8s.io/KubeletServingCertUnproven{{- end -}}

{{/* The metrics endpoints' certificate: metrics.certSecret when given
     (e.g. cert-manager's), else the Secret the approver keeps, signed by
     its own CA (certready.metricsManaged). Plain HTTP only when
     metrics.secure is off. */}}
{{- define "certready.metricsManaged" -}}
{{- if and .Values.metrics.secure (not .Values.metrics.certSecret) }}true{{ end -}}
{{- end -}}
{{- define "certready.metricsTLSSecret" -}}
{{- .Values.metrics.certSecret | default (printf "%s-metrics-tls" (include "certready.fullname" .)) -}}
{{- end -}}
{{- define "certready.metricsCASecret" -}}
{{- printf "%s-metrics-ca" (include "certready.fullname" .) -}}
{{- end -}}
{{- define "certready.metricsArgs" -}}
{{- if not .Values.metrics.secure -}}
- --metrics-secure=false
{{- else -}}
- --metrics-cert-dir=/etc/certready/metrics-tls
{{- end -}}
{{- end -}}
{{/* The approver's: it keeps the managed Secrets, or none. */}}
{{- define "certready.approverMetricsArgs" -}}
{{- include "certready.metricsArgs" . }}
{{- if include "certready.metricsManaged" . }}
- --metrics-ca-secret={{ include "certready.metricsCASecret" . }}
- --metrics-tls-secret={{ include "certready.metricsTLSSecret" . }}
{{- if ne .Values.metrics.serverName "certready-metrics" }}
- --metrics-server-name={{ .Values.metrics.serverName }}
{{- end }}
{{- else }}
- --metrics-ca-secret=
- --metrics-tls-secret=
{{- end -}}
{{- end -}}
{{- define "certready.metricsCertSecret" -}}
{{- if .Values.metrics.secure }}true{{ end -}}
{{- end -}}
{{- define "certready.metricsCertMount" -}}
{{- if include "certready.metricsCertSecret" . -}}
- name: metrics-tls
  mountPath: /etc/certready/metrics-tls
  readOnly: true
{{- end -}}
{{- end -}}
{{/* mode: 0400 for the agent (root), 0440 for the approver (fsGroup). */}}
{{- define "certready.metricsCertVolume" -}}
{{- $ := index . 0 -}}
{{- if include "certready.metricsCertSecret" $ -}}
- name: metrics-tls
  secret:
    secretName: {{ include "certready.metricsTLSSecret" $ }}
    defaultMode: {{ index . 1 }}
    {{- if include "certready.metricsManaged" $ }}
    # Filled by the approver's leader; until then a self-signed
    # certificate is served, which Prometheus refuses.
    optional: true
    {{- end }}
{{- end -}}
{{- end -}}
