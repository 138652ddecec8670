// Command aleph-driver-appcontainer is the Windows sandbox driver plugin:
// it serves drivers/appcontainer over the go-plugin protocol. On any other
// OS it refuses to start.
package main
