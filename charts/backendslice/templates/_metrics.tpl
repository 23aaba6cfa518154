{{/* How the ServiceMonitor and PodMonitor scrape: with metrics.secure, over
HTTPS with the bearer token of the metrics-scraper ServiceAccount (its
Secret, templates/metrics-reader.yaml) and metrics.tlsConfig; else plain
HTTP. */}}
{{- define "backendslice.metricsScrapeAuth" -}}
{{- if .Values.metrics.secure -}}
scheme: https
authorization:
  type: Bearer
  credentials:
    name: {{ include "backendslice.fullname" . }}-metrics-scraper
    key: token
{{- with .Values.metrics.tlsConfig }}
tlsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- else -}}
scheme: http
{{- end }}
{{- end }}
