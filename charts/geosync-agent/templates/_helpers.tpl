{{- define "geosync-agent.fullname" -}}
{{- printf "%s-geosync-agent" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "geosync-agent.labels" -}}
app.kubernetes.io/name: geosync-agent
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* The agent container: used by the Deployment, and the sidecar to add to the brokers. */}}
{{- define "geosync-agent.container" -}}
name: geosync-agent
image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"
imagePullPolicy: {{ .Values.image.pullPolicy }}
command: ["python", "-m", "geosync_agent", "--config", "/etc/geosync/agent.yaml"]
ports:
  - name: metrics
    containerPort: {{ .Values.metrics.port }}
livenessProbe:
  httpGet: {path: /healthz, port: metrics}
  periodSeconds: 10
readinessProbe:
  httpGet: {path: /readyz, port: metrics}
  periodSeconds: 5
resources:
  {{- toYaml .Values.resources | nindent 2 }}
volumeMounts:
  - {name: geosync-config, mountPath: /etc/geosync, readOnly: true}
  - {name: geosync-hmac, mountPath: /var/run/secrets/geosync/hmac, readOnly: true}
  {{- if .Values.token.enabled }}
  - {name: geosync-token, mountPath: /var/run/secrets/geosync/token, readOnly: true}
  {{- end }}
{{- end -}}

{{- define "geosync-agent.volumes" -}}
- name: geosync-config
  configMap: {name: {{ include "geosync-agent.fullname" . }}}
- name: geosync-hmac
  secret: {secretName: {{ .Values.hmacKey.secretName }}, defaultMode: 0400}
{{- if .Values.token.enabled }}
- name: geosync-token
  secret: {secretName: {{ .Values.token.secretName }}, defaultMode: 0400}
{{- end }}
{{- end -}}
