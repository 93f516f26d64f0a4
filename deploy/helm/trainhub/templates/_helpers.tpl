{{/* Names and labels shared by every object of the chart. */}}

{{- define "trainhub.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "trainhub.fullname" -}}
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

{{/* NAME-SUFFIX from the full name cut short enough that the result stays a DNS label (a
Service name: at most 63), as `.suffix` would not if appended to a 63-character name. */}}
{{- define "trainhub.component" -}}
{{- printf "%s-%s" (include "trainhub.fullname" .root | trunc (int (sub 62 (len .suffix))) | trimSuffix "-") .suffix }}
{{- end }}

{{/* A value as a flag's text: numbers without an exponent (YAML numbers come as floats, and
`toString` turned a label value of 123456789012 into 1.23456789012e+11). */}}
{{- define "trainhub.scalar" -}}
{{- if kindIs "float64" . }}{{ toJson . }}{{ else }}{{ toString . }}{{ end }}
{{- end }}

{{- define "trainhub.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "trainhub.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trainhub.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "trainhub.labels" -}}
helm.sh/chart: {{ include "trainhub.chart" . }}
{{ include "trainhub.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "trainhub.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "trainhub.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "trainhub.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The Secret holding the SASL password, or "" when there is none. */}}
{{- define "trainhub.saslSecret" -}}
{{- if .Values.saslPassword.existingSecret }}
{{- .Values.saslPassword.existingSecret }}
{{- else if .Values.saslPassword.value }}
{{- printf "%s-kafka" (include "trainhub.fullname" .) }}
{{- end }}
{{- end }}

{{/* The settings file: `settings` as given, plus the TLS paths when a TLS Secret is mounted. */}}
{{- define "trainhub.settingsFile" -}}
{{- if hasKey .Values.settings "sasl_password" }}
{{- fail "settings.sasl_password would land in a ConfigMap: use saslPassword.value or saslPassword.existingSecret" }}
{{- end }}
{{- $_ := required "settings.bootstrap is required: the Kafka bootstrap servers HOST:PORT" .Values.settings.bootstrap }}
{{- $settings := dict }}
{{- range $key, $value := .Values.settings }}
{{- if not (kindIs "invalid" $value) }}
{{- $_ := set $settings $key $value }}
{{- end }}
{{- end }}
{{- /* Always written: the Services, ports and probes use this port too. */}}
{{- $_ := set $settings "metrics_port" (include "trainhub.metricsPort" . | int) }}
{{- if .Values.tls.existingSecret }}
{{- $_ := set $settings "ssl_cafile" "/etc/trainhub/tls/ca.crt" }}
{{- if .Values.tls.clientCertificate }}
{{- $_ := set $settings "ssl_certfile" "/etc/trainhub/tls/tls.crt" }}
{{- $_ := set $settings "ssl_keyfile" "/etc/trainhub/tls/tls.key" }}
{{- end }}
{{- end }}
{{- toYaml $settings }}
{{- end }}

{{/* Environment, volumes and mounts every trainhub container has. */}}
{{- define "trainhub.env" -}}
- name: TRAINHUB_CONFIG
  value: /etc/trainhub/config/trainhub.yaml
{{- $secret := include "trainhub.saslSecret" . }}
{{- if $secret }}
- name: TRAINHUB_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ .Values.saslPassword.key }}
{{- end }}
{{- end }}

{{- define "trainhub.volumeMounts" -}}
- name: config
  mountPath: /etc/trainhub/config
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- if .Values.tls.existingSecret }}
- name: tls
  mountPath: /etc/trainhub/tls
  readOnly: true
{{- end }}
{{- end }}

{{- define "trainhub.volumes" -}}
- name: config
  configMap:
    name: {{ include "trainhub.fullname" . }}-config
- name: tmp
  emptyDir: {}
{{- if .Values.tls.existingSecret }}
- name: tls
  secret:
    secretName: {{ .Values.tls.existingSecret }}
{{- end }}
{{- end }}

{{- define "trainhub.metricsPort" -}}
{{- .Values.settings.metrics_port | default 9095 }}
{{- end }}

{{/* Fails on extra arguments that would contradict what the chart set up around them. */}}
{{- define "trainhub.checkExtraArgs" -}}
{{- range .args }}
{{- if regexMatch "^--metrics-port(=|$)" (toString .) }}
{{- fail (printf "%s: --metrics-port would move the port away from the Services and probes; set settings.metrics_port instead" $.where) }}
{{- end }}
{{- if regexMatch "^--sasl-password(=|$)" (toString .) }}
{{- fail (printf "%s: --sasl-password would show in the Deployment's arguments; use saslPassword (a Secret) instead" $.where) }}
{{- end }}
{{- end }}
{{- end }}

{{/* Annotations that roll the pods when their settings or the chart's Kafka Secret change. */}}
{{- define "trainhub.checksums" -}}
checksum/config: {{ include "trainhub.settingsFile" . | sha256sum }}
{{- if and .Values.saslPassword.value (not .Values.saslPassword.existingSecret) }}
checksum/secret: {{ .Values.saslPassword.value | sha256sum }}
{{- end }}
{{- end }}
