package sandboxinit

// SocketBridge confines the network bridge, the relay that runs beside a
// proxy_routed target inside its network namespace: socket() for AF_UNIX,
// AF_INET and AF_INET6 stream sockets only (the loopback listeners and the
// proxy's unix socket), Landlock TCP bind only on BridgePorts and TCP
// connect to no port at all (ABI >= 4). A bridge spec must deny spawning
// and grant nothing writable: the bridge reads no files once it runs.
const SocketBridge SocketMode = "bridge"

// validateBridge checks what SocketBridge requires of the rest of the spec.
func (s *InitSpec) validateBridge() error {
	if s.SocketMode != SocketBridge {
		return nil
	}
	switch {
	case len(s.BridgePorts) == 0:
		return &InitSpecError{"bridge_ports", "socket_mode " + string(SocketBridge) + " needs the ports to listen on"}
	case s.AllowSpawn:
		return &InitSpecError{"allow_spawn", "socket_mode " + string(SocketBridge) + " never spawns"}
	case len(s.ReadWrite) > 0:
		return &InitSpecError{"read_write", "socket_mode " + string(SocketBridge) + " writes no files"}
	}
	return nil
}
