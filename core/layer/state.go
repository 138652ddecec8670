package layer

// stateVersion is the version of the state file this code writes.
const stateVersion = 1

// state is the layer's StateFile.
type state struct {
	Version   int    `json:"version"`
	Workspace string `json:"workspace"`
	// Dev and Ino identify the workspace directory: Apply refuses to
	// write into another directory that took its path.
	Dev    uint64  `json:"dev"`
	Ino    uint64  `json:"ino"`
	Git    GitBase `json:"git"`
	Policy Policy  `json:"policy"`
	// Base maps a workspace-relative path to the host's entry there when
	// Observe first saw the session's entry: what a conflict is judged
	// against.
	Base map[string]Base `json:"base,omitempty"`
}

// Base is the host's entry at one path, as Observe recorded it.
type Base struct {
	Exists  bool   `json:"exists"`
	Type    string `json:"type,omitempty"`
	Mode    uint32 `json:"mode,omitempty"`
	Size    int64  `json:"size,omitempty"`
	MtimeNs int64  `json:"mtime_ns,omitempty"`
	CtimeNs int64  `json:"ctime_ns,omitempty"`
	Ino     uint64 `json:"ino,omitempty"`
	// Hash is the SHA-256 of a regular file's content (hex), when it is
	// no larger than Policy.HashBytes.
	Hash string `json:"sha256,omitempty"`
	// Target is a symlink's target.
	Target string `json:"target,omitempty"`
	// Tree lists a directory's entries (relative to it) when the session
	// deleted or replaced the directory: deleting it is judged against
	// all of them. TreeIncomplete: there were more than
	// Policy.MaxTreeEntries, so the deletion is always a conflict.
	Tree           []TreeEntry `json:"tree,omitempty"`
	TreeIncomplete bool        `json:"tree_incomplete,omitempty"`
	// Listed: Tree was taken (an empty directory has an empty Tree).
	Listed bool `json:"listed,omitempty"`
}

// TreeEntry is one entry below a recorded directory.
type TreeEntry struct {
	Path    string `json:"path"`
	Type    string `json:"type"`
	Mode    uint32 `json:"mode"`
	Size    int64  `json:"size,omitempty"`
	MtimeNs int64  `json:"mtime_ns"`
	CtimeNs int64  `json:"ctime_ns"`
	Ino     uint64 `json:"ino"`
}

// Layer is a layered workspace's host side: the directory holding its
// upper layer, overlayfs's work directory and its state.
type Layer struct {
	dir string
	git GitImporter
	st  state
	// hook, when set (tests only), runs at named points of Apply so a test
	// can change the host between a check and a write.
	hook func(stage, path string)
}

// Dir is the layer's directory.
func (l *Layer) Dir() string { return l.dir }

// Workspace is the host directory the layer lies over.
func (l *Layer) Workspace() string { return l.st.Workspace }

// GitBase is what the git importer's Snapshot recorded at Create.
func (l *Layer) GitBase() GitBase { return l.st.Git }

// MountSpec is the overlay to mount for this layer (see MountSpec).
func (l *Layer) MountSpec() MountSpec {
	return MountSpec{Lower: l.st.Workspace, Upper: l.dir + "/" + UpperDir, Work: l.dir + "/" + WorkDir, UserNS: l.st.Policy.UserNS}
}
