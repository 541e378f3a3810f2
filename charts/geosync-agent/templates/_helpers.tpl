{{- define "geosync-agent.fullname" -}}
{{- printf "%s-geosync-agent" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "geosync-agent.labels" -}}
app.kubernetes.io/name: geosync-agent
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* REGISTRY/NAME:TAG, for NAME agent or broker-plugins: both images from image.registry at one tag (default:
the chart's appVersion, the version scripts/build-images.sh tags). Called with (list $ "agent"). */}}
{{- define "geosync-agent.image" -}}
{{- $root := index . 0 -}}
{{- if $root.Values.image.repository -}}
{{- fail "image.repository is no longer read: set image.registry (agent and broker-plugins both come from it)" -}}
{{- end -}}
{{- $tag := $root.Values.image.tag | default $root.Chart.AppVersion -}}
{{- printf "%s/%s:%s" (trimSuffix "/" $root.Values.image.registry) (index . 1) $tag -}}
{{- end -}}

{{/* The agent container: used by the Deployment, and the sidecar to add to the brokers. A sidecar has no
readiness probe: the kubelet counts a pod Ready only while all its containers are, so an agent that cannot
sync (its region's calls failing, a peer down) would take its healthy broker out of service. A sidecar's
sync health is in its metrics (geosync_agent_ready) and alerts (GeoSyncAgentNotReady). The liveness probe
stays in both modes: /healthz fails only when the agent itself is stuck or gave up, and a restart then
restarts the agent's container alone. */}}
{{- define "geosync-agent.container" -}}
name: geosync-agent
image: {{ include "geosync-agent.image" (list . "agent") | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
command: ["python", "-m", "geosync_agent", "--config", "/etc/geosync/agent.yaml"]
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
ports:
  - name: metrics
    containerPort: {{ .Values.metrics.port }}
livenessProbe:
  httpGet: {path: /healthz, port: metrics}
  periodSeconds: 10
  # Slow answers on a busy node are not a stuck agent: the agent ends itself when a loop is stuck.
  timeoutSeconds: 5
{{- if ne .Values.mode "sidecar" }}
readinessProbe:
  httpGet: {path: /readyz, port: metrics}
  periodSeconds: 5
{{- end }}
resources:
  {{- toYaml .Values.resources | nindent 2 }}
{{- if and (eq .Values.mode "sidecar") .Values.sidecar.shardByOwnership .Values.sidecar.brokerId }}
env:
  # Kubernetes expands $(POD_IP) and $(POD_NAME) in GEOSYNC_BROKER_ID from the two before it.
  - name: POD_IP
    valueFrom: {fieldRef: {fieldPath: status.podIP}}
  - name: POD_NAME
    valueFrom: {fieldRef: {fieldPath: metadata.name}}
  - name: GEOSYNC_BROKER_ID
    value: {{ .Values.sidecar.brokerId | quote }}
{{- end }}
volumeMounts:
  - {name: geosync-config, mountPath: /etc/geosync, readOnly: true}
  {{- if .Values.agent.state.enabled }}
  - {name: geosync-state, mountPath: /var/lib/geosync}
  {{- end }}
  - {name: geosync-signing, mountPath: /var/run/secrets/geosync/signing, readOnly: true}
  {{- if .Values.token.enabled }}
  - {name: geosync-token, mountPath: /var/run/secrets/geosync/token, readOnly: true}
  {{- end }}
  {{- if .Values.zookeeperAuth.enabled }}
  - {name: geosync-zookeeper, mountPath: /var/run/secrets/geosync/zookeeper, readOnly: true}
  {{- end }}
{{- end -}}

{{- define "geosync-agent.volumes" -}}
- name: geosync-config
  configMap: {name: {{ include "geosync-agent.fullname" . }}}
{{- if .Values.agent.state.enabled }}
- name: geosync-state
  {{- if .Values.agent.state.existingClaim }}
  persistentVolumeClaim: {claimName: {{ .Values.agent.state.existingClaim }}}
  {{- else }}
  emptyDir: {sizeLimit: {{ .Values.agent.state.sizeLimit }}}
  {{- end }}
{{- end }}
- name: geosync-signing
  secret: {secretName: {{ .Values.signing.secretName }}, defaultMode: 0400}
{{- if .Values.token.enabled }}
- name: geosync-token
  secret: {secretName: {{ .Values.token.secretName }}, defaultMode: 0400}
{{- end }}
{{- if .Values.zookeeperAuth.enabled }}
- name: geosync-zookeeper
  secret: {secretName: {{ .Values.zookeeperAuth.secretName }}, defaultMode: 0400}
{{- end }}
{{- end -}}


{{/* The brokers' init container: copies the plugin NAR into the volume the broker loads plugins from. */}}
{{- define "geosync-agent.pluginsInitContainer" -}}
name: geosync-plugins
image: {{ include "geosync-agent.image" (list . "broker-plugins") | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
args: [{{ .Values.plugins.directory | quote }}]
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
resources:
  {{- toYaml .Values.plugins.resources | nindent 2 }}
volumeMounts:
  - {name: geosync-plugins, mountPath: {{ .Values.plugins.directory | quote }}}
{{- end -}}

{{/* broker.conf keys that load the plugins from that directory (as the lab's geosync_lab.plugins sets them),
as broker.configData entries: the Pulsar image adds a key broker.conf lacks only when it is prefixed
PULSAR_PREFIX_. */}}
{{- define "geosync-agent.pluginsBrokerConfig" -}}
brokerInterceptors: geosync
brokerInterceptorsDirectory: {{ .Values.plugins.directory | quote }}
entryFilterNames: geosync
entryFiltersDirectory: {{ .Values.plugins.directory | quote }}
allowOverrideEntryFilters: "false"
{{- if eq .Values.mode "sidecar" }}
PULSAR_PREFIX_geosyncAllowCursorWrites: "true"
{{- end }}
{{- with .Values.plugins.adminRoles }}
PULSAR_PREFIX_geosyncAdminRoles: {{ . | quote }}
{{- end }}
{{- with .Values.plugins.replicatorMaxBackoffSeconds }}
PULSAR_PREFIX_brokerClient_maxBackoffIntervalNanos: {{ mul (int .) 1000000000 | toString | quote }}
{{- end }}
# the entry filter hides a snapshot marker only if it verifies against the regions' public keys (append to
# PULSAR_EXTRA_OPTS if your broker values already set it)
PULSAR_EXTRA_OPTS: "-Dgeosync.keyringFile={{ .Values.plugins.keyringDirectory }}/keyring.yaml"
{{- end -}}

{{- define "geosync-agent.failoverProviderLabels" -}}
app.kubernetes.io/name: geosync-failover-provider
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}
