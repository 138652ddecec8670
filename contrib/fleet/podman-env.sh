# Sourced: a private podman setup under $FLEET_STATE (storage, run state,
# containers.conf), so nothing touches the machine's own containers. runc,
# not crun (crun refuses hosts with hybrid cgroups: v1 controllers beside a
# v2 mount); cgroupfs, not systemd; host networking for the pods' ports so
# every byte stays on this machine's loopback.
: "${FLEET_STATE:?FLEET_STATE must name a private directory}"
mkdir -p "$FLEET_STATE/storage" "$FLEET_STATE/run" "$FLEET_STATE/tmp"
export CONTAINERS_CONF="$FLEET_STATE/containers.conf"
export CONTAINERS_STORAGE_CONF="$FLEET_STATE/storage.conf"
export CONTAINERS_REGISTRIES_CONF="$FLEET_STATE/registries.conf"
export TMPDIR="$FLEET_STATE/tmp"
cat >"$CONTAINERS_CONF" <<CONF
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$FLEET_STATE/events.log"
tmp_dir = "$FLEET_STATE/run/libpod"
[containers]
# podman raises RLIMIT_NOFILE and RLIMIT_NPROC past what this process may
# (no CAP_SYS_RESOURCE here): keep them at or below its limits.
default_ulimits = ["nofile=$(ulimit -Hn):$(ulimit -Hn)", "nproc=4096:4096"]
netns = "host"
log_driver = "k8s-file"
CONF
cat >"$CONTAINERS_STORAGE_CONF" <<CONF
[storage]
driver = "vfs"
graphroot = "$FLEET_STATE/storage"
runroot = "$FLEET_STATE/run"
CONF
printf 'unqualified-search-registries = []\n' >"$CONTAINERS_REGISTRIES_CONF"
