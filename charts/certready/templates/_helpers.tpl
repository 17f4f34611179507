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

{{/* The labels Helm and the operator add to every object: kustomize's
     part-of, Helm's own and commonLabels (which may not redefine a label
     the chart sets: selectors and tools read those). */}}
{{- define "certready.helmLabels" -}}
{{- $own := list "app.kubernetes.io/name" "app.kubernetes.io/component" "app.kubernetes.io/instance" "app.kubernetes.io/part-of" "app.kubernetes.io/managed-by" "app.kubernetes.io/version" "helm.sh/chart" -}}
{{- range $k, $_ := .Values.commonLabels -}}
{{- if has $k $own -}}
{{- fail (printf "commonLabels.%s: the chart sets this label itself (selectors and `certready csr explain` read it); choose another key" $k) -}}
{{- end -}}
{{- end -}}
app.kubernetes.io/part-of: certready
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ default .Chart.AppVersion .Values.image.tag | trunc 63 | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Labels of an object that belongs to no component (the Namespace, the
     dashboard): the release's and Helm's. */}}
{{- define "certready.commonLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
{{ include "certready.helmLabels" . }}
{{- end -}}

{{/* Selector labels of a component: (list $ "agent"). The release is one
     of them: two releases in one namespace never select each other's pods. */}}
{{- define "certready.selectorLabels" -}}
app.kubernetes.io/name: certready
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
{{- with index . 1 }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end -}}

{{/* All labels of a component's objects: (list $ "agent"), or (list $ "") for none. */}}
{{- define "certready.labels" -}}
{{ include "certready.selectorLabels" . }}
{{ include "certready.helmLabels" (index . 0) }}
{{- end -}}

{{/* Whether to fit OpenShift's restricted-v2 SCC: openshift.adaptSecurityContext
     force, or auto where the cluster serves security.openshift.io/v1. */}}
{{- define "certready.openshift" -}}
{{- $m := .Values.openshift.adaptSecurityContext -}}
{{- if not (has $m (list "auto" "force" "disabled")) -}}
{{- fail (printf "openshift.adaptSecurityContext %q: want auto, force or disabled" $m) -}}
{{- end -}}
{{- if or (eq $m "force") (and (eq $m "auto") (.Capabilities.APIVersions.Has "security.openshift.io/v1")) }}true{{ end -}}
{{- end -}}

{{/* A security context as given, less the user and group IDs on OpenShift
     (restricted-v2 assigns them from the namespace's range): (list $ ctx). */}}
{{- define "certready.securityContext" -}}
{{- $ctx := index . 1 | default dict -}}
{{- if include "certready.openshift" (index . 0) -}}
{{- $ctx = omit $ctx "runAsUser" "runAsGroup" "fsGroup" "supplementalGroups" -}}
{{- end -}}
{{- with $ctx }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* Fails naming the value when an optional API is asked for but the
     cluster does not serve it: (list $ "monitoring.coreos.com/v1/ServiceMonitor" "monitoring.serviceMonitor.enabled" "the Prometheus Operator's CRDs"). */}}
{{- define "certready.requireAPI" -}}
{{- $ := index . 0 -}}
{{- $api := index . 1 -}}
{{- if not ($.Capabilities.APIVersions.Has $api) -}}
{{- fail (printf "%s: this cluster does not serve %s; install %s first, or turn it off (helm template: pass --api-versions %s)" (index . 2) $api (index . 3) $api) -}}
{{- end -}}
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

{{/* The readiness taint, as --lift-readiness-taint and NodeReadinessRules spell it. */}}
{{- define "certready.readinessTaintKey" -}}readiness.k8s.io/KubeletServingCertNotReady{{- end -}}
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

{{/* The approver's node affinity: approver.affinity when set, else
     approver.placement's (values.yaml names the risk of each). */}}
{{- define "certready.approverPoolLabel" -}}node-restriction.kubernetes.io/certready-approver-pool{{- end -}}
{{- define "certready.approverAffinity" -}}
{{- $p := .Values.approver -}}
{{- if not (has $p.placement (list "trusted" "control-plane" "pool" "any")) -}}
{{- fail (printf "approver.placement %q: want trusted, control-plane, pool or any" $p.placement) -}}
{{- end -}}
{{- $pool := dict "matchExpressions" (list (dict "key" (include "certready.approverPoolLabel" .) "operator" "Exists")) -}}
{{- $cp := dict "matchExpressions" (list (dict "key" "node-role.kubernetes.io/control-plane" "operator" "Exists")) -}}
{{- $preferCP := list (dict "weight" 100 "preference" $cp) -}}
{{- if $p.affinity -}}
{{- toYaml $p.affinity -}}
{{- else if eq $p.placement "trusted" -}}
{{- toYaml (dict "nodeAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (dict "nodeSelectorTerms" (list $pool $cp)) "preferredDuringSchedulingIgnoredDuringExecution" $preferCP)) -}}
{{- else if eq $p.placement "control-plane" -}}
{{- toYaml (dict "nodeAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (dict "nodeSelectorTerms" (list $cp)))) -}}
{{- else if eq $p.placement "pool" -}}
{{- toYaml (dict "nodeAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (dict "nodeSelectorTerms" (list $pool)))) -}}
{{- else -}}
{{- toYaml (dict "nodeAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" $preferCP)) -}}
{{- end -}}
{{- end -}}

{{/* A label selector in one spelling, for comparing what the chart renders
     with what the API server returns: empty lists and maps left out. */}}
{{- define "certready.normalSelector" -}}
{{- $out := dict -}}
{{- with .matchLabels }}{{ $_ := set $out "matchLabels" . }}{{ end -}}
{{- $exprs := list -}}
{{- range .matchExpressions -}}
{{- $e := dict "key" .key "operator" .operator -}}
{{- with .values }}{{ $_ := set $e "values" . }}{{ end -}}
{{- $exprs = append $exprs $e -}}
{{- end -}}
{{- with $exprs }}{{ $_ := set $out "matchExpressions" . }}{{ end -}}
{{- toJson $out -}}
{{- end -}}

{{/* An upgrade that would change a NodeReadinessRule's immutable fields
     (conditions, enforcementMode, conditionPolicy, nodeSelector) is refused
     while rendering, before anything is applied, instead of failing half-way
     on the API server's validation: (list $ name mode nodeSelector). lookup
     finds nothing under helm template. */}}
{{- define "certready.immutableRule" -}}
{{- $ := index . 0 -}}
{{- $name := index . 1 -}}
{{- $mode := index . 2 -}}
{{- $selector := index . 3 | default dict -}}
{{- with lookup "readiness.node.x-k8s.io/v1alpha1" "NodeReadinessRule" "" $name -}}
{{- $changed := list -}}
{{- $want := list (dict "type" $.Values.conditionType "requiredStatus" "False") -}}
{{- $have := list -}}
{{- range .spec.conditions }}{{ $have = append $have (dict "type" .type "requiredStatus" .requiredStatus) }}{{ end -}}
{{- if ne (toJson $have) (toJson $want) }}{{ $changed = append $changed (printf "conditions (conditionType: %s in the cluster)" (toJson $have)) }}{{ end -}}
{{- if ne (.spec.enforcementMode | default "") $mode }}{{ $changed = append $changed (printf "enforcementMode (%s in the cluster)" .spec.enforcementMode) }}{{ end -}}
{{- if ne (.spec.conditionPolicy | default "allOf") "allOf" }}{{ $changed = append $changed (printf "conditionPolicy (%s in the cluster)" .spec.conditionPolicy) }}{{ end -}}
{{- $sel := include "certready.normalSelector" (.spec.nodeSelector | default dict) -}}
{{- if ne $sel (include "certready.normalSelector" $selector) }}{{ $changed = append $changed (printf "nodeSelector (taint.nrc.nodeSelector; %s in the cluster)" $sel) }}{{ end -}}
{{- with $changed -}}
{{- fail (printf "NodeReadinessRule %s exists and its %s cannot be changed in place; nothing was applied. Keep the values it was created with, or replace the rule: a new taint.nrc.ruleName with taint.nrc.dryRun=true (a new rule taints every selected node that lacks its mark), certready preflight, then dryRun=false and delete the old rule (docs/install.md: Changing the rule)" $name (join ", " .)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
