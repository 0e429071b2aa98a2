{{/* Chart name. */}}
{{- define "failover-controller.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release-scoped prefix of every object. */}}
{{- define "failover-controller.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "failover-controller.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "failover-controller.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* Name of cluster-scoped objects: unique per release namespace. */}}
{{- define "failover-controller.clusterName" -}}
{{- printf "%s-%s" .Release.Namespace (include "failover-controller.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels. */}}
{{- define "failover-controller.selectorLabels" -}}
app.kubernetes.io/name: {{ include "failover-controller.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "failover-controller.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "failover-controller.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.extraLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Annotations of every object. */}}
{{- define "failover-controller.annotations" -}}
{{- with .Values.extraAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* ServiceAccount name. */}}
{{- define "failover-controller.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "failover-controller.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Container image: `repository@digest` when a digest is set, else `repository:tag` (the tag
defaults to the chart's appVersion). */}}
{{- define "failover-controller.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (toString (.Values.image.tag | default .Chart.AppVersion)) }}
{{- end }}
{{- end }}
