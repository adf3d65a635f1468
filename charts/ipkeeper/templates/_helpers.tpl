{{/*
The objects' names are fixed (ipkeeper-controller, ipkeeper-agent, the
webhook configuration ipkeeper, ...): the flags, the admission policies'
CEL and the docs name them, and one ipkeeper serves a whole cluster (its
CRDs and webhook are cluster-wide). Install one release per cluster.
*/}}

{{/* Every namespaced object goes into the release's namespace (helm
install -n). The chart creates no Namespace: helm --create-namespace or the
administrator does, and labels it for the agent (NOTES.txt, docs/helm.md). */}}
{{- define "ipkeeper.namespace" -}}
{{- .Release.Namespace -}}
{{- end -}}

{{/* A pod template's labels and annotations: the global values, then the
component's (component: "controller" or "agent"), which win; the
app.kubernetes.io/name label wins over both (the selectors match it, and
values.schema.json refuses it in podLabels). */}}
{{- define "ipkeeper.podMetadata" -}}
{{- $v := index .root.Values .component -}}
{{- $labels := merge (dict "app.kubernetes.io/name" .name) (deepCopy ($v.podLabels | default dict)) (deepCopy (.root.Values.podLabels | default dict)) -}}
{{- $annotations := merge (deepCopy ($v.podAnnotations | default dict)) (deepCopy (.root.Values.podAnnotations | default dict)) -}}
{{- with $annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
labels:
  {{- toYaml $labels | nindent 2 }}
{{- end -}}

{{/* --log-level: the component's value, else the global one; left out
when neither is set (the binaries' default, info). */}}
{{- define "ipkeeper.logLevelArg" -}}
{{- $v := index .root.Values .component -}}
{{- with ($v.logLevel | default .root.Values.logLevel) -}}
- --log-level={{ . }}
{{- end -}}
{{- end -}}

{{/* The labels of every object; pod templates and selectors get none of Helm's. */}}
{{- define "ipkeeper.labels" -}}
app.kubernetes.io/part-of: ipkeeper
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* The image: by digest when one is set, else by tag (default: appVersion). */}}
{{- define "ipkeeper.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* Container fields shared by the controller and the agent. */}}
{{- define "ipkeeper.imageFields" -}}
image: {{ include "ipkeeper.image" . }}
{{- with .Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end -}}

{{/* The certificate modes but self-managed read a mounted Secret. */}}
{{- define "ipkeeper.providedCerts" -}}
{{- if has .Values.certificates.mode (list "cert-manager" "openshift-service-ca") -}}
true
{{- else if ne .Values.certificates.mode "self-managed" -}}
{{- fail (printf "certificates.mode %q: want self-managed, cert-manager or openshift-service-ca" .Values.certificates.mode) -}}
{{- end -}}
{{- end -}}

{{/* The TLS flags (--tls-min-version, --tls-cipher-suites,
--tls-curve-preferences, --enable-http2), only when set: one arg a line. */}}
{{- define "ipkeeper.tlsArgs" -}}
{{- $args := list -}}
{{- with .Values.tls.minVersion -}}
{{- $args = append $args (printf "- --tls-min-version=%s" .) -}}
{{- end -}}
{{- with .Values.tls.cipherSuites -}}
{{- $args = append $args (printf "- --tls-cipher-suites=%s" (join "," .)) -}}
{{- end -}}
{{- with .Values.tls.curvePreferences -}}
{{- $args = append $args (printf "- --tls-curve-preferences=%s" (join "," .)) -}}
{{- end -}}
{{- if .Values.tls.enableHTTP2 -}}
{{- $args = append $args "- --enable-http2" -}}
{{- end -}}
{{- join "\n" $args -}}
{{- end -}}

{{/* The CEL list of KubeVirt controller users for ipkeeper-launcher-identity. */}}
{{- define "ipkeeper.kubevirtControllers" -}}
{{- $users := list -}}
{{- range .Values.launcherIdentity.kubevirtControllers -}}
{{- if contains "'" . -}}
{{- fail (printf "launcherIdentity.kubevirtControllers: %q may not contain a quote" .) -}}
{{- end -}}
{{- $users = append $users (printf "'%s'" .) -}}
{{- end -}}
{{- if not $users -}}
{{- fail "launcherIdentity.kubevirtControllers may not be empty: no launcher pod could be created" -}}
{{- end -}}
[{{ join ", " $users }}]
{{- end -}}
