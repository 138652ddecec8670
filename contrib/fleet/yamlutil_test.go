package fleet

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// splitYAML reads a multi-document YAML file.
func splitYAML(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		if strings.TrimSpace(stripComments(d)) != "" {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

func stripComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func kindOf(t *testing.T, d []byte) string {
	t.Helper()
	var tm struct {
		Kind string `json:"kind"`
	}
	if err := yaml.Unmarshal(d, &tm); err != nil {
		t.Fatalf("not YAML: %v", err)
	}
	return tm.Kind
}

func serveContainer(t *testing.T, spec corev1.PodSpec) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == "serve" {
			return c
		}
	}
	t.Fatal("no container named serve")
	return corev1.Container{}
}

// configFor is the ConfigMap entry the container's --config names.
func configFor(t *testing.T, c corev1.Container, configs map[string]string) string {
	t.Helper()
	for i, a := range c.Args {
		if a == "--config" && i+1 < len(c.Args) {
			key := c.Args[i+1][strings.LastIndex(c.Args[i+1], "/")+1:]
			cfg, ok := configs[key]
			if !ok {
				t.Fatalf("container %s: --config %s is not in the ConfigMap", c.Name, c.Args[i+1])
			}
			return cfg
		}
	}
	t.Fatalf("container %s has no --config", c.Name)
	return ""
}

func drainSeconds(t *testing.T, cfg string) (grace, term int64) {
	t.Helper()
	num := func(key string, def int64) int64 {
		m := regexp.MustCompile(`(?m)^` + key + `\s*=\s*(\d+)`).FindStringSubmatch(cfg)
		if m == nil {
			return def
		}
		n, _ := strconv.ParseInt(m[1], 10, 64)
		return n
	}
	return num("grace_seconds", 10), num("term_grace_seconds", 5)
}

func metav1TypeMeta(apiVersion, kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
}

func objectMeta(name string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Labels: labels}
}
