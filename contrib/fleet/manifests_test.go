package fleet

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"

	extv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
)

// TestAgentSandboxManifests decodes contrib/kubernetes/agent-sandbox.yaml
// into agent-sandbox's published Go types, strictly: a field the types do
// not have (a typo, a field of another version) fails, as the API server's
// structural schema would prune or refuse it. Then it checks what the tiers
// need: the bwrap tier an unmasked /proc in its own user namespace, the
// Landlock tier the Landlock fallback, both serve's probes and a grace
// period longer than serve's drain.
func TestAgentSandboxManifests(t *testing.T) {
	docs := splitYAML(t, filepath.Join("..", "kubernetes", "agent-sandbox.yaml"))
	templates := map[string]extv1beta1.SandboxTemplate{}
	var pools []extv1beta1.SandboxWarmPool
	var configs map[string]string
	for _, d := range docs {
		kind := kindOf(t, d)
		switch kind {
		case "SandboxTemplate":
			var st extv1beta1.SandboxTemplate
			if err := yaml.UnmarshalStrict(d, &st); err != nil {
				t.Fatalf("SandboxTemplate does not match agent-sandbox's types: %v", err)
			}
			if st.APIVersion != extv1beta1.GroupVersion.String() {
				t.Errorf("SandboxTemplate %s: apiVersion %q, want %q", st.Name, st.APIVersion, extv1beta1.GroupVersion)
			}
			templates[st.Name] = st
		case "SandboxWarmPool":
			var wp extv1beta1.SandboxWarmPool
			if err := yaml.UnmarshalStrict(d, &wp); err != nil {
				t.Fatalf("SandboxWarmPool does not match agent-sandbox's types: %v", err)
			}
			pools = append(pools, wp)
		case "ConfigMap":
			var cm corev1.ConfigMap
			if err := yaml.UnmarshalStrict(d, &cm); err != nil {
				t.Fatalf("ConfigMap: %v", err)
			}
			configs = cm.Data
		default:
			t.Fatalf("unexpected kind %q in agent-sandbox.yaml", kind)
		}
	}
	if len(pools) != 1 {
		t.Fatalf("want one SandboxWarmPool, found %d", len(pools))
	}
	if _, ok := templates[pools[0].Spec.TemplateRef.Name]; !ok {
		t.Errorf("SandboxWarmPool refers to template %q, which the file does not define", pools[0].Spec.TemplateRef.Name)
	}
	bw, ok := templates["aleph-sandbox"]
	if !ok {
		t.Fatal("no bwrap-tier SandboxTemplate aleph-sandbox")
	}
	spec := bw.Spec.PodTemplate.Spec
	c := serveContainer(t, spec)
	if c.SecurityContext == nil || c.SecurityContext.ProcMount == nil || *c.SecurityContext.ProcMount != corev1.UnmaskedProcMount {
		t.Error("bwrap tier: the serve container needs procMount: Unmasked")
	}
	if spec.HostUsers == nil || *spec.HostUsers {
		t.Error("bwrap tier: an unmasked /proc needs hostUsers: false (a user namespace of the pod's own)")
	}
	checkPod(t, "aleph-sandbox", spec, configs)
	ll, ok := templates["aleph-sandbox-landlock"]
	if !ok {
		t.Fatal("no Landlock-tier SandboxTemplate aleph-sandbox-landlock")
	}
	lc := serveContainer(t, ll.Spec.PodTemplate.Spec)
	cfg := configFor(t, lc, configs)
	if !strings.Contains(cfg, `fallback = "landlock"`) {
		t.Errorf("Landlock tier: its configuration lacks fallback = \"landlock\":\n%s", cfg)
	}
	if lc.SecurityContext != nil && lc.SecurityContext.ProcMount != nil && *lc.SecurityContext.ProcMount == corev1.UnmaskedProcMount {
		t.Error("Landlock tier: needs no unmasked /proc; it should keep the restricted pod security")
	}
	checkPod(t, "aleph-sandbox-landlock", ll.Spec.PodTemplate.Spec, configs)
	// Behind agent-sandbox's router, which strips Authorization, serve
	// authenticates the router by mutual TLS alone, and only the router
	// may reach serve's port: the template's own ingress rules name the
	// router's pods and that port, or the controller's managed default
	// (ingress from the router only) applies.
	for name, st := range templates {
		cfg := configFor(t, serveContainer(t, st.Spec.PodTemplate.Spec), configs)
		if !strings.Contains(cfg, "client_ca = ") || strings.Contains(cfg, "tokens_file") {
			t.Errorf("%s: behind the router serve needs [serve.tls] client_ca and no tokens_file (the router strips Authorization):\n%s", name, cfg)
		}
		np := st.Spec.NetworkPolicy
		if np == nil {
			if st.Spec.NetworkPolicyManagement == extv1beta1.NetworkPolicyManagementUnmanaged {
				t.Errorf("%s: no NetworkPolicy at all (Unmanaged and none given): anyone in the cluster reaches serve", name)
			}
			continue
		}
		if len(np.Ingress) == 0 {
			t.Errorf("%s: a NetworkPolicy with no ingress rule lets not even the router in", name)
		}
		for _, in := range np.Ingress {
			for _, from := range in.From {
				if from.PodSelector == nil || from.PodSelector.MatchLabels["app"] != "sandbox-router" || from.IPBlock != nil || from.NamespaceSelector != nil {
					t.Errorf("%s: ingress from %+v, want the sandbox-router's pods only", name, from)
				}
			}
			if len(in.From) == 0 {
				t.Errorf("%s: an ingress rule without from admits every pod", name)
			}
			for _, port := range in.Ports {
				if port.Port == nil || port.Port.IntValue() != 7443 {
					t.Errorf("%s: ingress to port %v, want serve's 7443 only", name, port.Port)
				}
			}
		}
	}
}

// TestAgentSandboxStrictCatchesTypos is the control of the test above: the
// strict decoding it relies on does refuse a field agent-sandbox's types
// lack, and accepts the same document without it.
func TestAgentSandboxStrictCatchesTypos(t *testing.T) {
	good := []byte("apiVersion: extensions.agents.x-k8s.io/v1beta1\nkind: SandboxWarmPool\nmetadata: {name: p}\nspec:\n  replicas: 1\n  sandboxTemplateRef: {name: t}\n")
	var wp extv1beta1.SandboxWarmPool
	if err := yaml.UnmarshalStrict(good, &wp); err != nil {
		t.Fatalf("control: a valid SandboxWarmPool was refused: %v", err)
	}
	bad := bytes.Replace(good, []byte("sandboxTemplateRef"), []byte("templateRef"), 1)
	if err := yaml.UnmarshalStrict(bad, &wp); err == nil {
		t.Fatal("a SandboxWarmPool with an unknown field (templateRef) was accepted")
	}
}

// checkPod checks what every serve pod needs: probes on /readyz and
// /healthz, and a grace period that covers preStop and serve's drain.
func checkPod(t *testing.T, name string, spec corev1.PodSpec, configs map[string]string) {
	t.Helper()
	c := serveContainer(t, spec)
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("%s: readiness probe must be GET /readyz", name)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("%s: liveness probe must be GET /healthz", name)
	}
	grace, term := drainSeconds(t, configFor(t, c, configs))
	pre := int64(0)
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		pre = c.Lifecycle.PreStop.Sleep.Seconds
	}
	if spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds <= pre+grace+term {
		t.Errorf("%s: terminationGracePeriodSeconds must exceed preStop (%d) + grace_seconds (%d) + term_grace_seconds (%d)", name, pre, grace, term)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("%s: serve needs no Kubernetes API token; a sandbox must not find one", name)
	}
}

// TestSharedPoolManifests decodes contrib/kubernetes/shared-pool.yaml
// strictly into the Kubernetes types and checks the pairing of drain and
// grace period, the probes, the bwrap tier's pod security, and that the
// NetworkPolicy admits only the router to serve's port.
func TestSharedPoolManifests(t *testing.T) {
	var (
		cm  corev1.ConfigMap
		sts appsv1.StatefulSet
		svc corev1.Service
		np  networkingv1.NetworkPolicy
	)
	seen := map[string]bool{}
	for _, d := range splitYAML(t, filepath.Join("..", "kubernetes", "shared-pool.yaml")) {
		kind := kindOf(t, d)
		var into any
		switch kind {
		case "ConfigMap":
			into = &cm
		case "StatefulSet":
			into = &sts
		case "Service":
			into = &svc
		case "NetworkPolicy":
			into = &np
		default:
			t.Fatalf("unexpected kind %q", kind)
		}
		if err := yaml.UnmarshalStrict(d, into); err != nil {
			t.Fatalf("%s does not match the Kubernetes types: %v", kind, err)
		}
		seen[kind] = true
	}
	if len(seen) != 4 {
		t.Fatalf("want ConfigMap, StatefulSet, Service and NetworkPolicy, found %v", seen)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || sts.Spec.ServiceName != svc.Name {
		t.Errorf("the StatefulSet's service must be the headless Service (clusterIP None): %q, %q", svc.Spec.ClusterIP, sts.Spec.ServiceName)
	}
	spec := sts.Spec.Template.Spec
	c := serveContainer(t, spec)
	if c.SecurityContext == nil || c.SecurityContext.ProcMount == nil || *c.SecurityContext.ProcMount != corev1.UnmaskedProcMount {
		t.Error("bwrap tier: the serve container needs procMount: Unmasked")
	}
	checkPod(t, "StatefulSet", spec, cm.Data)
	if len(np.Spec.Ingress) == 0 || len(np.Spec.Ingress[0].From) == 0 || np.Spec.Ingress[0].From[0].PodSelector == nil {
		t.Fatal("NetworkPolicy: the first ingress rule must admit the router's pods")
	}
}
