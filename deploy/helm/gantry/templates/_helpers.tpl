{{/* The chart's name. */}}
{{- define "gantry.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: the prefix of every object's name. */}}
{{- define "gantry.fullname" -}}
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

{{/* Labels every object has. */}}
{{- define "gantry.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gantry.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels that select every gantry pod of the release. */}}
{{- define "gantry.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gantry.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* A service's image: (dict "root" $ "service" "planner"). */}}
{{- define "gantry.image" -}}
{{- $img := .root.Values.image -}}
{{- $repo := printf "%s/%s" $img.repository .service -}}
{{- if $img.registry }}{{ $repo = printf "%s/%s" (trimSuffix "/" $img.registry) $repo }}{{ end -}}
{{- printf "%s:%s" $repo (default .root.Chart.AppVersion $img.tag) -}}
{{- end }}

{{/* The subchart's full name, as the NATS chart makes it. */}}
{{- define "gantry.natsFullname" -}}
{{- if .Values.nats.fullnameOverride }}
{{- .Values.nats.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains "nats" .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-nats" .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* The NATS URLs the services connect to: bus.url, or with nats.enabled
every server of the subchart by its stable name (so a service that loses
its server tries the others at once), else its Service. */}}
{{- define "gantry.natsURL" -}}
{{- if .Values.nats.enabled }}
{{- $name := include "gantry.natsFullname" . }}
{{- $port := int (dig "config" "nats" "port" 4222 .Values.nats) }}
{{- $cluster := dig "config" "cluster" "enabled" false .Values.nats }}
{{- if $cluster }}
{{- $urls := list }}
{{- range $i := until (int (dig "config" "cluster" "replicas" 3 .Values.nats)) }}
{{- $urls = append $urls (printf "nats://%s-%d.%s-headless.%s.svc:%d" $name $i $name $.Release.Namespace $port) }}
{{- end }}
{{- join "," $urls }}
{{- else }}
{{- printf "nats://%s.%s.svc:%d" $name .Release.Namespace $port }}
{{- end }}
{{- else }}
{{- required "bus.url is required (or nats.enabled: true)" .Values.bus.url }}
{{- end }}
{{- end }}

{{/* The file an identity connects with, as mounted: (dict "root" $ "identity" "planner"). */}}
{{- define "gantry.credentialsFile" -}}
{{- if eq .root.Values.bus.credentials.type "creds" }}/nats/{{ .identity }}.creds{{ else }}/nats/{{ .identity }}.nk{{ end }}
{{- end }}

{{/*
A service's Deployment. Parameters (a dict):
  root      the chart's context ($)
  component the object's suffix and component label (planner, executor-default)
  service   the binary and image (planner, executor, health-gate, state-store)
  cfg       its values: replicas, resources, extraArgs, extraEnv, nodeSelector, ...
  args      the service's own arguments (a list)
  ssh       whether it reaches hosts over SSH (executor, health-gate)
  pool      an executor pool's name ("" for the other services)
*/}}
{{- define "gantry.deployment" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
{{- $cfg := .cfg -}}
{{- $name := printf "%s-%s" (include "gantry.fullname" $root) .component | trunc 63 | trimSuffix "-" -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "gantry.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  replicas: {{ if hasKey $cfg "replicas" }}{{ int $cfg.replicas }}{{ else }}1{{ end }}
  selector:
    matchLabels:
      {{- include "gantry.selectorLabels" $root | nindent 6 }}
      app.kubernetes.io/component: {{ .component }}
  template:
    metadata:
      labels:
        {{- include "gantry.selectorLabels" $root | nindent 8 }}
        app.kubernetes.io/component: {{ .component }}
        gantry.dev/service: {{ .service }}
        {{- with .pool }}
        gantry.dev/executor-pool: {{ . }}
        {{- end }}
      {{- if or $v.metrics.podAnnotations $v.podAnnotations }}
      annotations:
        {{- if $v.metrics.podAnnotations }}
        prometheus.io/scrape: "true"
        prometheus.io/port: {{ $v.metrics.port | quote }}
        prometheus.io/path: /metrics
        {{- end }}
        {{- with $v.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- end }}
    spec:
      {{- with $v.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      automountServiceAccountToken: false
      {{- with $v.podSecurityContext }}
      securityContext:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      # a service drains its NATS connection on SIGTERM: work in flight settles
      terminationGracePeriodSeconds: 30
      containers:
        - name: {{ .service }}
          image: {{ include "gantry.image" (dict "root" $root "service" .service) | quote }}
          imagePullPolicy: {{ $v.image.pullPolicy }}
          {{- $args := concat (.args | default list) ($cfg.extraArgs | default list) }}
          {{- with $args }}
          args:
            {{- range . }}
            - {{ . | quote }}
            {{- end }}
          {{- end }}
          env:
            - name: NATS_URL
              value: {{ include "gantry.natsURL" $root | quote }}
            {{- if eq $v.bus.credentials.type "nkey" }}
            - name: NATS_NKEY
              value: {{ include "gantry.credentialsFile" (dict "root" $root "identity" .service) }}
            {{- else if eq $v.bus.credentials.type "creds" }}
            - name: NATS_CREDS
              value: {{ include "gantry.credentialsFile" (dict "root" $root "identity" .service) }}
            {{- end }}
            {{- if $v.bus.tls.enabled }}
            - name: NATS_CA
              value: /nats-tls/{{ $v.bus.tls.ca }}
            {{- if $v.bus.tls.cert }}
            - name: NATS_CERT
              value: /nats-tls/{{ $v.bus.tls.cert }}
            - name: NATS_KEY
              value: /nats-tls/{{ $v.bus.tls.key }}
            {{- end }}
            {{- end }}
            - name: GANTRY_REPLICAS
              value: {{ $v.bus.replicas | quote }}
            - name: GANTRY_METRICS_ADDR
              value: {{ printf ":%v" $v.metrics.port | quote }}
            {{- if .ssh }}
            - name: GANTRY_SSH_KEY
              value: /ssh/{{ $v.ssh.key }}
            - name: GANTRY_KNOWN_HOSTS
              value: /ssh/{{ $v.ssh.knownHosts }}
            {{- if $v.ssh.cert }}
            - name: GANTRY_SSH_CERT
              value: /ssh/{{ $v.ssh.cert }}
            {{- end }}
            {{- if $v.secrets.secretName }}
            - name: GANTRY_SECRETS_DIR
              value: /secrets
            {{- end }}
            {{- end }}
            {{- with $cfg.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - name: metrics
              containerPort: {{ int $v.metrics.port }}
              protocol: TCP
          {{- with $v.probes.liveness }}
          livenessProbe:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- with $v.probes.readiness }}
          readinessProbe:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- with $cfg.resources }}
          resources:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- with $v.securityContext }}
          securityContext:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          volumeMounts:
            - name: tmp
              mountPath: /tmp
            {{- if ne $v.bus.credentials.type "none" }}
            - name: nats-identity
              mountPath: /nats
              readOnly: true
            {{- end }}
            {{- if $v.bus.tls.enabled }}
            - name: nats-tls
              mountPath: /nats-tls
              readOnly: true
            {{- end }}
            {{- if .ssh }}
            - name: ssh
              mountPath: /ssh
              readOnly: true
            {{- if $v.secrets.secretName }}
            - name: secrets
              mountPath: /secrets
              readOnly: true
            {{- end }}
            {{- with $cfg.extraVolumeMounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
            {{- end }}
      volumes:
        - name: tmp
          emptyDir: {}
        {{- if ne $v.bus.credentials.type "none" }}
        # only this service's own identity
        - name: nats-identity
          secret:
            secretName: {{ $v.bus.credentials.secretName }}
            defaultMode: 0400
            items:
              - key: {{ .service }}.{{ if eq $v.bus.credentials.type "creds" }}creds{{ else }}nk{{ end }}
                path: {{ .service }}.{{ if eq $v.bus.credentials.type "creds" }}creds{{ else }}nk{{ end }}
        {{- end }}
        {{- if $v.bus.tls.enabled }}
        - name: nats-tls
          secret:
            secretName: {{ $v.bus.tls.secretName }}
            defaultMode: 0400
        {{- end }}
        {{- if .ssh }}
        - name: ssh
          secret:
            secretName: {{ $v.ssh.secretName }}
            defaultMode: 0400
        {{- if $v.secrets.secretName }}
        - name: secrets
          secret:
            secretName: {{ $v.secrets.secretName }}
            defaultMode: 0400
        {{- end }}
        {{- with $cfg.extraVolumes }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        {{- end }}
      {{- with (default $v.nodeSelector $cfg.nodeSelector) }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with (default $v.tolerations $cfg.tolerations) }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with (default $v.affinity $cfg.affinity) }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end }}
