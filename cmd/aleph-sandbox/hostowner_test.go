package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// fakeService is a stand-in for a service of another user's making: it
// listens on path, says "ready", and prints whatever its first client
// sends within a moment (TestHostOfAnotherUidIsNotSentTheCommand).
func fakeService(path string) {
	l, err := net.Listen("unix", path)
	if err != nil {
		fmt.Println("listen:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	_ = l.(*net.UnixListener).SetDeadline(time.Now().Add(10 * time.Second))
	c, err := l.Accept()
	if err != nil {
		fmt.Println("accept:", err)
		os.Exit(1)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	b, _ := io.ReadAll(io.LimitReader(c, 64<<10))
	fmt.Printf("got %q\n", b)
	os.Exit(0)
}
