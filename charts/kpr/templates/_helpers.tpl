{{/* Common names and labels. */}}
{{- define "kpr.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kpr.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "kpr.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "kpr.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kpr.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kpr.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kpr.labels" -}}
{{ include "kpr.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "kpr.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kpr.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kpr.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The port of a "host:port" bind address. */}}
{{- define "kpr.port" -}}
{{- splitList ":" . | last -}}
{{- end -}}

{{- define "kpr.healthPort" -}}
{{- include "kpr.port" (index .Values.config "healthz-bind-address") -}}
{{- end -}}

{{- define "kpr.metricsPort" -}}
{{- include "kpr.port" (index .Values.config "metrics-bind-address") -}}
{{- end -}}

{{/* The container's securityContext: privileged, or exactly the capabilities listed. */}}
{{- define "kpr.securityContext" -}}
{{- if .Values.securityContext.privileged }}
privileged: true
{{- else }}
privileged: false
allowPrivilegeEscalation: false
capabilities:
  drop: [ALL]
  add:
{{ toYaml .Values.securityContext.capabilities | indent 4 }}
seLinuxOptions:
{{ toYaml .Values.securityContext.seLinuxOptions | indent 2 }}
{{- end }}
runAsUser: 0
readOnlyRootFilesystem: true
{{- end -}}
