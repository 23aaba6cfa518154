{{/* The chart's name, 63 characters at most. */}}
{{- define "backendslice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: the release name, prefixed with the chart's
unless it already contains it. Names every object of the release. */}}
{{- define "backendslice.fullname" -}}
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

{{/* Labels of every object: the chart's own, then commonLabels. */}}
{{- define "backendslice.labels" -}}
{{- include "backendslice.joinLabels" (dict "base" (include "backendslice.ownLabels" .) "common" .Values.commonLabels) }}
{{- end }}

{{/* The chart's own labels, which commonLabels and an object's own labels
cannot replace: the selectors and Helm's bookkeeping depend on them. */}}
{{- define "backendslice.ownLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "backendslice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The labels of an object with labels of its own (a ServiceMonitor's,
the aggregation labels of a tenant role): the chart's own, then extra and
commonLabels. Takes a dict of root (the chart's context) and extra. */}}
{{- define "backendslice.labelsWith" -}}
{{- include "backendslice.joinLabels" (dict "base" (include "backendslice.ownLabels" .root) "extra" .extra "common" .root.Values.commonLabels) }}
{{- end }}

{{/* Labels as YAML lines: base (YAML lines), which nothing replaces, then
extra and common, extra winning where both set a key; each key is written
once, so that no object carries a key twice. Takes a dict of base, extra
and common. */}}
{{- define "backendslice.joinLabels" -}}
{{- $base := .base | fromYaml }}
{{- $more := dict }}
{{- range $k, $v := merge (dict) (.extra | default dict) (.common | default dict) }}
{{- if and (not (hasKey $base $k)) (not (kindIs "invalid" $v)) }}
{{- $_ := set $more $k $v }}
{{- end }}
{{- end }}
{{- .base }}
{{- with $more }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels that select the controller Pods. */}}
{{- define "backendslice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "backendslice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end }}

{{/* The ServiceAccount the controller runs as. */}}
{{- define "backendslice.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "backendslice.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The controller image: repository@digest, else repository:tag (the
chart's appVersion by default). */}}
{{- define "backendslice.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Where the Consul token Secret is mounted. */}}
{{- define "backendslice.consulTokenDir" -}}
/var/run/secrets/backendslice/consul
{{- end }}

{{/* The name the leader election Lease has; the controller fixes it
(controllers.NewManager), and the Role grants get and update on it alone. */}}
{{- define "backendslice.leaseName" -}}
backendslice-controller.backendslice.io
{{- end }}

{{/* The proxy variables of the controller container (proxy.*), one EnvVar
a line; nothing when no proxy is set. The API server's address is always in
NO_PROXY ($(KUBERNETES_SERVICE_HOST), which the kubelet expands): client-go
honours the same variables, and the controller must reach the API server
directly. */}}
{{- define "backendslice.proxyEnv" -}}
{{- with .Values.proxy }}
{{- if or .httpsProxy .httpProxy }}
{{- with .httpsProxy }}
- name: HTTPS_PROXY
  value: {{ . | quote }}
{{- end }}
{{- with .httpProxy }}
- name: HTTP_PROXY
  value: {{ . | quote }}
{{- end }}
- name: NO_PROXY
  value: {{ join "," (compact (list "$(KUBERNETES_SERVICE_HOST)" .noProxy)) | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* The labels of an alert of the PrometheusRule: its severity and
prometheusRule.alertLabels. Takes a dict of root (the chart's context) and
severity. */}}
{{- define "backendslice.alertLabels" -}}
labels:
  severity: {{ .severity }}
  {{- with .root.Values.prometheusRule.alertLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
