package initmain

import (
	"os"
	"testing"
)

func TestPWDRoundTrip(t *testing.T) {
	if got := PWDArg([]string{"A=1", "PWD=/w/x"}); got != "=/w/x" {
		t.Fatalf("PWDArg %q", got)
	}
	if got := PWDArg([]string{"A=1"}); got != "" {
		t.Fatalf("PWDArg without PWD %q", got)
	}
	t.Setenv("PWD", "/set/by/bwrap")
	if err := RestorePWD(""); err != nil {
		t.Fatal(err)
	}
	if _, ok := os.LookupEnv("PWD"); ok {
		t.Fatal("PWD not unset")
	}
	if err := RestorePWD("=/given"); err != nil || os.Getenv("PWD") != "/given" {
		t.Fatalf("PWD %q %v", os.Getenv("PWD"), err)
	}
	if err := RestorePWD("/no-equals"); err == nil {
		t.Fatal("malformed argument accepted")
	}
}

func TestMainRefusesBadArgv(t *testing.T) {
	for _, args := range [][]string{{"sandbox-pwd", ""}, {"sandbox-pwd", "x", "sandbox-init"}, {"other"}} {
		if code := Main(args); code != 125 {
			t.Errorf("%q: exit %d, want 125", args, code)
		}
	}
	if !IsInitMode([]string{"sandbox-init"}) || !IsInitMode([]string{"sandbox-pwd"}) || IsInitMode([]string{"serve"}) || IsInitMode(nil) {
		t.Fatal("IsInitMode")
	}
}
