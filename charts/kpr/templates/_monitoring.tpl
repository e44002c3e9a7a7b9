{{/*
The job label of the agents' series, as prometheus-operator sets it from the
enabled monitor: the PodMonitor's job relabelling (metrics.podMonitor.job;
empty: "<namespace>/<PodMonitor name>"), else the ServiceMonitor's jobLabel
(metrics.serviceMonitor.job; empty: the metrics Service's name).
*/}}
{{- define "kpr.metricsJob" -}}
{{- if .Values.metrics.podMonitor.enabled -}}
{{- .Values.metrics.podMonitor.job | default (printf "%s/%s" .Release.Namespace (include "kpr.fullname" .)) -}}
{{- else -}}
{{- .Values.metrics.serviceMonitor.job | default (printf "%s-metrics" (include "kpr.fullname" .)) -}}
{{- end -}}
{{- end -}}
