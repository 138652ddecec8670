package core

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// exportedNames are core's exported top-level identifiers (types,
// functions, constants, variables; methods are not counted). Each is here
// because something outside core uses it (the assembly, the front ends,
// pluginhost, core/wsfs, their tests) or because an embedder needs it to
// use what is (the types of Config's fields and their values, the reason
// codes and decisions of an AuditRecord and a DeniedError, the typed
// errors and sentinels a caller branches on, what an exported function
// returns). The list is checked against the source by
// TestExportedNamesAreListed, so that an export is a decision, not a
// default.
var exportedNames = []string{
	"ApprovalRequester", "AuditFailClosed", "AuditFailOpen", "AuditRecord", "AuditSink", "AuditUsage",
	"BaselinePresets",
	"Command", "Config", "ConfigError", "Covered",
	"DataDir", "Decision", "DecisionAllow", "DecisionDeny", "DecisionError", "DefaultConfig", "DefaultPath",
	"DefaultProcessConfig", "DeniedError", "DriverError", "DriverName", "DriverNotFoundError",
	"EnvPrefix", "ErrAuditUnavailable", "ErrClosed", "ErrDisabled", "ErrHookHung", "ErrLayeredMode", "ErrLayeredUnavailable",
	"ErrNoLayer", "ErrProcessEnded", "ErrSessionForgotten", "ErrSignalBeforeStart", "ErrSignalEnded", "ErrStdinClosed",
	"Executor",
	"FailureReason", "FileAudit", "FileGrantStore",
	"GitQuarantine", "Grant", "GrantNotFoundError", "GrantStore",
	"HomeSession", "HomeWorkspace", "HomesDirName", "HookError", "HookPluginError",
	"InvalidCommandError",
	"JSONLinesSink",
	"LayerLimitKey", "LayeredModeError", "LayeredUnavailableError", "LayersDirName", "LimitError", "LimitOf",
	"LoadConfig", "LoadOption",
	"MaxTimeout", "Mediation", "MediationError",
	"NetworkAudit", "NetworkConfig", "NetworkMediator", "NewFileGrantStore", "NewPipeline", "NewProcessTable", "NewStdinPipe",
	"NewWorkspaceSandbox", "NoLayerError",
	"OpenJSONLinesSink", "OpenSessionLayer", "Option", "Output",
	"ParseProcessConfig", "PlantedGitAllow", "PlantedGitQuarantine", "ProcessConfig", "ProcessConfigOf",
	"ProcessDenied", "ProcessError", "ProcessInfo", "ProcessKilled", "ProcessLimitError", "ProcessLimits",
	"ProcessNotFoundError", "ProcessOK", "ProcessRead", "ProcessResult", "ProcessSchema", "ProcessStats",
	"ProcessTable", "ProcessTimedOut", "ProtectedConfig",
	"Reach", "ReasonAllowed", "ReasonApprovalDenied", "ReasonApprovalGranted", "ReasonApprovalGrantedOnce",
	"ReasonApprovalTimeout", "ReasonAuditUnavailable", "ReasonCanceled", "ReasonClosed", "ReasonCode",
	"ReasonConfigInvalid", "ReasonCwdOutsideWorkspace", "ReasonDisabled", "ReasonDriverFailed",
	"ReasonDriverNotFound", "ReasonFileAccess", "ReasonFileFailed", "ReasonFileRefused", "ReasonGrantApplied",
	"ReasonGrantCached", "ReasonGrantRevoked", "ReasonGrantStale", "ReasonHookDenied", "ReasonHookFailed",
	"ReasonHookWarned", "ReasonInvalidCommand", "ReasonMediationFailed", "ReasonNetworkAllowed",
	"ReasonNetworkDenied", "ReasonResourceExhausted", "ReasonSecretRequiresMediation", "ReasonSessionExpired",
	"ReasonSignalBeforeStart", "ReasonSignalEnded", "ReasonSpawnRefused", "ReasonTimeout", "ReasonUnenforceable",
	"ReasonWorkspaceFailed", "RecordedSessions", "RemoveSessionHome", "RemoveSessionRecord",
	"RemoveSessionWorkspace", "RequiredFeatures",
	"Sandbox", "SandboxConfig", "SecretInjection", "Section", "SectionKey", "ServeConfig", "ServeLimits",
	"ServeTLSConfig", "SessionConfig", "SessionDirName", "SessionFrom", "SessionGrants", "SessionKeptError",
	"SessionLastUsed", "SessionSandboxesAuto",
	"SessionSandboxesOff", "SessionView", "SessionsDirName", "ShippedBackend", "SpawnRefusedHint", "StaleGrantError",
	"StdinPipe", "StoredGrants", "Summary",
	"UsageOf",
	"ValidConfig", "ValidateCommand", "ValidateNodeID", "ValidateSessionID",
	"WithApprovalRequester", "WithAuditSink", "WithBaseline", "WithDriver", "WithGrantStore", "WithHooks",
	"WithLogger", "WithNetworkMediator", "WithProtectedPaths", "WithSection", "WithSession", "WorkspaceError",
	"WorkspaceSandbox",
}

// exportedDecls are the exported top-level identifiers of core's non-test
// files, for every OS (build tags are not applied: an export in a
// Windows-only file is as public as any), each with whether it carries a
// doc comment.
func exportedDecls(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	names := map[string]bool{}
	add := func(id *ast.Ident, docs ...*ast.CommentGroup) {
		if !id.IsExported() {
			return
		}
		documented := false
		for _, d := range docs {
			documented = documented || (d != nil && strings.TrimSpace(d.Text()) != "")
		}
		names[id.Name] = names[id.Name] || documented
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					add(d.Name, d.Doc)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						add(s.Name, d.Doc, s.Doc, s.Comment)
					case *ast.ValueSpec:
						for _, n := range s.Names {
							add(n, d.Doc, s.Doc, s.Comment)
						}
					}
				}
			}
		}
	}
	return names
}

// Every exported name of core is in exportedNames and documented, and
// every listed name still exists: a new export fails here until it is
// decided on, and a name unexported or removed fails until the list
// forgets it.
func TestExportedNamesAreListed(t *testing.T) {
	got := exportedDecls(t)
	if len(got) < 50 {
		// A positive control of the parse: core exports far more than this.
		t.Fatalf("found only %d exported names: the source was not read", len(got))
	}
	for name, documented := range got {
		if !slices.Contains(exportedNames, name) {
			t.Errorf("core exports %s, which exportedNames (exports_test.go) does not list: if nothing outside core uses it, unexport it (lower-case its first letter); if the assembly, a front end or an embedder needs it, add it to exportedNames", name)
		}
		if !documented {
			t.Errorf("core exports %s without a doc comment: say what it is for an embedder", name)
		}
	}
	for _, name := range exportedNames {
		if _, ok := got[name]; !ok {
			t.Errorf("exportedNames lists %s, which core no longer exports: remove it from the list", name)
		}
	}
	if !slices.IsSorted(exportedNames) {
		t.Errorf("exportedNames is not sorted: keep it sorted, so that a name is found and added in one place")
	}
}
