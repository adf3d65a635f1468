// SPDX-License-Identifier: Apache-2.0

package chart

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/ipkeeper/ipkeeper/internal/tlsconfig"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// rendered is one helm template output, with typed views of what the
// value tests look at.
type rendered struct {
	objs       []object
	controller appsv1.Deployment
	agent      appsv1.DaemonSet
}

func render(t *testing.T, args ...string) *rendered {
	t.Helper()
	return newRendered(t, helmTemplate(t, args...))
}

func newRendered(t *testing.T, objs []object) *rendered {
	t.Helper()
	r := &rendered{objs: objs}
	r.decode(t, "Deployment", "ipkeeper-controller", &r.controller)
	r.decode(t, "DaemonSet", "ipkeeper-agent", &r.agent)
	return r
}

// find returns the objects of kind (named name, when given).
func (r *rendered) find(kind, name string) []object {
	var out []object
	for _, o := range r.objs {
		if str(o, "kind") == kind && (name == "" || str(o, "metadata", "name") == name) {
			out = append(out, o)
		}
	}
	return out
}

// decode decodes the one object of kind and name into into.
func (r *rendered) decode(t *testing.T, kind, name string, into any) {
	t.Helper()
	found := r.find(kind, name)
	if len(found) != 1 {
		t.Fatalf("want one %s %s, the chart renders %d", kind, name, len(found))
	}
	b, err := json.Marshal(found[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, into); err != nil {
		t.Fatalf("decoding %s %s: %v", kind, name, err)
	}
}

func (r *rendered) controllerArgs() []string {
	return r.controller.Spec.Template.Spec.Containers[0].Args
}
func (r *rendered) agentArgs() []string { return r.agent.Spec.Template.Spec.Containers[0].Args }

func hasArg(args []string, want string) bool { return slices.Contains(args, want) }

// argNamed is the first argument --name=..., "" when none.
func argNamed(args []string, name string) string {
	for _, a := range args {
		if strings.HasPrefix(a, "--"+name+"=") {
			return a
		}
	}
	return ""
}

// TestChartValues renders each value away from its default and checks
// that it lands where docs/helm.md says, and nowhere else.
func TestChartValues(t *testing.T) {
	setup(t)
	digest := "sha256:" + strings.Repeat("ab", 32)
	tests := []struct {
		name  string
		args  []string
		check func(t *testing.T, r *rendered)
	}{
		{
			name: "image tag and pull policy",
			args: []string{"--set", "image.repository=registry.example.org/ipk", "--set", "image.tag=v9.9.9", "--set", "image.pullPolicy=Always",
				"--set", "imagePullSecrets[0].name=regcred"},
			check: func(t *testing.T, r *rendered) {
				for _, spec := range []corev1.PodSpec{r.controller.Spec.Template.Spec, r.agent.Spec.Template.Spec} {
					c := spec.Containers[0]
					if c.Image != "registry.example.org/ipk:v9.9.9" || c.ImagePullPolicy != corev1.PullAlways {
						t.Errorf("container %s: image %q pull policy %q", c.Name, c.Image, c.ImagePullPolicy)
					}
					if len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != "regcred" {
						t.Errorf("container %s: imagePullSecrets %v", c.Name, spec.ImagePullSecrets)
					}
				}
			},
		},
		{
			name: "image digest wins over the tag",
			args: []string{"--set", "image.tag=v9.9.9", "--set", "image.digest=" + digest},
			check: func(t *testing.T, r *rendered) {
				for _, c := range []corev1.Container{r.controller.Spec.Template.Spec.Containers[0], r.agent.Spec.Template.Spec.Containers[0]} {
					if c.Image != "ghcr.io/ipkeeper/ipkeeper@"+digest {
						t.Errorf("container %s: image %q, want the digest", c.Name, c.Image)
					}
				}
			},
		},
		{
			name: "release namespace",
			args: []string{"--namespace", "ipk", "--set", "certificates.mode=cert-manager", "--set", "networkPolicy.enabled=true",
				"--set", "openshift.scc.enabled=true", "--set", "monitoring.serviceMonitor.enabled=true"},
			check: func(t *testing.T, r *rendered) {
				for _, o := range r.objs {
					b, _ := json.Marshal(o)
					if strings.Contains(string(b), "ipkeeper-system") {
						t.Errorf("%s still names ipkeeper-system", key(o))
					}
					if !slices.Contains(clusterScoped, str(o, "kind")) && str(o, "metadata", "namespace") != "ipk" {
						t.Errorf("%s is not in namespace ipk", key(o))
					}
				}
				if ns := r.find("Namespace", ""); len(ns) != 0 {
					t.Errorf("the chart renders %d Namespaces; the release's namespace is helm's or the administrator's", len(ns))
				}
				for _, want := range []struct{ policy, user string }{
					{"ipkeeper-agent-node-bound", "system:serviceaccount:ipk:ipkeeper-agent"},
					{"ipkeeper-controller-claim-status", "system:serviceaccount:ipk:ipkeeper-controller"},
					{"ipkeeper-controller-secrets", "system:serviceaccount:ipk:ipkeeper-controller"},
				} {
					if cond := str(r.find("ValidatingAdmissionPolicy", want.policy)[0], "spec", "matchConditions", "0", "expression"); !strings.Contains(cond, "'"+want.user+"'") {
						t.Errorf("policy %s matches %q, want the user %s", want.policy, cond, want.user)
					}
				}
				// Outside its own namespace only: the webhook certificate's Secret is in it.
				if cond := str(r.find("ValidatingAdmissionPolicy", "ipkeeper-controller-secrets")[0], "spec", "matchConditions", "1", "expression"); cond != "request.namespace != 'ipk'" {
					t.Errorf("policy ipkeeper-controller-secrets excludes %q, want namespace ipk", cond)
				}
				whc := r.find("MutatingWebhookConfiguration", "ipkeeper")[0]
				if got := str(whc, "webhooks", "0", "clientConfig", "service", "namespace"); got != "ipk" {
					t.Errorf("webhook service namespace %q", got)
				}
				if got := str(whc, "metadata", "annotations", "cert-manager.io/inject-ca-from"); got != "ipk/ipkeeper-webhook" {
					t.Errorf("inject-ca-from %q", got)
				}
				cert := r.find("Certificate", "ipkeeper-webhook")[0]
				if got := str(cert, "spec", "dnsNames", "0"); got != "ipkeeper-webhook.ipk.svc" {
					t.Errorf("certificate DNS name %q", got)
				}
				for _, sa := range []string{"ipkeeper-agent", "ipkeeper-controller"} {
					var crb rbacv1.ClusterRoleBinding
					r.decode(t, "ClusterRoleBinding", sa, &crb)
					if len(crb.Subjects) != 1 || crb.Subjects[0].Namespace != "ipk" {
						t.Errorf("ClusterRoleBinding %s subjects %+v, want the ServiceAccount in ipk", sa, crb.Subjects)
					}
				}
				if got := sccsOf(t, r, "ipkeeper-agent"); !slices.Equal(got, []string{"privileged"}) {
					t.Errorf("in namespace ipk the agent may use SCCs %v", got)
				}
			},
		},
		{
			name: "pod annotations and labels",
			args: []string{"--set", "podAnnotations.team=net", "--set", "podAnnotations.both=global", "--set", "podLabels.tier=infra", "--set", "podLabels.both=global",
				"--set", "controller.podAnnotations.both=controller", "--set", "controller.podLabels.both=controller",
				"--set", "agent.podAnnotations.agent-only=yes", "--set", "agent.podLabels.both=agent"},
			check: func(t *testing.T, r *rendered) {
				for _, tc := range []struct {
					name                     string
					meta                     map[string]string
					annotations              map[string]string
					wantLabels, wantAnnotate map[string]string
				}{
					{"controller", r.controller.Spec.Template.Labels, r.controller.Spec.Template.Annotations,
						map[string]string{"app.kubernetes.io/name": "ipkeeper-controller", "tier": "infra", "both": "controller"},
						map[string]string{"team": "net", "both": "controller"}},
					{"agent", r.agent.Spec.Template.Labels, r.agent.Spec.Template.Annotations,
						map[string]string{"app.kubernetes.io/name": "ipkeeper-agent", "tier": "infra", "both": "agent"},
						map[string]string{"team": "net", "both": "global", "agent-only": "yes"}},
				} {
					if !maps.Equal(tc.meta, tc.wantLabels) {
						t.Errorf("%s pod labels %v, want %v", tc.name, tc.meta, tc.wantLabels)
					}
					if !maps.Equal(tc.annotations, tc.wantAnnotate) {
						t.Errorf("%s pod annotations %v, want %v", tc.name, tc.annotations, tc.wantAnnotate)
					}
				}
				// The selectors still match only the chart's own label.
				if sel := r.agent.Spec.Selector.MatchLabels; !maps.Equal(sel, map[string]string{"app.kubernetes.io/name": "ipkeeper-agent"}) {
					t.Errorf("agent selector %v", sel)
				}
			},
		},
		{
			name: "no pod annotations by default",
			check: func(t *testing.T, r *rendered) {
				if a := r.controller.Spec.Template.Annotations; len(a) != 0 {
					t.Errorf("controller pod annotations %v", a)
				}
				if a := r.agent.Spec.Template.Annotations; len(a) != 0 {
					t.Errorf("agent pod annotations %v", a)
				}
				if argNamed(r.controllerArgs(), "log-level") != "" || argNamed(r.agentArgs(), "log-level") != "" {
					t.Errorf("the default passes --log-level: controller %v, agent %v", r.controllerArgs(), r.agentArgs())
				}
			},
		},
		{
			name: "log level for both",
			args: []string{"--set", "logLevel=warn"},
			check: func(t *testing.T, r *rendered) {
				if !hasArg(r.controllerArgs(), "--log-level=warn") || !hasArg(r.agentArgs(), "--log-level=warn") {
					t.Errorf("logLevel=warn: controller %v, agent %v", r.controllerArgs(), r.agentArgs())
				}
			},
		},
		{
			name: "log level per component",
			args: []string{"--set", "logLevel=error", "--set", "controller.logLevel=debug"},
			check: func(t *testing.T, r *rendered) {
				if got := argNamed(r.controllerArgs(), "log-level"); got != "--log-level=debug" {
					t.Errorf("controller %q, want --log-level=debug", got)
				}
				if got := argNamed(r.agentArgs(), "log-level"); got != "--log-level=error" {
					t.Errorf("agent %q, want --log-level=error (the global value)", got)
				}
			},
		},
		{
			name: "placement",
			args: []string{
				"--set", "controller.replicas=3",
				"--set", "controller.nodeSelector.role=infra", "--set", "controller.tolerations[0].key=infra", "--set", "controller.tolerations[0].operator=Exists",
				"--set", "controller.priorityClassName=ctrl-prio", "--set-json", `controller.affinity={"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"c","operator":"Exists"}]}]}}}`,
				"--set", "agent.nodeSelector.kubernetes\\.io/os=linux", "--set-json", `agent.tolerations=[{"key":"a","operator":"Exists"}]`,
				"--set", "agent.priorityClassName=agent-prio", "--set-json", `agent.affinity={"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"a","operator":"Exists"}]}]}}}`,
				"--set", "controller.resources.limits.memory=1Gi", "--set", "agent.resources.requests.cpu=1",
			},
			check: func(t *testing.T, r *rendered) {
				c, a := r.controller.Spec.Template.Spec, r.agent.Spec.Template.Spec
				if *r.controller.Spec.Replicas != 3 {
					t.Errorf("replicas %d", *r.controller.Spec.Replicas)
				}
				if c.NodeSelector["role"] != "infra" || len(c.Tolerations) != 1 || c.Tolerations[0].Key != "infra" || c.PriorityClassName != "ctrl-prio" {
					t.Errorf("controller placement: nodeSelector %v tolerations %v priority %q", c.NodeSelector, c.Tolerations, c.PriorityClassName)
				}
				// Affinity merges with the default anti-affinity (Helm merges maps).
				if c.Affinity == nil || c.Affinity.NodeAffinity == nil || c.Affinity.PodAntiAffinity == nil {
					t.Errorf("controller affinity %+v: want the node affinity added to the default anti-affinity", c.Affinity)
				}
				if a.NodeSelector["kubernetes.io/os"] != "linux" || len(a.Tolerations) != 1 || a.Tolerations[0].Key != "a" || a.PriorityClassName != "agent-prio" ||
					a.Affinity == nil || a.Affinity.NodeAffinity == nil {
					t.Errorf("agent placement: nodeSelector %v tolerations %v priority %q affinity %+v", a.NodeSelector, a.Tolerations, a.PriorityClassName, a.Affinity)
				}
				if got := c.Containers[0].Resources.Limits.Memory().String(); got != "1Gi" {
					t.Errorf("controller memory limit %s", got)
				}
				if got := a.Containers[0].Resources.Requests.Cpu().String(); got != "1" {
					t.Errorf("agent cpu request %s", got)
				}
			},
		},
		{
			name: "controller affinity removed",
			args: []string{"--set", "controller.affinity=null"},
			check: func(t *testing.T, r *rendered) {
				if aff := r.controller.Spec.Template.Spec.Affinity; aff != nil {
					t.Errorf("controller.affinity=null renders %+v", aff)
				}
			},
		},
		{
			name: "CNI bin dir",
			args: []string{"--set", "cni.binDir=/var/lib/cni/bin"},
			check: func(t *testing.T, r *rendered) {
				if p := hostPath(r.agent.Spec.Template.Spec, "cni-bin"); p != "/var/lib/cni/bin" {
					t.Errorf("cni-bin host path %q", p)
				}
				// The path inside the container does not move.
				if !hasArg(r.agentArgs(), "--cni-bin-dir=/host/opt/cni/bin") {
					t.Errorf("agent args %v", r.agentArgs())
				}
			},
		},
		{
			name: "controller and agent flags",
			args: []string{"--set", "controller.claimsController=ipkeeper", "--set", "controller.requireKubeVirtFeatureGate=false",
				"--set", "agent.multusDefaultNetworks=1", "--set", "controller.extraArgs[0]=--gc-grace-period=5m", "--set", "agent.extraArgs[0]=--log-level=debug"},
			check: func(t *testing.T, r *rendered) {
				ca, aa := r.controllerArgs(), r.agentArgs()
				for _, want := range []string{"--claims-controller=ipkeeper", "--require-kubevirt-feature-gate=false"} {
					if !hasArg(ca, want) {
						t.Errorf("controller args %v lack %s", ca, want)
					}
				}
				if !hasArg(aa, "--multus-default-networks=1") {
					t.Errorf("agent args %v lack --multus-default-networks=1", aa)
				}
				if ca[len(ca)-1] != "--gc-grace-period=5m" || aa[len(aa)-1] != "--log-level=debug" {
					t.Errorf("extraArgs must come last (a later flag wins): controller %v, agent %v", ca, aa)
				}
			},
		},
		{
			name: "multus default networks zero",
			args: []string{"--set", "agent.multusDefaultNetworks=0"},
			check: func(t *testing.T, r *rendered) {
				if !hasArg(r.agentArgs(), "--multus-default-networks=0") {
					t.Errorf("agent args %v lack --multus-default-networks=0", r.agentArgs())
				}
			},
		},
		{
			name: "TLS",
			args: []string{"--set", "tls.minVersion=VersionTLS12", "--set", "tls.cipherSuites={TLS_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}",
				"--set", "tls.curvePreferences={X25519,CurveP256}", "--set", "tls.enableHTTP2=true"},
			check: func(t *testing.T, r *rendered) {
				for name, args := range map[string][]string{"controller": r.controllerArgs(), "agent": r.agentArgs()} {
					for _, want := range []string{"--tls-min-version=VersionTLS12", "--tls-cipher-suites=TLS_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
						"--tls-curve-preferences=X25519,CurveP256", "--enable-http2"} {
						if !hasArg(args, want) {
							t.Errorf("%s args %v lack %s", name, args, want)
						}
					}
				}
			},
		},
		{
			name: "launcher identity",
			args: []string{"--set", "launcherIdentity.kubevirtControllers={system:serviceaccount:kubevirt:kubevirt-controller,system:serviceaccount:openshift-cnv:kubevirt-controller}"},
			check: func(t *testing.T, r *rendered) {
				p := r.find("ValidatingAdmissionPolicy", "ipkeeper-launcher-identity")[0]
				want := "['system:serviceaccount:kubevirt:kubevirt-controller', 'system:serviceaccount:openshift-cnv:kubevirt-controller']"
				if got := policyVariable(p, "kubevirtControllers"); got != want {
					t.Errorf("kubevirtControllers %q, want %q", got, want)
				}
			},
		},
		{
			name: "OpenShift SCCs",
			args: []string{"--set", "openshift.scc.enabled=true", "--set", "openshift.scc.agent=ipkeeper-agent-scc"},
			check: func(t *testing.T, r *rendered) {
				if got := sccsOf(t, r, "ipkeeper-agent"); !slices.Equal(got, []string{"ipkeeper-agent-scc"}) {
					t.Errorf("the agent may use SCCs %v", got)
				}
				if got := sccsOf(t, r, "ipkeeper-controller"); !slices.Equal(got, []string{"nonroot-v2"}) {
					t.Errorf("the controller may use SCCs %v", got)
				}
			},
		},
		{
			name: "network policy",
			args: []string{"--set", "networkPolicy.enabled=true", "--set-json", `networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"name":"monitoring"}}}]`},
			check: func(t *testing.T, r *rendered) {
				var np networkingv1.NetworkPolicy
				r.decode(t, "NetworkPolicy", "ipkeeper-controller", &np)
				if np.Namespace != namespace || np.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"] != "ipkeeper-controller" ||
					!slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || len(np.Spec.Ingress) != 2 {
					t.Fatalf("NetworkPolicy %+v", np.Spec)
				}
				webhook, metrics := np.Spec.Ingress[0], np.Spec.Ingress[1]
				if webhook.Ports[0].Port.String() != "webhook" || len(webhook.From) != 0 {
					t.Errorf("webhook rule %+v: want the webhook port from anywhere", webhook)
				}
				if metrics.Ports[0].Port.String() != "metrics" || len(metrics.From) != 1 || metrics.From[0].NamespaceSelector.MatchLabels["name"] != "monitoring" {
					t.Errorf("metrics rule %+v", metrics)
				}
				// The named ports exist on the controller's container.
				for _, port := range []string{"webhook", "metrics"} {
					if !slices.ContainsFunc(r.controller.Spec.Template.Spec.Containers[0].Ports, func(p corev1.ContainerPort) bool { return p.Name == port }) {
						t.Errorf("the controller has no port named %s", port)
					}
				}
			},
		},
		{
			name: "monitoring",
			args: []string{"--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.prometheusRule.enabled=true",
				"--set", "monitoring.runbookURLTemplate=https://runbooks.example.org/ipkeeper/%s.html",
				"--set", "monitoring.serviceMonitor.prometheusServiceAccount.namespace=openshift-monitoring"},
			check: func(t *testing.T, r *rendered) {
				if n := len(r.find("ServiceMonitor", "")); n != 2 {
					t.Errorf("%d ServiceMonitors, want the controller's and the agent's", n)
				}
				rules := r.find("PrometheusRule", "ipkeeper")
				if len(rules) != 1 {
					t.Fatalf("%d PrometheusRules named ipkeeper", len(rules))
				}
				alerts := 0
				groups, _ := get(rules[0], "spec", "groups").([]any)
				for _, g := range groups {
					rs, _ := get(g, "rules").([]any)
					for _, rule := range rs {
						alert := str(rule.(map[string]any), "alert")
						if alert == "" {
							continue
						}
						alerts++
						if got, want := str(rule.(map[string]any), "annotations", "runbook_url"), "https://runbooks.example.org/ipkeeper/"+alert+".html"; got != want {
							t.Errorf("alert %s: runbook_url %q, want %q", alert, got, want)
						}
					}
				}
				if alerts < 5 {
					t.Errorf("the PrometheusRule has %d alerts", alerts)
				}
				var rb rbacv1.RoleBinding
				r.decode(t, "RoleBinding", "ipkeeper-prometheus", &rb)
				if len(rb.Subjects) != 1 || rb.Subjects[0].Namespace != "openshift-monitoring" || rb.Subjects[0].Name != "prometheus-k8s" {
					t.Errorf("Prometheus' RoleBinding subjects %+v", rb.Subjects)
				}
			},
		},
		{
			name: "monitoring without Prometheus' Role",
			args: []string{"--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.serviceMonitor.prometheusServiceAccount.name="},
			check: func(t *testing.T, r *rendered) {
				if n := len(r.find("Role", "ipkeeper-prometheus")) + len(r.find("RoleBinding", "ipkeeper-prometheus")); n != 0 {
					t.Errorf("an empty prometheusServiceAccount.name renders %d Prometheus RBAC objects", n)
				}
				if n := len(r.find("PrometheusRule", "")); n != 0 {
					t.Errorf("monitoring.prometheusRule.enabled=false renders %d PrometheusRules", n)
				}
			},
		},
		{
			name: "network policy off by default",
			check: func(t *testing.T, r *rendered) {
				if np := r.find("NetworkPolicy", ""); len(np) != 0 {
					t.Errorf("the default renders %d NetworkPolicies", len(np))
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, render(t, tc.args...))
		})
	}
}

func hostPath(spec corev1.PodSpec, volume string) string {
	for _, v := range spec.Volumes {
		if v.Name == volume && v.HostPath != nil {
			return v.HostPath.Path
		}
	}
	return ""
}

// policyVariable is the expression of a ValidatingAdmissionPolicy's variable.
func policyVariable(p object, name string) string {
	vars, _ := get(p, "spec", "variables").([]any)
	for _, v := range vars {
		if m, ok := v.(map[string]any); ok && m["name"] == name {
			s, _ := m["expression"].(string)
			return s
		}
	}
	return ""
}

// sccsOf lists the SecurityContextConstraints the ServiceAccount sa may
// use by the rendered Roles and RoleBindings, and checks that nothing
// else is granted through them.
func sccsOf(t *testing.T, r *rendered, sa string) []string {
	t.Helper()
	var sccs []string
	for _, o := range r.find("RoleBinding", "") {
		var rb rbacv1.RoleBinding
		b, _ := json.Marshal(o)
		if err := json.Unmarshal(b, &rb); err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(rb.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == "ServiceAccount" && s.Name == sa && s.Namespace == rb.Namespace
		}) {
			continue
		}
		var role rbacv1.Role
		r.decode(t, "Role", rb.RoleRef.Name, &role)
		for _, rule := range role.Rules {
			if !slices.Equal(rule.APIGroups, []string{"security.openshift.io"}) {
				continue
			}
			if !slices.Equal(rule.Resources, []string{"securitycontextconstraints"}) || !slices.Equal(rule.Verbs, []string{"use"}) || len(rule.ResourceNames) == 0 {
				t.Errorf("Role %s grants %+v: want only use of named SCCs", role.Name, rule)
			}
			sccs = append(sccs, rule.ResourceNames...)
		}
	}
	return sccs
}

// TestChartLint runs helm lint --strict with each certificate mode, the
// OpenShift values, and every optional object on.
func TestChartLint(t *testing.T) {
	setup(t)
	for name, args := range map[string][]string{
		"default":              nil,
		"cert-manager":         {"--set", "certificates.mode=cert-manager"},
		"openshift-service-ca": {"--set", "certificates.mode=openshift-service-ca"},
		"values-openshift":     {"-f", filepath.Join(chartDir(), "values-openshift.yaml")},
		"everything on": {"--set", "networkPolicy.enabled=true", "--set", "monitoring.serviceMonitor.enabled=true",
			"--set", "monitoring.prometheusRule.enabled=true", "--set", "openshift.scc.enabled=true", "--set", "tls.minVersion=1.3"},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := framework.Helm(context.Background(), tools, "", append([]string{"lint", "--strict", "--kube-version", kubeVersion, chartDir()}, args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(out), "0 chart(s) failed") {
				t.Fatalf("helm lint:\n%s", out)
			}
		})
	}
}

// TestChartRefusesInvalidValues: a wrong value fails at render time,
// naming the value, rather than installing something that does not run.
func TestChartRefusesInvalidValues(t *testing.T) {
	setup(t)
	tests := []struct {
		name    string
		args    []string
		message string
	}{
		{"certificate mode", []string{"--set", "certificates.mode=vault"}, "certificates.mode"},
		{"claims controller", []string{"--set", "controller.claimsController=kubevirt"}, "claimsController"},
		{"misspelt value", []string{"--set", "controler.replicas=3"}, "controler"},
		{"digest", []string{"--set", "image.digest=latest"}, "digest"},
		{"relative CNI bin dir", []string{"--set", "cni.binDir=opt/cni/bin"}, "binDir"},
		{"no KubeVirt controller", []string{"--set", "launcherIdentity.kubevirtControllers=null"}, "kubevirtControllers"},
		{"a quote in a CEL string", []string{"--set", "launcherIdentity.kubevirtControllers[0]=a'b"}, "kubevirtControllers"},
		{"extra argument without --", []string{"--set", "agent.extraArgs[0]=log-level=debug"}, "extraArgs"},
		{"unknown log level", []string{"--set", "agent.logLevel=verbose"}, "logLevel"},
		{"the selector's label", []string{"--set", "controller.podLabels.app\\.kubernetes\\.io/name=x"}, "podLabels"},
		{"runbook URL without %s", []string{"--set", "monitoring.runbookURLTemplate=https://example.org/runbooks"}, "runbookURLTemplate"},
		// The binaries would refuse these and exit on every node.
		{"TLS 1.1", []string{"--set", "tls.minVersion=1.1"}, "minVersion"},
		{"an insecure cipher suite", []string{"--set", "tls.cipherSuites[0]=TLS_RSA_WITH_AES_128_GCM_SHA256"}, "cipherSuites"},
		{"TLS 1.1 in component-base's name", []string{"--set", "tls.minVersion=VersionTLS11"}, "minVersion"},
		{"an unknown curve", []string{"--set", "tls.curvePreferences[0]=P-224"}, "curvePreferences"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := helmTemplateErr(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("helm template %v: got %v, want an error naming %s", tc.args, err, tc.message)
			}
		})
	}
}

// TestChartFlagsExistInBinaries renders the chart with every value that
// adds a flag and checks each flag against the flags the built binaries
// define (their -help): the chart must not pass a flag a binary stops at.
func TestChartFlagsExistInBinaries(t *testing.T) {
	setup(t)
	dir := t.TempDir()
	bins, err := framework.BuildBinaries(context.Background(), root, dir)
	if err != nil {
		t.Fatal(err)
	}
	r := render(t, "--set", "controller.claimsController=external", "--set", "controller.requireKubeVirtFeatureGate=false",
		"--set", "agent.multusDefaultNetworks=1", "--set", "tls.minVersion=1.3", "--set", "tls.cipherSuites={TLS_AES_128_GCM_SHA256}",
		"--set", "tls.curvePreferences={X25519}", "--set", "tls.enableHTTP2=true", "--set", "logLevel=warn")
	provided := render(t, "--set", "certificates.mode=openshift-service-ca")
	for _, tc := range []struct {
		binary string
		args   []string
	}{
		{bins.Controller, append(r.controllerArgs(), provided.controllerArgs()...)},
		{bins.Agent, r.agentArgs()},
	} {
		known := definedFlags(t, tc.binary)
		for _, a := range tc.args {
			name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			if !known[name] {
				t.Errorf("the chart passes %s to %s, which has no flag %s", a, filepath.Base(tc.binary), name)
			}
		}
	}
}

var flagLine = regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)

// definedFlags runs binary -help and returns the flags it lists.
func definedFlags(t *testing.T, binary string) map[string]bool {
	t.Helper()
	// -help exits 0 or 2, as each binary handles flag.ErrHelp: the list is what counts.
	out, _ := exec.Command(binary, "-help").CombinedOutput()
	known := map[string]bool{}
	for _, m := range flagLine.FindAllStringSubmatch(string(out), -1) {
		known[m[1]] = true
	}
	if len(known) < 5 {
		t.Fatalf("%s -help lists %d flags:\n%s", binary, len(known), out)
	}
	return known
}

// TestChartCipherSuitesAreTheBinariesOnes: the schema's cipher suites are
// exactly the ones the binaries accept (crypto/tls's secure suites), and
// its curves exactly the names --tls-curve-preferences takes, so a value
// helm accepts never stops a binary, and none it accepts is refused; every
// minimum version it allows parses.
func TestChartCipherSuitesAreTheBinariesOnes(t *testing.T) {
	setup(t)
	data, err := os.ReadFile(filepath.Join(chartDir(), "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			TLS struct {
				Properties struct {
					MinVersion struct {
						Enum []string `json:"enum"`
					} `json:"minVersion"`
					CipherSuites struct {
						Items struct {
							Enum []string `json:"enum"`
						} `json:"items"`
					} `json:"cipherSuites"`
					CurvePreferences struct {
						Items struct {
							Enum []string `json:"enum"`
						} `json:"items"`
					} `json:"curvePreferences"`
				} `json:"properties"`
			} `json:"tls"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, c := range tls.CipherSuites() {
		want = append(want, c.Name)
	}
	got := schema.Properties.TLS.Properties.CipherSuites.Items.Enum
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("values.schema.json tls.cipherSuites allows %v; the binaries accept %v", got, want)
	}
	for _, name := range got {
		if _, err := tlsconfig.ParseCipherSuites("--tls-cipher-suites", name); err != nil {
			t.Errorf("the schema allows %s, the binaries refuse it: %v", name, err)
		}
	}
	tlsSchema := schema.Properties.TLS.Properties
	if curves := slices.Sorted(slices.Values(tlsSchema.CurvePreferences.Items.Enum)); !slices.Equal(curves, tlsconfig.CurveNames()) {
		t.Errorf("values.schema.json tls.curvePreferences allows %v; the binaries accept %v", curves, tlsconfig.CurveNames())
	}
	for _, v := range tlsSchema.MinVersion.Enum {
		if _, err := tlsconfig.ParseVersion(tlsconfig.FlagMinVersion, v); v != "" && err != nil {
			t.Errorf("the schema allows tls.minVersion %q, the binaries refuse it: %v", v, err)
		}
	}
}
