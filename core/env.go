package core

import (
	"sort"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

func defaultEnv(home string) map[string]string {
	return map[string]string{
		"PATH": DefaultPath, "HOME": home, "LANG": "C.UTF-8", "TERM": "dumb", "TZ": "UTC",
	}
}

func isDefaultEnvName(n string) bool {
	_, ok := defaultEnv("")[n]
	return ok
}

// buildEnv is the child's whole environment: the allowlisted defaults
// (HOME is home: the session's private HOME, or the workspace),
// Command.Env, and placeholders for secrets. Never the host's environment.
func buildEnv(home string, cmd Command) ([]driverapi.EnvVar, error) {
	m := defaultEnv(home)
	for k, v := range cmd.Env {
		m[k] = v
	}
	for k := range cmd.Secrets {
		m[k] = secretPlaceholderPrefix + k
	}
	out := make([]driverapi.EnvVar, 0, len(m))
	for k, v := range m {
		out = append(out, driverapi.EnvVar{Name: k, Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// mergeEnv adds extra, whose entries win: the mediation's proxy settings
// must not be overridden by the command.
func mergeEnv(env, extra []driverapi.EnvVar) []driverapi.EnvVar {
	idx := map[string]int{}
	for i, e := range env {
		idx[e.Name] = i
	}
	for _, e := range extra {
		if i, ok := idx[e.Name]; ok {
			env[i] = e
			continue
		}
		idx[e.Name] = len(env)
		env = append(env, e)
	}
	return env
}
