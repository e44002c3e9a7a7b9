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

{{/* The agent's way to the API server: --k8s-service-host/port, or the kubeconfig of kubeconfigFromConfigMap. One arg per line. */}}
{{- define "kpr.apiServerArgs" -}}
{{- if .Values.kubeconfigFromConfigMap.enabled }}
- --kubeconfig=/var/lib/kube-proxy/{{ .Values.kubeconfigFromConfigMap.key }}
{{- else if .Values.k8sServiceHost }}
- --k8s-service-host={{ .Values.k8sServiceHost }}
{{- if .Values.k8sServicePort }}
- --k8s-service-port={{ .Values.k8sServicePort }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "kpr.apiServerVolumeMounts" -}}
{{- if .Values.kubeconfigFromConfigMap.enabled }}
# The kubeconfig names the service account's token and CA files, which the pod mounts as usual.
- name: api-server-kubeconfig
  mountPath: /var/lib/kube-proxy
  readOnly: true
{{- else if .Values.kubeProxyConfigMap.enabled }}
# kube-proxy's ConfigMap where kube-proxy had it: its command line and config.conf name these paths.
- name: kube-proxy
  mountPath: /var/lib/kube-proxy
  readOnly: true
{{- end }}
{{- end -}}

{{- define "kpr.apiServerVolumes" -}}
{{- if .Values.kubeconfigFromConfigMap.enabled }}
- name: api-server-kubeconfig
  configMap:
    name: {{ .Values.kubeconfigFromConfigMap.name }}
    items:
      - key: {{ .Values.kubeconfigFromConfigMap.key }}
        path: {{ .Values.kubeconfigFromConfigMap.key }}
{{- else if .Values.kubeProxyConfigMap.enabled }}
- name: kube-proxy
  configMap:
    name: {{ .Values.kubeProxyConfigMap.name }}
{{- end }}
{{- end -}}

{{/* The agent's command line (also kpr conntrack-sysctls'): kube-proxy's (kubeProxyConfigMap), kpr's config file, the API server, extraArgs. One arg per line. */}}
{{- define "kpr.agentArgs" -}}
{{- if .Values.kubeProxyConfigMap.enabled }}
{{- range .Values.kubeProxyConfigMap.args }}
- {{ . | quote }}
{{- end }}
{{- end }}
- --config=/etc/kpr/config.yaml
{{- with include "kpr.apiServerArgs" . | trim }}
{{ . }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/* Whether the conntrack-sysctls init container runs: conntrackSysctls.enabled, or when null, kubeProxyConfigMap.enabled. */}}
{{- define "kpr.conntrackSysctls" -}}
{{- $on := .Values.conntrackSysctls.enabled -}}
{{- if kindIs "invalid" $on }}{{ $on = .Values.kubeProxyConfigMap.enabled }}{{ end -}}
{{- if $on }}true{{ end -}}
{{- end -}}

{{/* AppArmor unconfined through the pod's securityContext field (Kubernetes 1.30+) rather than annotations. */}}
{{- define "kpr.appArmorField" -}}
{{- $a := .Values.appArmor -}}
{{- if and $a.unconfined (or (eq $a.mode "field") (and (eq $a.mode "auto") (semverCompare ">=1.30-0" .Capabilities.KubeVersion.Version))) -}}
true
{{- end -}}
{{- end -}}

{{/* The pod's securityContext. */}}
{{- define "kpr.podSecurityContext" -}}
{{- if include "kpr.appArmorField" . }}
appArmorProfile:
  type: Unconfined
{{- end }}
{{- end -}}

{{/* AppArmor annotations for clusters before 1.30, one per container named in .containers. */}}
{{- define "kpr.appArmorAnnotations" -}}
{{- if and .root.Values.appArmor.unconfined (not (include "kpr.appArmorField" .root)) }}
{{- range .containers }}
container.apparmor.security.beta.kubernetes.io/{{ . }}: unconfined
{{- end }}
{{- end }}
{{- end -}}

{{/*
  The pod's affinity: .Values.affinity, and with migration.enabled a required
  node affinity on the migration label, ANDed into every node selector term
  (terms are ORed, so it goes into each).
*/}}
{{- define "kpr.affinity" -}}
{{- $affinity := deepCopy (.Values.affinity | default dict) -}}
{{- if .Values.migration.enabled -}}
{{- $expr := dict "key" .Values.migration.label "operator" "In" "values" (list .Values.migration.value) -}}
{{- $node := get $affinity "nodeAffinity" | default dict -}}
{{- $required := get $node "requiredDuringSchedulingIgnoredDuringExecution" | default dict -}}
{{- $terms := list -}}
{{- range (get $required "nodeSelectorTerms" | default (list dict)) -}}
{{- $term := deepCopy . -}}
{{- $_ := set $term "matchExpressions" (append (get $term "matchExpressions" | default list) $expr) -}}
{{- $terms = append $terms $term -}}
{{- end -}}
{{- $_ := set $required "nodeSelectorTerms" $terms -}}
{{- $_ := set $node "requiredDuringSchedulingIgnoredDuringExecution" $required -}}
{{- $_ := set $affinity "nodeAffinity" $node -}}
{{- end -}}
{{- if $affinity -}}
{{ toYaml $affinity }}
{{- end -}}
{{- end -}}

{{/* Which nodes the agent runs on (and the clean-up pods, which must find the same ones). */}}
{{- define "kpr.podPlacement" -}}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with include "kpr.affinity" . | trim }}
affinity:
  {{- . | nindent 2 }}
{{- end }}
tolerations:
  {{- toYaml .Values.tolerations | nindent 2 }}
{{- end -}}

{{/* The agent DaemonSet's pod selector as a label selector string. */}}
{{- define "kpr.selectorString" -}}
{{- printf "app.kubernetes.io/name=%s,app.kubernetes.io/instance=%s" (include "kpr.name" .) .Release.Name -}}
{{- end -}}

{{/*
  The short-lived DaemonSet of the uninstall clean-up (cleanup-hook.yaml): on
  the agent's nodes, an init container runs `kpr cleanup`; the pod is ready
  (done) once it has succeeded, and then only sleeps until the DaemonSet is
  deleted.
*/}}
{{- define "kpr.cleanupDaemonSet" -}}
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ include "kpr.fullname" . }}-cleanup
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "kpr.labels" . | nindent 4 }}
    app.kubernetes.io/component: cleanup
spec:
  selector:
    matchLabels:
      {{- include "kpr.selectorLabels" . | nindent 6 }}
      app.kubernetes.io/component: cleanup
  template:
    metadata:
      labels:
        {{- include "kpr.selectorLabels" . | nindent 8 }}
        app.kubernetes.io/component: cleanup
      {{- with include "kpr.appArmorAnnotations" (dict "root" . "containers" (list "cleanup" "done")) | trim }}
      annotations:
        {{- . | nindent 8 }}
      {{- end }}
    spec:
      # No pod network needed on a node whose datapath is going.
      hostNetwork: true
      dnsPolicy: {{ .Values.dnsPolicy }}
      automountServiceAccountToken: false
      priorityClassName: {{ .Values.priorityClassName }}
      terminationGracePeriodSeconds: 1
      {{- with include "kpr.podSecurityContext" . | trim }}
      securityContext:
        {{- . | nindent 8 }}
      {{- end }}
      {{- include "kpr.podPlacement" . | trim | nindent 6 }}
      {{- with .Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      initContainers:
        - name: cleanup
          image: {{ include "kpr.image" . }}
          imagePullPolicy: {{ .Values.image.pullPolicy }}
          command: [/opt/kpr/bin/kpr, cleanup, {{ printf "--bpffs=%s" (index .Values.config "bpffs") | quote }}]
          securityContext:
            {{- include "kpr.securityContext" . | trim | nindent 12 }}
          volumeMounts:
            - name: bpffs
              mountPath: {{ .Values.hostPaths.bpffs }}
              mountPropagation: HostToContainer
      containers:
        - name: done
          image: {{ include "kpr.image" . }}
          imagePullPolicy: {{ .Values.image.pullPolicy }}
          command: [sleep, infinity]
          securityContext:
            runAsNonRoot: true
            runAsUser: 65534
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: [ALL]
          resources:
            requests:
              cpu: 1m
              memory: 8Mi
            limits:
              memory: 32Mi
      volumes:
        - name: bpffs
          hostPath:
            path: {{ .Values.hostPaths.bpffs }}
            type: DirectoryOrCreate
{{- end -}}
