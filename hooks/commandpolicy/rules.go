package commandpolicy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Rule actions.
const (
	// Block: denied when enforcement is "block", a warning when "warn".
	Block = "block"
	// Warn: let through and recorded.
	Warn = "warn"
)

// Rule is one named pattern of the command policy.
type Rule struct {
	Name        string `json:"name" koanf:"name" toml:"name"`
	Regex       string `json:"regex" koanf:"regex" toml:"regex"`
	Action      string `json:"action" koanf:"action" toml:"action"`
	Description string `json:"description" koanf:"description" toml:"description"`

	// spansLines marks a curated rule that may match across a newline (a
	// diskpart script); such a rule is confirmed on the whole text.
	spansLines bool
}

// Pattern fragments shared by the curated rules. The rules run on
// normalised text (see Normalize): quotes are gone, blanks are single
// spaces, and a line is one logical command line. \s in a curated rule never
// crosses a newline (see compileRule), so each rule matches within one line.
const (
	// cb: start of a command word, which may carry a directory prefix
	// (/bin/rm, C:\...\vssadmin.exe) but is not the tail of a longer word.
	cb = `(?:^|[^\w.-])`
	// ce: end of a word. A comma and a closing bracket end one too: the
	// argument lists of script one-liners (subprocess.run("rm -rf /",
	// shell=True), the quotes dropped).
	ce = `(?:$|[\s;&|)<>},\]])`
	// a: a character inside one simple command.
	a = `[^\n;&|]`
	// devDir: the /dev directory, also behind the Windows device-namespace
	// prefix (//./dev/sda, which Linux reads as /dev/sda). The normaliser has
	// already folded //dev, /dev/./ and /dev/../dev into /dev.
	devDir = `(?://[.?])?/dev/`
	// rootPath: the root directory in its spellings (/, //, /., /./, /..)
	// and a top-level glob made of wildcards only (/*, /?*, /[a-z]*), which
	// names every entry of the root.
	rootPath = `/(?:[/.*?]|\[[^\]\s]*\])*`
	// topDir: one top-level system directory itself (or all it holds).
	topDir = `/(?:bin|boot|dev|etc|home|lib|lib32|lib64|libx32|opt|proc|root|run|sbin|srv|sys|usr|var|system|library|applications|private|users)/?\*?`
	// globAll: a glob made of wildcards only (*, ./*, ?*, [a-z]*).
	globAll = `(?:\./)?(?:[*?]|\[[^\]\s]*\])+`
	// fnName: a shell function name.
	fnName = `[^\s(){}|&;<>]+`
	// firstCharRoot: ${VAR:0:1}, the first character of an absolute path.
	firstCharRoot = `\$\{\w+:0:1\}[/.*]*`
	// sysPath: top-level system directories (Linux and macOS) and anything
	// below them; the homes directory, one user's home and the home
	// directory itself, but not a project inside a home.
	sysPath = `(?:/(?:bin|boot|dev|etc|lib|lib32|lib64|libx32|opt|proc|root|run|sbin|srv|sys|usr|var|system|library|applications|private)(?:/[^\s;&|]*)?|/(?:home|users)(?:/[^\s/;&|]*)?/?\*?|~/?\*?|\$\{?home\}?/?\*?)`
	// winRemove: cmd and PowerShell deletion commands and aliases.
	winRemove = `(?:remove-item|ri|rm|rmdir|rd|del|erase)(?:\.exe)?`
	// winRecurse: /s (cmd) or -Recurse and its prefixes (PowerShell).
	winRecurse = `(?:/s|[-/]r[a-z]*)`
	// winRoot: a drive or registry hive root.
	// A lone \ is the root of the current drive; $env:SystemDrive and
	// %HOMEDRIVE% hold a drive letter (the normaliser has folded
	// ${env:SystemDrive} into $env:SystemDrive).
	winRoot = `(?:[a-z]:[\\/]?\*?(?:\.\*)?|\\\*?(?:\.\*)?|%(?:systemdrive|homedrive)%[\\/]?\*?|\$env:(?:systemdrive|homedrive)[\\/]?\*?|(?:hklm|hkcu|hkcr|hku|hkcc):[\\/]?\*?|registry::(?:hkey_[a-z_]+)[\\/]?\*?)`
	// winSysPath: Windows system locations.
	winSysPath = `(?:[a-z]:[\\/](?:windows|program files(?: \(x86\))?|programdata|boot|recovery)(?:[\\/][^\s;&|]*)?|[a-z]:[\\/]users(?:[\\/][^\s\\/;&|]*)?[\\/]?\*?|%(?:windir|systemroot|programfiles|programdata|programfiles\(x86\))%(?:[\\/][^\s;&|]*)?|\$env:(?:windir|systemroot|programfiles|programdata)(?:[\\/][^\s;&|]*)?)`
	// cmdStart: a word in command position (start of a command, or after a
	// wrapper that runs its argument), for rules whose command name is also
	// an ordinary word.
	cmdStart = `(?:^|[;&|({]\s*|(?:^|\s)(?:sudo|doas|exec|nohup|-c|/c|/k|-command)\s+)(?:\S*[/\\])?`
	credFile = `/etc/(?:passwd|shadow|gshadow|group|sudoers(?:\.d(?:/\S*)?)?)`
	hive     = `(?:hklm|hkey_local_machine|hkcu|hkey_current_user|hkcr|hkey_classes_root|hku|hkey_users|hkcc|hkey_current_config)`
	// hiveKey: nothing, or a top-level key of a hive whose loss leaves
	// Windows unbootable or the user's profile empty (with the few keys
	// below SOFTWARE and SYSTEM that hold the same).
	hiveKey = `(?:[\\/](?:software(?:[\\/](?:microsoft(?:[\\/]windows(?: nt)?(?:[\\/]currentversion)?)?|classes|wow6432node))?|system(?:[\\/](?:currentcontrolset|controlset\d+)(?:[\\/](?:services|control))?)?|sam|security|hardware|bcd00000000|components|drivers|\.default|s-1-5-[\d-]+))?`
)

// scriptRoot: the root as a script names it: a root path (quotes dropped)
// or the separator constant of python (os.sep) and node (path.sep).
var scriptRoot = `(?:` + rootPath + `|os\.sep|os\.path\.sep|path\.sep|path\.posix\.sep)`

// chRecursive: -R of chmod, chown, chgrp, chattr and setfacl (read lower
// case), alone or bundled, or --recursive and its prefixes.
var chRecursive = `(?:-[a-z]*r[a-z]*|` + longPrefixes("--recursive", 3) + `)`

// rmRecursive: rm's recursive option, alone, bundled (-rf, -Rfv) or long:
// GNU getopt takes any unambiguous prefix of --recursive (--rec, --r).
var rmRecursive = `(?:-[a-z]*r[a-z]*|` + longPrefixes("--recursive", 3) + `)`

// longPrefixes matches word or any prefix of it at least min bytes long:
// longPrefixes("--rec", 3) is --r(?:e(?:c)?)?.
func longPrefixes(word string, min int) string {
	out := regexp.QuoteMeta(word[:min])
	tail := ""
	for i := len(word) - 1; i >= min; i-- {
		tail = `(?:` + regexp.QuoteMeta(word[i:i+1]) + tail + `)?`
	}
	return out + tail
}

// blockDevNames name the block devices (disks, partitions, RAID,
// device-mapper, loop, ...) under /dev: each is completed by a drive letter
// or unit number, or is a directory of them. The harmless character devices
// (/dev/null, /dev/zero, /dev/tty, ...) share none of these spellings.
var blockDevNames = []string{"sd", "hd", "vd", "xvd", "nvme", "mmcblk", "disk", "rdisk", "md", "dm-",
	"loop", "sr", "nbd", "zd", "rbd", "bcache", "ram", "mtdblock", "root", "disk/", "block/", "mapper/", "md/"}

// blockDev matches a block device path: a named one (/dev/sda,
// /dev/nvme0n1, /dev/disk/by-id/..., /dev/block/8:0) or a shell glob that
// can expand to one (/dev/sd*, /dev/sd?, /dev/sd[a-z], /dev/nvme*, /dev/*):
// a glob character, or a brace the normaliser did not expand
// (/dev/sd{a..c}), right after /dev/ or after any prefix of a block device
// name.
var blockDev = devDir + `(?:(?:sd|hd|vd|xvd)[a-z]|(?:nvme|mmcblk|r?disk|md|dm-|loop|sr|nbd|zd|rbd|bcache|ram|mtdblock)\d|(?:disk|block|mapper|md)/|root` + ce + `|` + globPrefixes(blockDevNames) + `)`

// globPrefixes matches any prefix of one of names (the empty one included)
// followed by a shell glob character or a brace, as a trie:
// (?:[*?\[{]|s(?:[*?\[{]|d[*?\[{])|...).
func globPrefixes(names []string) string {
	type node struct {
		next map[byte]*node
	}
	root := &node{next: map[byte]*node{}}
	for _, n := range names {
		cur := root
		for i := 0; i < len(n); i++ {
			nx, ok := cur.next[n[i]]
			if !ok {
				nx = &node{next: map[byte]*node{}}
				cur.next[n[i]] = nx
			}
			cur = nx
		}
	}
	var emit func(*node) string
	emit = func(n *node) string {
		keys := make([]byte, 0, len(n.next))
		for k := range n.next {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		out := `(?:[*?\[{]`
		for _, k := range keys {
			out += `|` + regexp.QuoteMeta(string(k)) + emit(n.next[k])
		}
		return out + `)`
	}
	return emit(root)
}

// withOption matches cmd given both option opt and operand arg, in either
// order, anywhere in one simple command. Each order is a top-level
// alternative (compiled and prefiltered on its own), and arg always follows
// a blank in the same sequence, so " /" or " /etc" is a literal the
// prefilter can check before the regexp runs.
func withOption(cmd, opt, arg string) string {
	return alt(withOptionParts(cmd, opt, arg)...)
}

func withOptionParts(cmd, opt, arg string) []string {
	return []string{
		cb + cmd + `\s(?:` + a + `*\s)?` + opt + `(?:\s` + a + `*)?\s` + arg + ce,
		cb + cmd + `(?:\s` + a + `*)?\s` + arg + `\s(?:` + a + `*\s)?` + opt + ce,
	}
}

func alt(parts ...string) string { return `(?:` + strings.Join(parts, `|`) + `)` }

// DefaultRules returns the curated rule set: patterns with essentially no
// legitimate use inside a workspace (block) and risky ones worth a record
// (warn), for POSIX shells, cmd.exe and PowerShell.
func DefaultRules() []Rule {
	return []Rule{
		// ---- POSIX: block ----
		{Name: "fork-bomb", Action: Block,
			Description: "fork bomb: a function that pipes into itself in the background",
			Regex: alt(
				`:\s?\(\)\{\s*:\s*\|\s*:\s*&`,
				fnName+`\s?\(\)\{\s*`+fnName+`\s*\|\s*`+fnName+`\s*&\s*;?\s*\}`,
				// bash and ksh: function f { f | f & }
				cb+`function\s+`+fnName+`\s*(?:\(\))?\s*\{\s*`+fnName+`\s*\|\s*`+fnName+`\s*&\s*;?\s*\}`,
				`%0\s*\|\s*%0`,
				// A function that calls itself, which the normaliser also
				// spells ":" (see derivedViews), and whose body starts with a
				// call of itself piped or sent to the background:
				// a(){ a & a; }, f(){ f|f; }, f() ( f | f & ).
				`:\s?\(\)\s?[{(]\s*:\s*(?:\||&(?:[^&]|$))`,
				cb+`function\s+:\s*(?:\(\))?\s*\{\s*:\s*(?:\||&(?:[^&]|$))`,
				// fork in an endless loop, as language one-liners write it:
				// perl -e 'fork while 1', 'fork until 0', 'while(1){fork}',
				// python's 'while True: os.fork()', ruby's 'loop { fork }',
				// and a loop over os.fork() in a comprehension.
				`\bfork\b(?:\s*\(\s*\))?\s*(?:while|until)\s*\(?\s*(?:1|true|fork|!\s*0|0|false)\b`,
				`\b(?:while|until)\s*\(?\s*fork\b`,
				`\b(?:while|until)\s*\(?\s*(?:1|true|!\s*0|0|false)\s*\)?\s*(?:\{|:|;\s*do\b|do\b)?[^\n]*\bfork\b`,
				`\bfor\s*\(\s*;\s*;\s*\)[^\n]*\bfork\b`,
				`\bloop\s*(?:\{|do\b)[^\n]*\bfork\b`,
				`\bfork\b[^\n]*\bfor\s+\w+\s+in\s+(?:iter\(\s*int\s*,\s*1\s*\)|itertools\.count\(|count\()`,
			)},
		{Name: "rm-no-preserve-root", Action: Block,
			Description: "rm with --no-preserve-root: deleting the root file system",
			// Any unambiguous prefix (--no-p, --n) is the same option.
			Regex: cb + `rm\s(?:` + a + `*\s)?` + longPrefixes("--no-preserve-root", 3) + ce},
		{Name: "rm-root", Action: Block,
			Description: "recursive rm of the root directory (/, //, /., /*) or of several top-level system directories at once",
			Regex: alt(slices.Concat(
				withOptionParts(`rm`, rmRecursive, rootPath),
				withOptionParts(`rm`, rmRecursive, firstCharRoot),
				// /bin /etc /usr (what rm -rf /{bin,etc,usr} expands to):
				// the root file system piecemeal. One such directory alone is
				// rm-system-path, a warning.
				withOptionParts(`rm`, rmRecursive, topDir+`\s(?:`+a+`*\s)?`+topDir),
				// cd / (or pushd /) then a recursive rm of everything there.
				[]string{cb + `(?:cd|pushd|chdir)\s+(?:-[a-z]+\s+)*/[/.]*\s*(?:&&|;)\s*(?:sudo\s+)?rm\s(?:` + a + `*\s)?` + rmRecursive + `(?:\s` + a + `*)?\s` + globAll + ce},
			)...)},
		{Name: "xargs-rm-root", Action: Block,
			Description: "the root fed to rm through xargs (echo / | xargs rm -rf, find / | xargs rm)",
			Regex: alt(
				// A command naming the root (or every entry of it) whose
				// output a later stage of the pipeline hands to a recursive
				// rm: echo / | xargs rm -rf, ls -d /* | xargs -n1 rm -rf.
				cb+`(?:echo|printf|ls|print|realpath|readlink|dirname|pwd)\s(?:`+a+`*\s)?`+rootPath+ce+`[^\n;&]*\|\s*(?:sudo\s+)?(?:xargs|parallel)\s(?:`+a+`*\s)?rm\s(?:`+a+`*\s)?`+rmRecursive+ce,
				// find below the root lists every file: any rm deletes them.
				cb+`find\s(?:`+a+`*\s)?`+rootPath+ce+`[^\n;&]*\|\s*(?:sudo\s+)?(?:xargs|parallel)\s(?:`+a+`*\s)?rm`+ce,
				// xargs rm -rf <<< /
				cb+`xargs\s(?:`+a+`*\s)?rm\s(?:`+a+`*\s)?`+rmRecursive+`(?:\s`+a+`*)?\s?<<<\s*`+rootPath+ce,
			)},
		{Name: "find-root-delete", Action: Block,
			Description: "find from the root deleting what it finds (find / -delete, find / -exec rm)",
			Regex: alt(
				cb+`find\s(?:`+a+`*\s)?`+rootPath+`\s(?:`+a+`*\s)?-delete`+ce,
				cb+`find\s(?:`+a+`*\s)?`+rootPath+`\s(?:`+a+`*\s)?-(?:exec|execdir|ok|okdir)\s+(?:sudo\s+)?(?:rm|shred|unlink)`+ce,
			)},
		{Name: "chmod-root-recursive", Action: Block,
			Description: "recursive chmod, chown, chgrp, chattr or setfacl of the root (chmod -R 000 /)",
			// One program for both orders (unlike withOption): scripts run
			// chmod on many lines, and one unit checks " /" once per line.
			Regex: cb + `(?:chmod|chown|chgrp|chattr|setfacl)(?:\s(?:` + a + `*\s)?` + chRecursive + `(?:\s` + a + `*)?\s` + rootPath + ce +
				`|(?:\s` + a + `*)?\s` + rootPath + `\s(?:` + a + `*\s)?` + chRecursive + ce + `)`},
		{Name: "script-root-delete", Action: Block,
			Description: "a script one-liner deleting the root (shutil.rmtree(\"/\"), FileUtils.rm_rf(\"/\"), fs.rmSync(\"/\"), [\"rm\", \"-rf\", \"/\"])",
			Regex: alt(
				// The library calls that delete a tree, on the root (the
				// normaliser has dropped the quotes): python's
				// shutil.rmtree, ruby's FileUtils.rm_rf / rm_r /
				// remove_dir / remove_entry, perl's rmtree / remove_tree,
				// node's fs.rm / rmSync / rmdirSync and rimraf.
				`\b(?:rmtree|rm_rf|rm_r|remove_dir|remove_entry(?:_secure)?|remove_tree|rmsync|rmdirsync|rimraf(?:\.sync)?|(?:fs|promises|fsp|fse)\.(?:rm|rmdir|remove|removesync|emptydir|emptydirsync))(?:\s*\(\s*(?:path\s*=\s*|r)?`+scriptRoot+`\s*[,)]|\s+`+scriptRoot+`(?:$|[\s,;)}]))`,
				// rm -rf / as an argument list: subprocess.run(["rm",
				// "-rf", "/"]), system("rm", "-rf", "/"), spawn("rm", [...]).
				`[\[(]\s*rm\s*,(?:\s*\[)?(?:\s*[^,\n\])]*,)*?\s*`+rmRecursive+`\s*,(?:\s*[^,\n\])]*,)*?\s*`+rootPath+`\s*[,\])]`,
				`[\[(]\s*rm\s*,(?:\s*\[)?(?:\s*[^,\n\])]*,)*?\s*`+rootPath+`\s*,(?:\s*[^,\n\])]*,)*?\s*`+rmRecursive+`\s*[,\])]`,
			)},
		{Name: "dd-to-disk", Action: Block,
			Description: "dd writing onto a disk or partition device",
			Regex:       cb + `(?:dd|dcfldd|dc3dd)\s(?:` + a + `*\s)?of=` + blockDev},
		{Name: "copy-to-block-device", Action: Block,
			Description: "cp, install, rsync or ddrescue writing onto a disk or partition device",
			Regex: alt(
				// The last operand is the destination.
				cb+`(?:cp|install|rsync|ddrescue)\s`+a+`*\s`+blockDev+`[^\s;&|)]*\s*(?:$|[;&|)])`,
				// ddrescue's second operand is its output (a map file may
				// follow).
				cb+`ddrescue\s(?:-\S+\s+)*[^\s-]\S*\s+(?:-\S+\s+)*`+blockDev,
				// -t DEST, --target-directory=DEST, pv -o DEST.
				cb+`(?:cp|install|mv|pv)\s(?:`+a+`*\s)?(?:-t\s*|--target-directory=|-o\s*|--output=)`+blockDev,
			)},
		{Name: "partition-device", Action: Block,
			Description: "rewriting the partition table of a disk (sgdisk, sfdisk, fdisk, gdisk, cfdisk, parted)",
			Regex: alt(slices.Concat(
				// sgdisk with an option that writes (the policy reads lower
				// case, so -O, -D and -E share the letters of -o, -d, -e).
				withOptionParts(`sgdisk`, `(?:-[a-z]*[zondgrtclumhsaex][a-z]*|--(?:zap|clear|new|delete|largest-new|load-backup|replicate|mbrtogpt|gpttombr|typecode|change-name|randomize|transpose|transform|partition-guid|disk-guid|hybrid|sort|move|attributes|recompute)\S*)`, blockDev+`\S*`),
				[]string{
					// An interactive partitioner fed a script by a pipe, a
					// redirect or a here-document.
					`\|\s*(?:sudo\s+)?(?:sfdisk|fdisk|gdisk|parted)\s(?:` + a + `*\s)?` + blockDev,
					cb + `(?:sfdisk|fdisk|gdisk|parted)\s(?:` + a + `*\s)?` + blockDev + a + `*<`,
					// sfdisk's writing options, cfdisk on any disk, parted's
					// writing commands.
					cb + `sfdisk\s(?:` + a + `*\s)?(?:--delete|--wipe|-w|--append|-a|--move-data|--relocate|--part-type|--part-uuid|--part-label|--part-attrs|--change-id|--id|-n)` + ce + `(?:` + a + `*)?` + blockDev,
					cb + `sfdisk\s(?:` + a + `*\s)?` + blockDev + `\S*\s(?:` + a + `*\s)?(?:--delete|--wipe|-w|--append|-a|--move-data)` + ce,
					cb + `cfdisk\s(?:` + a + `*\s)?` + blockDev,
					cb + `parted\s(?:` + a + `*\s)?` + blockDev + `\S*\s(?:` + a + `*\s)?(?:mklabel|mktable|mkpart|mkpartfs|rm|resizepart|resize|rescue|mkfs)` + ce,
				},
			)...)},
		{Name: "mkfs-device", Action: Block,
			Description: "creating a file system on a device",
			Regex:       cb + `(?:mkfs(?:\.[\w]+)?|mke2fs|mkswap|mkdosfs|mkntfs|mkexfatfs|mkudffs|mkreiserfs|mkfs_\w+|newfs(?:_\w+)?|mkfs\.\w+)\s(?:` + a + `*\s)?` + devDir},
		{Name: "redirect-to-block-device", Action: Block,
			Description: "output redirected (or tee'd) into a disk or partition device",
			Regex:       alt(`>[>|]?\s*`+blockDev, cb+`tee\s(?:`+a+`*\s)?`+blockDev)},
		{Name: "wipe-device", Action: Block,
			Description: "wipefs, blkdiscard, shred or another erasing tool (nvme format or sanitize, hdparm --security-erase, cryptsetup luksFormat or erase, sg_format) on a device",
			Regex: alt(
				cb+`(?:wipefs|blkdiscard|shred|sg_format|sg_sanitize|scrub|wipe)\s(?:`+a+`*\s)?`+blockDev,
				cb+`nvme\s+(?:format|sanitize)\s(?:`+a+`*\s)?`+blockDev,
				cb+`hdparm\s(?:`+a+`*\s)?--(?:security-erase(?:-enhanced)?|trim-sector-ranges|write-sector|make-bad-sector)\s(?:`+a+`*\s)?`+blockDev,
				cb+`cryptsetup\s(?:`+a+`*\s)?(?:luksformat|erase|lukserase|reencrypt\s+--encrypt)\s(?:`+a+`*\s)?`+blockDev,
				cb+`cryptsetup\s(?:`+a+`*\s)?`+blockDev+`\S*\s(?:`+a+`*\s)?(?:luksformat|erase)`+ce,
			)},

		// ---- Windows: block ----
		{Name: "win-format-drive", Action: Block,
			Description: "formatting a drive (format X: or Format-Volume)",
			Regex: alt(cb+`format(?:\.com)?\s+[a-z]:(?:$|[\s\\/;&|])`, cb+`format-volume\b`,
				// Options before the drive: format /q /fs:ntfs d:.
				cmdStart+`format(?:\.com)?\s(?:/[^\s;&|]*\s+)+[a-z]:(?:$|[\s\\/;&|])`)},
		{Name: "win-root-recursive-delete", Action: Block,
			Description: "recursive delete of a drive root or registry hive root",
			Regex: alt(slices.Concat(withOptionParts(winRemove, winRecurse, winRoot),
				// PowerShell reads / as the root of the current drive too (rm -r /
				// is rm-root).
				withOptionParts(`(?:remove-item|ri|rmdir|rd|del|erase)(?:\.exe)?`, winRecurse, `/\*?`),
				// Every item of a drive or hive root piped into a deletion.
				[]string{cb + `(?:get-childitem|gci|dir|ls|childitem)(?:\s` + a + `*)?\s` + winRoot + `(?:\s` + a + `*)?\|\s*` + winRemove + `\b`})...)},
		{Name: "win-shadow-copy-delete", Action: Block,
			Description: "deleting volume shadow copies (recovery points)",
			Regex: alt(
				cb+`vssadmin(?:\.exe)?\s+(?:delete\s+shadows|resize\s+shadowstorage)`,
				cb+`wmic(?:\.exe)?\s+shadowcopy\s+delete`,
				`\bwin32_shadowcopy\b[^\n]*(?:\.delete\(|remove-(?:cim|wmi)instance|\|\s*%\s*\{)`,
				cb+`diskshadow`+a+`*delete\s+shadows`,
			)},
		{Name: "win-backup-catalog-delete", Action: Block,
			Description: "deleting the Windows backup catalog or system-state backups",
			Regex:       cb + `wbadmin(?:\.exe)?\s+delete\s+(?:catalog|systemstatebackup|backup)\b`},
		{Name: "win-raw-disk-write", Action: Block, spansLines: true,
			Description: "raw disk destruction (\\\\.\\PhysicalDrive, Clear-Disk, diskpart clean)",
			Regex: alt(
				`[\\/]{2}\.[\\/]physicaldrive\d`,
				cb+`clear-disk\b`,
				// A diskpart script that selects a disk and then cleans it:
				// on its own lines (stdin), or echoed into a pipe
				// ((echo select disk 0 & echo clean) | diskpart, 'select
				// disk 0','clean' | diskpart, "select disk 0`nclean" with
				// the backtick folded away).
				`\bselect\s+disk\s*=?\s*\d+(?:r?n|(?s:.*?)(?:\n|[;&(,]|\becho\s))\s*clean\b`,
				// A diskpart script that selects a partition or volume and
				// deletes or formats it.
				`\bselect\s+(?:partition|volume|vol|part)\s*=?\s*\w+(?:r?n|(?s:.*?)(?:\n|[;&(,]|\becho\s))\s*(?:delete\s+(?:partition|volume|part|vol)|format)\b`,
				cb+`remove-partition\b`,
			)},
		{Name: "win-encoded-command-undecoded", Action: Block,
			Description: fmt.Sprintf("PowerShell -EncodedCommand payloads past what the policy decodes (more than %d in one text, or nested more than %d deep): the hidden script cannot be checked, so it is not let through", maxDecodes, maxDecodeDepth),
			Regex:       regexp.QuoteMeta(undecodedMarker)},
		{Name: "win-bcdedit", Action: Block,
			Description: "bcdedit deleting boot entries or disabling recovery",
			Regex:       cb + `bcdedit(?:\.exe)?\s(?:` + a + `*\s)?(?:/delete\b|/set\s` + a + `*\b(?:recoveryenabled\s+(?:no|off|0|false)|bootstatuspolicy\s+ignoreallfailures))`},
		{Name: "win-reg-delete-hive", Action: Block,
			Description: "reg delete of a whole registry hive or of one of its top-level system keys (HKLM\\SOFTWARE, HKLM\\SYSTEM, ...)",
			Regex: alt(cb+`reg(?:\.exe)?\s+delete\s+`+hive+hiveKey+`\\?\s(?:`+a+`*\s)?[-/]f\b`,
				// PowerShell's registry drives and provider paths.
				withOption(`(?:remove-item|ri|rm|rmdir|rd|del|erase)`, winRecurse, `(?:(?:hklm|hkcu|hkcr|hku|hkcc):|registry::`+hive+`)`+hiveKey+`[\\/]?\*?`))},

		// ---- POSIX: warn ----
		{Name: "rm-system-path", Action: Warn,
			Description: "recursive rm of a system directory or the home directory",
			Regex:       withOption(`rm`, rmRecursive, sysPath)},
		{Name: "download-to-shell", Action: Warn,
			Description: "downloaded content piped or passed straight to a shell",
			Regex: alt(
				cb+`(?:curl|wget|fetch)\s`+a+`*\|\s*(?:sudo\s+(?:-\S+\s+)*)?(?:env\s+)?(?:(?:ba|z|da|k|fi)?sh|python[23]?|perl|ruby|node|php)\b`,
				cb+`(?:ba|z|da|k)?sh\s+(?:-\S+\s+)*<\(\s*(?:curl|wget)\b`,
				cb+`(?:ba|z|da|k)?sh\s+(?:-\S+\s+)*-c\s+\$\(\s*(?:curl|wget)\b`,
				cb+`(?:eval|source|\.)\s+\$?\(\s*(?:curl|wget)\b`,
				cb+`source\s+<\(\s*(?:curl|wget)\b`,
			)},
		{Name: "chmod-777-system-path", Action: Warn,
			Description: "world-writable permissions on the root or a system directory",
			Regex:       cb + `chmod\s(?:` + a + `*\s)?(?:0?777|a\+rwx|ugo\+rwx|o\+w)\s(?:` + a + `*\s)?(?:/|` + sysPath + `)` + ce},
		{Name: "write-credential-file", Action: Warn,
			Description: "writing /etc/passwd, /etc/shadow, /etc/group or sudoers",
			Regex: alt(`(?:>>?\s*|`+cb+`(?:tee|dd|sed\s+(?:`+a+`*\s)?-i\S*|visudo\s+-f)\s(?:`+a+`*\s)?(?:of=)?)`+credFile+ce,
				// cp and friends write their last operand only.
				cb+`(?:cp|mv|install|ln|rsync)\s`+a+`*\s`+credFile+`\s*(?:$|[;&|)])`)},
		{Name: "dev-tcp-reverse-shell", Action: Warn,
			Description: "bash /dev/tcp or /dev/udp socket (reverse shell), or netcat running a shell",
			Regex: alt(`/dev/(?:tcp|udp)/[^\s/]+/\d+`,
				cb+`(?:nc|ncat|netcat)(?:\.\w+)?\s(?:`+a+`*\s)?-(?:e|c)\s`)},
		{Name: "shutdown-reboot", Action: Warn,
			Description: "shutting down or rebooting the host",
			Regex: alt(cmdStart+`(?:shutdown|reboot|halt|poweroff)(?:\.exe)?`+ce,
				cmdStart+`init\s+[06]`+ce,
				cmdStart+`systemctl\s+(?:\S+\s+)*(?:reboot|poweroff|halt|kexec|suspend|hibernate)`+ce,
				cb+`(?:stop|restart)-computer\b`)},
		{Name: "sudo-password-input", Action: Warn,
			Description: "sudo reading a password from stdin or an askpass program, or opening a shell",
			Regex:       cb + `sudo(?:\s+(?:-[ugpcdhrt]\s+[^\s-]\S*|--\w[\w-]*=\S+|-[a-z]+))*?\s+(?:-[a-z]*[sa][a-z]*|--stdin|--askpass|--shell)` + ce},
		{Name: "authorized-keys-write", Action: Warn,
			Description: "writing an SSH authorized_keys file",
			Regex: alt(`(?:>>?\s*|`+cb+`(?:tee|dd|sed\s+(?:`+a+`*\s)?-i\S*)\s(?:`+a+`*\s)?(?:of=)?)\S*\.ssh/authorized_keys2?`+ce,
				cb+`(?:cp|mv|install|ln|rsync|scp)\s`+a+`*\s\S*\.ssh/authorized_keys2?\s*(?:$|[;&|)])`)},

		// ---- Windows: warn ----
		{Name: "win-system-recursive-delete", Action: Warn,
			Description: "recursive delete inside a Windows system location",
			Regex:       withOption(winRemove, winRecurse, winSysPath)},
		{Name: "win-encoded-command", Action: Warn,
			Description: "PowerShell -EncodedCommand (hidden script text)",
			Regex:       cb + `(?:powershell|pwsh)(?:\.exe)?\s(?:` + a + `*\s)?[-/]e(?:c|n[a-z]*)?\s+[a-z0-9+/]{4,}`},
		{Name: "win-download-cradle", Action: Warn,
			Description: "download-and-execute cradle",
			Regex: alt(
				`\b(?:iex|invoke-expression)\b`+a+`*(?:downloadstring|downloaddata|downloadfile|invoke-webrequest|\biwr\b|invoke-restmethod|\birm\b|net\.webclient|start-bitstransfer)`,
				`\b(?:downloadstring|invoke-webrequest|\biwr|invoke-restmethod|\birm)\b`+a+`*\|\s*(?:iex|invoke-expression)\b`,
				cb+`certutil(?:\.exe)?\s`+a+`*[-/]urlcache\b`,
				cb+`bitsadmin(?:\.exe)?\s`+a+`*/transfer\b`,
				cb+`mshta(?:\.exe)?\s+(?:https?|javascript|vbscript):`,
				cb+`regsvr32(?:\.exe)?\s`+a+`*/i:https?:`,
			)},
		{Name: "win-defender-disable", Action: Warn,
			Description: "disabling or excluding Microsoft Defender",
			Regex: alt(
				cb+`set-mppreference\s`+a+`*-disable\w*`,
				cb+`add-mppreference\s`+a+`*-exclusion\w*`,
				`\bdisableantispyware\b`,
				`\bdisablerealtimemonitoring\b`,
				cb+`(?:sc|net)(?:\.exe)?\s+(?:stop|delete|config)\s+windefend\b`,
			)},
		{Name: "win-firewall-disable", Action: Warn,
			Description: "turning the Windows firewall off",
			Regex: alt(
				cb+`netsh(?:\.exe)?\s+(?:advfirewall\s+set\s`+a+`*\bstate\s+off|firewall\s+set\s+opmode\s+(?:mode=)?disable)`,
				cb+`set-netfirewallprofile\s`+a+`*-enabled\s+(?:\$?false|0)\b`,
				cb+`(?:sc|net)(?:\.exe)?\s+(?:stop|config)\s+mpssvc\b`,
			)},
		{Name: "win-execution-policy", Action: Warn,
			Description: "weakening the PowerShell execution policy",
			Regex: alt(
				cb+`set-executionpolicy\s+(?:`+a+`*\s)?(?:unrestricted|bypass)\b`,
				cb+`(?:powershell|pwsh)(?:\.exe)?\s(?:`+a+`*\s)?[-/](?:ep|ex[a-z]*)\s+(?:unrestricted|bypass)\b`,
			)},
		{Name: "win-amsi-tamper", Action: Warn,
			Description: "tampering with AMSI (the anti-malware scan interface)",
			Regex:       `\b(?:amsiutils|amsiinitfailed|amsiscanbuffer|amsicontext|amsi\.dll)\b`},
		{Name: "win-event-log-clear", Action: Warn,
			Description: "clearing Windows event logs",
			Regex: alt(cb+`wevtutil(?:\.exe)?\s+(?:cl|clear-log)\b`,
				cb+`(?:clear|remove)-eventlog\b`,
				cb+`auditpol(?:\.exe)?\s`+a+`*/clear\b`)},
		{Name: "win-account-backdoor", Action: Warn,
			Description: "creating a local account or adding one to Administrators",
			Regex: alt(cb+`net(?:\.exe)?\s+user\s`+a+`*/add\b`,
				cb+`net(?:\.exe)?\s+localgroup\s+administrators\s`+a+`*/add\b`,
				cb+`net(?:\.exe)?\s+user\s+administrator\s`+a+`*/active:yes\b`,
				cb+`new-localuser\b`,
				cb+`add-localgroupmember\s`+a+`*administrators\b`)},
		{Name: "win-autostart-persistence", Action: Warn,
			Description: "autostart persistence (Run keys, Winlogon, scheduled tasks, Startup folder, services)",
			Regex: alt(`\\currentversion\\run(?:once|services)?\b`,
				`\\winlogon\\?\s*(?:/v\s+)?(?:userinit|shell)\b`,
				cb+`schtasks(?:\.exe)?\s+/create\b`,
				cb+`register-scheduledtask\b`,
				`\\start menu\\programs\\startup\b`,
				cb+`sc(?:\.exe)?\s+create\s`,
				cb+`new-service\b`)},
		{Name: "win-acl-takeover", Action: Warn,
			Description: "taking ownership or granting everyone full control",
			Regex: alt(cb+`takeown(?:\.exe)?\s`,
				cb+`icacls(?:\.exe)?\s`+a+`*/setowner\b`,
				cb+`icacls(?:\.exe)?\s`+a+`*/grant(?::r)?\s+(?:everyone|\*s-1-1-0|users|builtin\\users|authenticated users):(?:\([a-z]+\))*\(?f\)?`+ce)},
	}
}
