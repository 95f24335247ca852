#!/usr/bin/env bash
# The libvirt suite: virtio-cuda under a real libvirtd, as an operator runs it.
#
#  1. Installs Debian's libvirt (libvirt-daemon-system, libvirt-clients, no
#     recommends; a no-op when they are there) and starts virtlogd and
#     libvirtd by hand (no systemd here) with the stock qemu.conf: QEMU gets
#     libvirt's default sandbox, -sandbox on,...,spawn=deny.
#  2. Starts build/qemu/bin/vcu-daemon as root with its socket open to QEMU's
#     user (--socket-group libvirt-qemu), workers jailed (the default), on
#     the CPU stand-in for libcuda (build/fakecuda/libcuda.so.1).
#  3. Defines a domain made from docs/libvirt/virtio-cuda-domain.xml (which
#     first passes virt-xml-validate) and starts it: the guest is the CUDA
#     suite's test kernel and initramfs (tests/vm/run.sh builds them), and
#     runs that suite against the daemon.
#  4. Checks the QEMU command line libvirt wrote to its log (-sandbox with
#     spawn=deny), QEMU's seccomp mode (2) and user (libvirt-qemu), that the
#     workers are the daemon's children in a pid namespace of their own and
#     QEMU has none, every guest test, and that the domain shuts off; then
#     undefines it and stops the daemons it started (the packages stay).
#  5. virsh save and virsh restore of a second domain whose guest runs the
#     migrate suite (tests/many's checker, each round's results checked):
#     saved while the checker runs, restored on the same daemon, the
#     checker must go on and end with no wrong result.
#  6. virsh migrate --live of a third such domain to "host B": a second
#     libvirtd in mount and UTS namespaces of its own (another hostname and
#     host UUID, its own /etc/libvirt, /run/libvirt, /var/lib/libvirt/qemu,
#     virtlogd) with a vcu-daemon of its own; the checker must go on there
#     with no wrong result.
#
# What the domain changes in the example: its name; TCG (type='qemu', cpu
# 'maximum': no KVM here); 3 GiB and 2 vCPUs; the emulator and firmware are
# a copy of build/qemu, qboot instead of SeaBIOS (35 s faster under TCG);
# the test kernel, initramfs and command line instead of the disk; a serial
# file instead of the pty console; no network (libvirt's default network
# needs dnsmasq); on_reboot destroy (a guest panic ends the run); no USB
# controller; the daemon's socket path.  QEMU runs as libvirt-qemu: it gets
# copies (a checkout under /root is out of its reach, and libvirt's DAC
# driver chowns <kernel> and <initrd> while the domain runs).
#
# Define probes the new emulator: 2 s, but about 40 s on a host whose
# /dev/kvm only root may open: libvirt 9.0's probe (with CAP_DAC_OVERRIDE)
# finds KVM, its own check as libvirt-qemu does not, so it takes its cache
# for stale and probes again at each look-up.
#
# Fails fast, with the reason and the log tails, when virtlogd, libvirtd,
# the daemon or the domain does not come up.  Logs: build/pkg-libvirt.
# Environment: VCU_LIBVIRT_VM_TIMEOUT=S seconds for the guest [420];
# VCU_LIBVIRT_SAVE_SECS=S the saved guest's checker's seconds [40].
# Last line: N passed, N failed.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
root=$PWD
work=$root/build/pkg-libvirt
xml=docs/libvirt/virtio-cuda-domain.xml
dom=vcu-libvirt-test
dom2=vcu-libvirt-save
dom3=vcu-libvirt-mig
save_secs=${VCU_LIBVIRT_SAVE_SECS:-40}
# The migrated guest's checker: long enough for rounds after the move
# (the whole migration takes about 30 s under TCG, most of it the RAM).
mig_secs=${VCU_LIBVIRT_MIG_SECS:-90}
# What QEMU reads (libvirt-qemu must reach it) and the daemon's run folder.
scratch=/var/lib/libvirt/vcu-test
run=/run/vcu-libvirt-test
vm_timeout=${VCU_LIBVIRT_VM_TIMEOUT:-420}
conn=qemu:///system
passed=0
failed=0
t_start=$(date +%s)

ok() { echo "PASS $*"; passed=$((passed + 1)); }
bad() { echo "FAIL $*"; failed=$((failed + 1)); }
note() { echo "libvirt: $* ($(($(date +%s) - t_start)) s)"; }
vsh() { timeout 120 virsh -q -c "$conn" "$@"; }

# Prints the last lines of a log, titled.
tail_of() {
    [ -s "$2" ] || return 0
    echo "--- $1 ($2) ---"
    tail -n "${3:-30}" "$2"
}

# A process started from a pid file: its pid when it runs and is PROG.
running_pid() {
    local pid
    pid=$(cat "$1" 2>/dev/null) || return 1
    [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] && echo "$pid"
}

VCU_ROOT=$root
. tests/vm/daemon.sh
our_virtlogd=
our_libvirtd=
defined=no
defined2=no
defined3=no
qpid=
locked=no

# Ends what this run started: the domain, the daemons, the scratch folders.
cleanup_done=no
cleanup() {
    local pid i
    [ $cleanup_done = no ] || return 0
    cleanup_done=yes
    if [ $defined = yes ]; then
        [ "$(vsh domstate "$dom" 2>/dev/null)" = "shut off" ] || vsh destroy "$dom" >/dev/null 2>&1
        vsh undefine "$dom" >"$work/undefine.log" 2>&1 || cat "$work/undefine.log"
    fi
    if [ $defined2 = yes ]; then
        [ "$(vsh domstate "$dom2" 2>/dev/null)" = "shut off" ] || vsh destroy "$dom2" >/dev/null 2>&1
        vsh undefine "$dom2" >"$work/undefine2.log" 2>&1 || cat "$work/undefine2.log"
    fi
    if [ $defined3 = yes ]; then
        [ "$(vsh domstate "$dom3" 2>/dev/null)" = "shut off" ] || vsh destroy "$dom3" >/dev/null 2>&1
        vsh undefine "$dom3" >"$work/undefine3.log" 2>&1 || cat "$work/undefine3.log"
    fi
    declare -F stop_host_b >/dev/null && stop_host_b
    vcu_daemon_stop
    [ -n "${VCU_DAEMON_LOG:-}" ] && cp "$VCU_DAEMON_LOG" "$work/daemon.log" 2>/dev/null
    for pid in $our_libvirtd $our_virtlogd; do
        kill "$pid" 2>/dev/null
        for i in $(seq 1 150); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    done
    # Without the lock they may be another run's.
    [ $locked = no ] || rm -rf "$scratch" "$run"
}
trap cleanup EXIT
trap 'echo "libvirt: stopped by a signal"; cleanup; echo "$passed passed, $((failed + 1)) failed"; exit 1' TERM INT

# Ends the run at a step that did not come up: what is left is not tried.
give_up() {
    note "giving up: $*"
    cleanup
    echo "$passed passed, $failed failed"
    exit 1
}

rm -rf "$work"
mkdir -p "$work"

# One run of this suite on the host at a time: the domain name, the run
# folder and the daemons are the host's.  The lock's fd is closed for
# everything that outlives a step.
mkdir -p /run/lock
exec 9>/run/lock/vcu-libvirt-test.lock
if ! flock -w 300 9; then
    bad "this run gets /run/lock/vcu-libvirt-test.lock (another libvirt suite held it for 300 s)"
    give_up "the host's libvirt is busy"
fi
locked=yes

# ---- the guest and the host programs ---------------------------------------
note "building the CUDA suite's guest (tests/vm/run.sh, VCU_VM_BUILD_ONLY=1)"
if ! VCU_VM_BUILD_ONLY=1 tests/vm/run.sh cuda >"$work/build.log" 2>&1 9>&- ||
    ! VCU_VM_BUILD_ONLY=1 tests/vm/run.sh migrate >>"$work/build.log" 2>&1 9>&-; then
    bad "the CUDA and migrate suites' guest kernel and initramfs are built"
    tail_of "tests/vm/run.sh" "$work/build.log" 40
    give_up "no guest"
fi
. build/vm/guest.env
kernel=$root/build/vm/vmlinuz-$VCU_GUEST_KVER
initrd=$root/build/vm/initrd-cuda.img
fake=$root/build/fakecuda/libcuda.so.1
for f in "$kernel" "$initrd" "$fake" build/qemu/bin/qemu-system-x86_64 build/qemu/bin/vcu-daemon \
    build/qemu/libexec/vcu-worker build/qemu/share/qboot.rom; do
    [ -f "$f" ] || { bad "$f is built (make all)"; give_up "no $f"; }
done

# ---- 1. libvirt -------------------------------------------------------------
note "apt-get install libvirt-daemon-system libvirt-clients"
apt_install() {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        -o DPkg::Lock::Timeout=300 libvirt-daemon-system libvirt-clients
}
# Stale package lists (a removed version) are the one failure an update
# mends.
if apt_install >"$work/apt.log" 2>&1 9>&- ||
    { apt-get update -q -o DPkg::Lock::Timeout=300 >>"$work/apt.log" 2>&1 9>&- &&
        apt_install >>"$work/apt.log" 2>&1 9>&-; }; then
    ok "libvirt installed ($(dpkg-query -W -f='libvirt-daemon-system ${Version}' libvirt-daemon-system))"
else
    bad "apt-get install libvirt-daemon-system libvirt-clients"
    tail_of apt-get "$work/apt.log"
    give_up "no libvirt"
fi
qemu_uid=$(id -u libvirt-qemu 2>/dev/null) ||
    { bad "the install made the user libvirt-qemu"; give_up "no user libvirt-qemu"; }

# The example validates against libvirt's schema, and the check is live: a
# copy without the qemu namespace (so <qemu:commandline> is unknown) fails.
sed 's/ xmlns:qemu=[^>]*//' "$xml" >"$work/no-ns.xml"
if ! virt-xml-validate "$xml" domain >"$work/validate.log" 2>&1; then
    bad "$xml validates as a libvirt domain"
    cat "$work/validate.log"
elif virt-xml-validate "$work/no-ns.xml" domain >/dev/null 2>&1; then
    bad "$xml validates, but so does a copy without xmlns:qemu (the validator checks nothing?)"
else
    ok "$xml validates as a libvirt domain (a copy without xmlns:qemu does not)"
fi

# virtlogd first: without it libvirtd cannot start a domain.  The
# daemons run with a service manager's plain environment, which QEMU
# inherits.
daemon_env=(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C)
if pid=$(running_pid /run/virtlogd.pid virtlogd); then
    ok "virtlogd is up (pid $pid, already running: left running)"
else
    note "starting virtlogd"
    "${daemon_env[@]}" LIBVIRT_LOG_OUTPUTS="3:file:$work/virtlogd.log" \
        virtlogd --daemon </dev/null >"$work/virtlogd.out" 2>&1 9>&-
    for i in $(seq 1 100); do
        our_virtlogd=$(running_pid /run/virtlogd.pid virtlogd) && [ -S /run/libvirt/virtlogd-sock ] && break
        sleep 0.1
    done
    if [ -n "$our_virtlogd" ] && [ -S /run/libvirt/virtlogd-sock ]; then
        ok "virtlogd is up (pid $our_virtlogd)"
    else
        bad "virtlogd is up (no /run/libvirt/virtlogd-sock after 10 s)"
        tail_of "virtlogd --daemon" "$work/virtlogd.out"
        tail_of virtlogd "$work/virtlogd.log"
        give_up "no virtlogd"
    fi
fi

if pid=$(running_pid /run/libvirtd.pid libvirtd); then
    ok "libvirtd is up (pid $pid, already running: left running)"
else
    note "starting libvirtd"
    "${daemon_env[@]}" LIBVIRT_LOG_OUTPUTS="3:file:$work/libvirtd.log" \
        libvirtd --daemon </dev/null >"$work/libvirtd.out" 2>&1 9>&-
    up=no
    for i in $(seq 1 120); do
        our_libvirtd=$(running_pid /run/libvirtd.pid libvirtd) || our_libvirtd=
        if [ -n "$our_libvirtd" ] && virsh -c "$conn" list --all >/dev/null 2>&1; then
            up=yes
            break
        fi
        [ "$i" -gt 20 ] && [ -z "$our_libvirtd" ] && break
        sleep 0.5
    done
    if [ $up = yes ]; then
        sb=$(grep -E '^\s*seccomp_sandbox' /etc/libvirt/qemu.conf | tr -d ' ')
        ok "libvirtd is up (pid $our_libvirtd; qemu.conf: ${sb:-seccomp_sandbox not set, the default})"
    else
        bad "libvirtd is up (virsh -c $conn list --all)"
        tail_of "libvirtd --daemon" "$work/libvirtd.out"
        tail_of libvirtd "$work/libvirtd.log"
        give_up "no libvirtd"
    fi
fi

# ---- 2. the host daemon -----------------------------------------------------
note "starting vcu-daemon (run folder $run)"
rm -rf "$run"
mkdir -p "$work/daemon-cache"
if ! vcu_daemon_start "$run" --socket-group libvirt-qemu --libcuda "$fake" \
    --cache-dir "$work/daemon-cache" 9>&-; then
    bad "vcu-daemon is up"
    give_up "no vcu-daemon"
fi
dpid=$VCU_DAEMON_PID
sock=$VCU_DAEMON_SOCK
# QEMU's user must be able to connect: search on the run folder, write on
# the socket (access(2) as libvirt-qemu, with its groups).
sock_mode=$(stat -c '%U:%G %a' "$sock")
if ! grep -q 'jail on' "$VCU_DAEMON_LOG"; then
    bad "vcu-daemon's workers are jailed (its log says: $(grep -m1 'serving on' "$VCU_DAEMON_LOG"))"
elif setpriv --reuid=libvirt-qemu --regid=libvirt-qemu --init-groups test -w "$sock"; then
    ok "vcu-daemon is up (pid $dpid, workers jailed; $sock $sock_mode, reachable as libvirt-qemu)"
else
    bad "vcu-daemon's socket $sock ($sock_mode) is reachable as libvirt-qemu"
    give_up "QEMU could not reach the daemon"
fi

# ---- 3. the domain ----------------------------------------------------------
note "copying build/qemu, the kernel and the initramfs to $scratch"
rm -rf "$scratch"
mkdir -m 755 "$scratch"
cp -a build/qemu "$scratch/qemu"
cp "$kernel" "$scratch/vmlinuz"
cp "$initrd" "$scratch/initrd-cuda.img"
chmod 644 "$scratch/vmlinuz" "$scratch/initrd-cuda.img"
serial=$scratch/serial.log
cat >"$work/mkdomain.py" <<'EOF'
import sys
import xml.etree.ElementTree as ET

src, out, name, scratch, sock = sys.argv[1:6]
initrd = sys.argv[6] if len(sys.argv) > 6 else 'initrd-cuda.img'
cmdline = sys.argv[7] if len(sys.argv) > 7 else \
    'console=ttyS0 panic=-1 quiet vcu.suite=cuda vcu.echo_mib=256 vcu.bench_args='
serial_name = sys.argv[8] if len(sys.argv) > 8 else 'serial.log'
Q = 'http://libvirt.org/schemas/domain/qemu/1.0'
ET.register_namespace('qemu', Q)
d = ET.parse(src).getroot()


def need(path):
    e = d.find(path, {'qemu': Q})
    if e is None:
        sys.exit(f'the example has no {path}')
    return e


# The parts the device needs, as the example has them.
mb = need('memoryBacking')
if mb.find('source') is None or mb.find('source').get('type') != 'memfd' or \
        mb.find('access') is None or mb.find('access').get('mode') != 'shared':
    sys.exit('the example\'s guest RAM is not memfd with access shared')
args = need('qemu:commandline').findall(f'{{{Q}}}arg')
vals = [a.get('value') for a in args]
chardevs = [args[i + 1] for i in range(len(vals) - 1) if vals[i] == '-chardev'
            and vals[i + 1].startswith('socket,')]
devs = [vals[i + 1] for i in range(len(vals) - 1) if vals[i] == '-device'
        and vals[i + 1].startswith('virtio-cuda-pci,')]
if len(chardevs) != 1 or len(devs) != 1:
    sys.exit(f'the example needs one -chardev socket and one -device virtio-cuda-pci: {vals}')
cd = chardevs[0].get('value').split(',')
cid = [o[3:] for o in cd if o.startswith('id=')]
if not cid or f'chardev={cid[0]}' not in devs[0].split(','):
    sys.exit(f'the example\'s device is not on its chardev: {chardevs[0].get("value")} {devs[0]}')
chardevs[0].set('value', ','.join(f'path={sock}' if o.startswith('path=') else o for o in cd))

# TCG, the test guest, copies QEMU's user can read.
d.set('type', 'qemu')
need('name').text = name
for tag in ('memory', 'currentMemory'):
    e = need(tag)
    e.set('unit', 'MiB')
    e.text = '3072'
need('vcpu').text = '2'
os_ = need('os')
need('os/loader').text = f'{scratch}/qemu/share/qboot.rom'
for e in os_.findall('boot'):
    os_.remove(e)
for tag, text in (('kernel', f'{scratch}/vmlinuz'), ('initrd', f'{scratch}/{initrd}'),
                  ('cmdline', cmdline)):
    ET.SubElement(os_, tag).text = text
cpu = need('cpu')
cpu.attrib.clear()
cpu.set('mode', 'maximum')
need('on_reboot').text = 'destroy'
devices = need('devices')
need('devices/emulator').text = f'{scratch}/qemu/bin/qemu-system-x86_64'
for tag in ('disk', 'interface', 'serial', 'console', 'controller'):
    for e in devices.findall(tag):
        devices.remove(e)
ET.SubElement(devices, 'controller', type='usb', model='none')
serial = ET.SubElement(devices, 'serial', type='file')
# append: a restored domain's QEMU opens it again.
ET.SubElement(serial, 'source', path=f'{scratch}/{serial_name}', append='on')
ET.SubElement(serial, 'target', port='0')
ET.ElementTree(d).write(out)
print(f'device: {devs[0]}; chardev: {chardevs[0].get("value")}')
EOF
python3 "$work/mkdomain.py" "$xml" "$work/domain.xml" "$dom" "$scratch" "$sock" >"$work/xml.log" 2>&1
if [ $? != 0 ]; then
    bad "a domain is made from $xml"
    cat "$work/xml.log"
    give_up "no domain XML"
fi
cat "$work/xml.log"

# A domain left by a run that was killed: a define on its name fails.
if vsh domstate "$dom" >/dev/null 2>&1; then
    vsh destroy "$dom" >/dev/null 2>&1
    vsh undefine "$dom" >/dev/null 2>&1
fi
note "defining the domain"
if ! vsh define --validate "$work/domain.xml" >"$work/define.log" 2>&1; then
    bad "libvirt defines the domain"
    cat "$work/define.log"
    tail_of libvirtd "$work/libvirtd.log" 20
    give_up "domain not defined"
fi
defined=yes
qlog=/var/log/libvirt/qemu/$dom.log
log_off=$(stat -c %s "$qlog" 2>/dev/null || echo 0)
note "starting the domain"
t_vm=$(date +%s)
if ! vsh start "$dom" >"$work/start.log" 2>&1; then
    bad "libvirt starts the domain"
    cat "$work/start.log"
    tail -c +$((log_off + 1)) "$qlog" 2>/dev/null | tail -n 30
    tail_of libvirtd "$work/libvirtd.log" 20
    tail_of vcu-daemon "$VCU_DAEMON_LOG" 20
    give_up "domain not started"
fi
qpid=$(cat "/run/libvirt/qemu/$dom.pid" 2>/dev/null)
if [ -z "$qpid" ] || ! kill -0 "$qpid" 2>/dev/null; then
    bad "libvirt starts the domain (no QEMU pid in /run/libvirt/qemu/$dom.pid)"
    tail -c +$((log_off + 1)) "$qlog" 2>/dev/null | tail -n 30
    give_up "no QEMU"
fi
ok "libvirt defines and starts the domain (QEMU pid $qpid)"

# ---- 4. what libvirt made of it ---------------------------------------------
tail -c +$((log_off + 1)) "$qlog" >"$work/qemu-start.log"
sandbox=$(grep -m1 -- '^-sandbox ' "$work/qemu-start.log" | sed 's/ \\$//')
if [ -n "$sandbox" ] && [[ $sandbox == *spawn=deny* ]] && [[ $sandbox == "-sandbox on,"* ]]; then
    ok "libvirt started QEMU with $sandbox"
else
    bad "libvirt started QEMU with -sandbox on,...,spawn=deny (its command line: ${sandbox:-no -sandbox})"
    tail_of "QEMU command line" "$work/qemu-start.log" 60
fi
seccomp=$(awk '$1 == "Seccomp:" { print $2 }' "/proc/$qpid/status" 2>/dev/null)
if [ "$seccomp" = 2 ]; then
    ok "QEMU runs in seccomp filter mode (Seccomp: 2)"
else
    bad "QEMU runs in seccomp filter mode (Seccomp: ${seccomp:-?})"
fi
quid=$(awk '$1 == "Uid:" { print $2 "," $3 "," $4 "," $5 }' "/proc/$qpid/status" 2>/dev/null)
if [ "$quid" = "$qemu_uid,$qemu_uid,$qemu_uid,$qemu_uid" ]; then
    ok "QEMU runs as libvirt-qemu (uid $qemu_uid)"
else
    bad "QEMU runs as libvirt-qemu (uid $qemu_uid; its Uid line: $quid)"
fi

# While the guest runs, twice a second: the daemon's workers (each in a pid
# namespace of its own, not root; other daemons' workers on the host are
# none of this run's) and QEMU's children (none: its sandbox forbids
# them, and the guest's sessions run all the same).  Gives up early when the
# guest kernel says nothing for 120 s, or the domain is still running 60 s
# after the suite's end (a guest that cannot power off).
note "the CUDA suite runs in the guest (up to $vm_timeout s)"
dns=$(readlink "/proc/$dpid/ns/pid")
: >"$work/workers.txt"
: >"$work/qemu-children.txt"
state=
seen_init=no
end_at=
while :; do
    # A worker is the child of its jail's first process ("vcu-jail"), the
    # daemon's child.
    jails=" $(ps -e -o pid=,ppid=,comm= | awk -v d="$dpid" '$3 == "vcu-jail" && $2 == d { printf "%s ", $1 }')"
    ps -e -o pid=,ppid=,uid=,comm= | while read -r p pp u c; do
        if [ "$c" = vcu-worker ] && { [ "$pp" = "$dpid" ] || [[ $jails == *" $pp "* ]]; }; then
            echo "$p $u $(readlink "/proc/$p/ns/pid" 2>/dev/null || echo gone)"
        fi
        [ "$pp" = "$qpid" ] && echo "$p $c" >>"$work/qemu-children.txt"
    done >>"$work/workers.txt"
    state=$(vsh domstate "$dom" 2>/dev/null)
    [ "$state" = "shut off" ] && break
    secs=$(($(date +%s) - t_vm))
    if [ $seen_init = no ] && grep -aq 'VCU-INIT start' "$serial" 2>/dev/null; then
        seen_init=yes
        note "guest kernel up"
    fi
    if [ $seen_init = no ] && [ $secs -ge 120 ]; then
        note "no word from the guest kernel after $secs s"
        break
    fi
    if [ -z "$end_at" ] && grep -aq '^VCU-SUITE-END cuda' "$serial" 2>/dev/null; then
        end_at=$secs
        note "the guest's suite ended"
    fi
    if [ -n "$end_at" ] && [ $((secs - end_at)) -ge 60 ]; then
        note "the domain still runs 60 s after the suite's end"
        break
    fi
    [ $secs -ge "$vm_timeout" ] && break
    sleep 0.5
done
secs=$(($(date +%s) - t_vm))
note "domain ${state:-gone} after $secs s"
# The daemon's side of the link: QEMU's own pid and user, seen on the
# socket (SO_PEERCRED), under the domain's name (-name).
welcome=$(grep -m1 "QEMU pid $qpid," "$VCU_DAEMON_LOG")
if [[ $welcome == *"($dom, QEMU pid $qpid, uid $qemu_uid): welcome"* ]]; then
    ok "vcu-daemon welcomed the domain's QEMU (pid $qpid, uid $qemu_uid) on its socket"
else
    bad "vcu-daemon welcomes the domain's QEMU (pid $qpid, uid $qemu_uid): ${welcome:-no word of it}"
    tail_of vcu-daemon "$VCU_DAEMON_LOG" 20
fi
sort -u -o "$work/workers.txt" "$work/workers.txt"
nw=$(wc -l <"$work/workers.txt")
nbad=$(awk -v ns="$dns" '$2 == 0 || ($3 != "gone" && $3 == ns)' "$work/workers.txt" | wc -l)
if [ "$nw" -gt 0 ] && [ "$nbad" = 0 ] && [ ! -s "$work/qemu-children.txt" ]; then
    ok "vcu-daemon (pid $dpid) ran the guest's sessions: $nw workers seen, children of its jails, in pid namespaces not its own, not root; QEMU had no child"
else
    bad "the guest's sessions run in vcu-daemon's workers, jailed, not root, and QEMU has no child ($nw workers seen, $nbad root or in the daemon's pid namespace; QEMU's children: $(tr '\n' ' ' <"$work/qemu-children.txt"))"
    awk -v ns="$dns" '$2 == 0 || ($3 != "gone" && $3 == ns)' "$work/workers.txt" | sed -n '1,5p'
fi

# The guest's verdicts, as tests/vm/run.sh reads them.
tr -d '\r' <"$serial" >"$work/serial.log" 2>/dev/null
grep -a '^VCU-TEST cuda/' "$work/serial.log"
npass=$(grep -ac '^VCU-TEST cuda/[^ ]* PASS' "$work/serial.log")
nfail=$(grep -ac '^VCU-TEST cuda/[^ ]* FAIL' "$work/serial.log")
passed=$((passed + npass))
failed=$((failed + nfail))
oops_re='Oops|BUG:|kernel BUG|Kernel panic|general protection fault|WARNING: CPU|Call Trace|UBSAN|KASAN|refcount_t:|list_add corruption|list_del corruption|blocked for more than'
problems=
grep -aq '^VCU-SUITE-END cuda' "$work/serial.log" || problems="$problems; no VCU-SUITE-END cuda"
grep -aEq "$oops_re" "$work/serial.log" && problems="$problems; guest kernel oops/BUG/WARNING"
[ $((npass + nfail)) -gt 0 ] || problems="$problems; no test results"
if [ -z "$problems" ]; then
    ok "the CUDA suite ran to its end in the guest ($npass tests, $nfail failed)"
else
    bad "the CUDA suite ran to its end in the guest${problems}"
fi
if [ -n "$problems" ] || [ "$nfail" -gt 0 ]; then
    grep -aE "$oops_re" "$work/serial.log" | sed -n '1,20p'
    echo "--- serial log tail ---"
    grep -av '^VCU-TEST ' "$work/serial.log" | tail -n 40
    tail_of vcu-daemon "$VCU_DAEMON_LOG" 30
    tail -c +$((log_off + 1)) "$qlog" >"$work/qemu.log" 2>/dev/null
    tail_of "QEMU (libvirt's log)" "$work/qemu.log" 20
fi

reason=$(vsh domstate --reason "$dom" 2>/dev/null)
if [ "$reason" = "shut off (shutdown)" ]; then
    ok "the domain shut off when the guest powered off ($secs s from start)"
else
    bad "the domain shuts off when the guest powers off (after $secs s: ${reason:-no state})"
    tail_of libvirtd "$work/libvirtd.log" 20
fi

# ---- 5. virsh save, virsh restore ------------------------------------------
# As an operator suspends a VM to disk and brings it back: libvirt pauses
# it, has QEMU write its state (the device's sessions included) to the
# file and ends it; the guest's workers go.  The restore starts a new QEMU
# that loads the file, on the same daemon, and resumes it.
# A domain whose guest runs the migrate suite's checker for SECS seconds:
# defined from the example as NAME (serial to SERIAL under $scratch) and
# started; returns once its first round is checked.  0, or 1 with the
# failure said.
checker_domain() {
    local name=$1 serial=$2 secs=$3 flag=$4 i
    cp build/vm/initrd-migrate.img "$scratch/initrd-migrate.img"
    chmod 644 "$scratch/initrd-migrate.img"
    if ! python3 "$work/mkdomain.py" "$xml" "$work/domain-$name.xml" "$name" "$scratch" "$sock" \
        initrd-migrate.img "console=ttyS0 panic=-1 quiet vcu.suite=migrate vcu.mig_secs=$secs vcu.mig_ballast=0" \
        "$serial" >"$work/xml-$name.log" 2>&1; then
        bad "a domain $name is made from $xml"
        cat "$work/xml-$name.log"
        return 1
    fi
    if vsh domstate "$name" >/dev/null 2>&1; then
        vsh destroy "$name" >/dev/null 2>&1
        vsh undefine "$name" >/dev/null 2>&1
    fi
    if ! vsh define "$work/domain-$name.xml" >"$work/define-$name.log" 2>&1 ||
        ! { eval "$flag=yes"; vsh start "$name" >"$work/start-$name.log" 2>&1; }; then
        bad "libvirt defines and starts the domain $name"
        cat "$work/define-$name.log" "$work/start-$name.log" 2>/dev/null
        return 1
    fi
    note "$name's checker runs (up to 300 s for its first round)"
    for i in $(seq 1 600); do
        grep -aq '^VCU-MANY mig tick' "$scratch/$serial" 2>/dev/null && break
        [ "$(vsh domstate "$name" 2>/dev/null)" = "running" ] || break
        sleep 0.5
    done
    if ! grep -aq '^VCU-MANY mig tick' "$scratch/$serial" 2>/dev/null; then
        bad "the domain $name runs its checker (no round seen)"
        tail -n 20 "$scratch/$serial" 2>/dev/null
        return 1
    fi
    return 0
}

# After a save and restore or a move (WHAT), with N_BEFORE checker rounds
# seen before it: waits (STATE_CMD says the domain still runs) for the
# suite's end and checks the checker went on with no wrong result.
checker_went_on() {
    local what=$1 serial=$2 n_before=$3 state_cmd=$4 log=$5 i n_after done_line
    for i in $(seq 1 $((2 * (save_secs + 300)))); do
        grep -aq '^VCU-SUITE-END migrate' "$scratch/$serial" 2>/dev/null && break
        [ "$($state_cmd domstate "$dom_of_check" 2>/dev/null)" = "running" ] || break
        sleep 0.5
    done
    tr -d '\r' <"$scratch/$serial" >"$work/$serial"
    n_after=$(grep -ac '^VCU-MANY mig tick' "$work/$serial")
    done_line=$(grep -a '^VCU-MANY mig done' "$work/$serial" | tail -n 1)
    if grep -aq '^VCU-TEST migrate/checker PASS' "$work/$serial" &&
        [[ $done_line == *" wrong=0"* ]] && [ "$n_after" -gt "$n_before" ]; then
        ok "$what: the guest's checker went on ($n_before rounds before, $n_after in all) with no wrong result: $done_line"
    else
        bad "$what: the guest's checker goes on with no wrong result ($n_before rounds before, $n_after in all; ${done_line:-no done line})"
        grep -a '^VCU-TEST migrate' "$work/$serial"
        grep -av '^VCU-MANY mig tick' "$work/$serial" | tail -n 30
        tail_of vcu-daemon "$log" 30
    fi
    if grep -aEq "$oops_re" "$work/$serial"; then
        bad "$what: no guest kernel oops"
        grep -aE "$oops_re" "$work/$serial" | sed -n '1,10p'
    fi
}

save_domain() {
    local state=$scratch/saved.state n_before
    checker_domain "$dom2" serial-save.log "$save_secs" defined2 || return
    sleep 3
    note "virsh save"
    if ! vsh save "$dom2" "$state" >"$work/save.log" 2>&1; then
        bad "virsh save $dom2 (with CUDA work in flight)"
        cat "$work/save.log"
        tail_of vcu-daemon "$VCU_DAEMON_LOG" 20
        return
    fi
    n_before=$(grep -ac '^VCU-MANY mig tick' "$scratch/serial-save.log")
    reason=$(vsh domstate --reason "$dom2" 2>/dev/null)
    if [ "$reason" = "shut off (saved)" ] && [ -s "$state" ]; then
        ok "virsh save wrote $(stat -c %s "$state") bytes with the checker running ($n_before rounds); the domain is $reason"
    else
        bad "virsh save leaves the domain shut off (saved) and a state file (${reason:-no state})"
        return
    fi
    sleep 2
    note "virsh restore"
    if ! vsh restore "$state" >"$work/restore.log" 2>&1; then
        bad "virsh restore $state"
        cat "$work/restore.log"
        tail_of vcu-daemon "$VCU_DAEMON_LOG" 20
        tail -n 30 "/var/log/libvirt/qemu/$dom2.log" 2>/dev/null
        return
    fi
    ok "virsh restore: the domain is $(vsh domstate "$dom2" 2>/dev/null)"
    dom_of_check=$dom2
    checker_went_on "virsh save and restore" serial-save.log "$n_before" vsh "$VCU_DAEMON_LOG"
}
save_domain

# ---- 6. virsh migrate to another host ----------------------------------------
# libvirt refuses a migration to its own host (the same hostname or host
# UUID), so the destination is a second host as far as libvirt can tell: a
# libvirtd in mount and UTS namespaces of its own, with another hostname
# and host UUID, its own /etc/libvirt, /run/libvirt, /var/lib/libvirt/qemu
# and /var/log/libvirt/qemu, its own virtlogd, and a vcu-daemon of its own
# (its own run folder and module cache).  What the two ends share is the
# host's kernel and GPU and the migration stream, over TCP on the loopback.
hostb=/run/vcu-libvirt-test-b
connb="qemu+unix:///system?socket=$hostb/run/libvirt-sock"
b_libvirtd=
b_virtlogd=
b_daemon_pid=
vshb() { timeout 120 virsh -q -c "$connb" "$@"; }

# Starts host B: its folders, virtlogd and libvirtd in their namespaces,
# then its vcu-daemon.  0 when all are up.
start_host_b() {
    local d uuid i
    rm -rf "$hostb"
    mkdir -p "$hostb/etc" "$hostb/run" "$hostb/lib" "$hostb/log" "$hostb/vcu"
    cp -a /etc/libvirt/. "$hostb/etc/"
    rm -f "$hostb"/etc/qemu/*.xml
    uuid=$(cat /proc/sys/kernel/random/uuid)
    printf 'host_uuid = "%s"\n' "$uuid" >>"$hostb/etc/libvirtd.conf"
    for d in lib:/var/lib/libvirt/qemu log:/var/log/libvirt/qemu run:/run/libvirt; do
        chown --reference="${d#*:}" "$hostb/${d%%:*}" && chmod --reference="${d#*:}" "$hostb/${d%%:*}"
    done
    cat >"$hostb/start.sh" <<EOS
set -e
hostname vcu-libvirt-host-b
mount --bind $hostb/etc /etc/libvirt
mount --bind $hostb/run /run/libvirt
mount --bind $hostb/lib /var/lib/libvirt/qemu
mount --bind $hostb/log /var/log/libvirt/qemu
LIBVIRT_LOG_OUTPUTS="3:file:$work/virtlogd-b.log" virtlogd --daemon --pid-file $hostb/virtlogd.pid
for i in \$(seq 1 100); do [ -S /run/libvirt/virtlogd-sock ] && break; sleep 0.1; done
LIBVIRT_LOG_OUTPUTS="3:file:$work/libvirtd-b.log" libvirtd --daemon --pid-file $hostb/libvirtd.pid
EOS
    "${daemon_env[@]}" unshare --mount --uts --propagation private sh "$hostb/start.sh" \
        </dev/null >"$work/host-b.out" 2>&1 9>&- || { cat "$work/host-b.out"; return 1; }
    for i in $(seq 1 120); do
        b_libvirtd=$(running_pid "$hostb/libvirtd.pid" libvirtd) || b_libvirtd=
        b_virtlogd=$(running_pid "$hostb/virtlogd.pid" virtlogd) || b_virtlogd=
        [ -n "$b_libvirtd" ] && virsh -c "$connb" list --all >/dev/null 2>&1 && break
        sleep 0.5
    done
    if [ -z "$b_libvirtd" ] || ! virsh -c "$connb" list --all >/dev/null 2>&1; then
        tail_of "host B" "$work/host-b.out"
        tail_of "host B's libvirtd" "$work/libvirtd-b.log"
        return 1
    fi
    if [ "$(vshb hostname 2>/dev/null)" != vcu-libvirt-host-b ] ||
        [ "$(vshb sysinfo 2>/dev/null | grep -c "$uuid")" = x ]; then
        echo "host B's libvirtd does not say it is vcu-libvirt-host-b"
        return 1
    fi
    # Its vcu-daemon: the helper keeps one daemon's variables, so host A's
    # are put back after.
    local a_pid=$VCU_DAEMON_PID a_sock=$VCU_DAEMON_SOCK a_log=$VCU_DAEMON_LOG
    mkdir -p "$work/daemon-cache-b"
    vcu_daemon_start "$hostb/vcu" --socket-group libvirt-qemu --libcuda "$fake" \
        --cache-dir "$work/daemon-cache-b" 9>&-
    i=$?
    b_daemon_pid=$VCU_DAEMON_PID
    b_daemon_log=$VCU_DAEMON_LOG
    VCU_DAEMON_PID=$a_pid VCU_DAEMON_SOCK=$a_sock VCU_DAEMON_LOG=$a_log
    return $i
}

stop_host_b() {
    local pid i
    if [ -n "$b_libvirtd" ]; then
        for n in $(vshb list --name 2>/dev/null); do vshb destroy "$n" >/dev/null 2>&1; done
    fi
    if [ -n "$b_daemon_pid" ]; then
        local a_pid=$VCU_DAEMON_PID
        VCU_DAEMON_PID=$b_daemon_pid
        vcu_daemon_stop
        VCU_DAEMON_PID=$a_pid
        cp "$b_daemon_log" "$work/daemon-b.log" 2>/dev/null
        b_daemon_pid=
    fi
    for pid in $b_libvirtd $b_virtlogd; do
        kill "$pid" 2>/dev/null
        for i in $(seq 1 150); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    done
    b_libvirtd=
    b_virtlogd=
    rm -rf "$hostb"
}

migrate_domain() {
    local serial3=$scratch/serial-mig.log n_before t0 info down
    note "starting host B (a second libvirtd in namespaces of its own, its own vcu-daemon)"
    if ! start_host_b; then
        bad "host B is up: a second libvirtd (another hostname and host UUID) and vcu-daemon"
        return
    fi
    ok "host B is up: libvirtd pid $b_libvirtd as $(vshb hostname 2>/dev/null), vcu-daemon pid $b_daemon_pid"
    checker_domain "$dom3" serial-mig.log "$mig_secs" defined3 || return
    # Host B's domain: the same, its device on host B's daemon.
    if ! vsh dumpxml --migratable "$dom3" >"$work/domain-mig-a.xml" 2>"$work/dumpxml.log" ||
        ! sed "s|path=$sock,|path=$hostb/vcu/vcu.sock,|" "$work/domain-mig-a.xml" \
            >"$work/domain-mig-b.xml" ||
        ! grep -q "path=$hostb/vcu/vcu.sock," "$work/domain-mig-b.xml"; then
        bad "the domain's XML for host B (virsh dumpxml --migratable, the daemon's socket changed)"
        cat "$work/dumpxml.log"
        return
    fi
    sleep 3
    note "virsh migrate --live to host B"
    t0=$(date +%s%N)
    if ! vsh migrate --live --verbose --xml "$work/domain-mig-b.xml" "$dom3" "$connb" \
        tcp://127.0.0.1:49152 >"$work/migrate.log" 2>&1; then
        bad "virsh migrate --live $dom3 to host B (with CUDA work in flight)"
        cat "$work/migrate.log"
        tail_of vcu-daemon "$VCU_DAEMON_LOG" 20
        tail_of "host B's vcu-daemon" "$b_daemon_log" 20
        tail -n 20 "/var/log/libvirt/qemu/$dom3.log" 2>/dev/null
        tail -n 20 "$hostb/log/$dom3.log" 2>/dev/null
        [ "$(vsh domstate "$dom3" 2>/dev/null)" = running ] &&
            echo "(the domain runs on on host A)"
        return
    fi
    info=$(vsh domjobinfo --completed "$dom3" 2>/dev/null | tr -s ' ')
    down=$(echo "$info" | sed -n 's/^Total downtime: \(.*\)/\1/p')
    n_before=$(grep -ac '^VCU-MANY mig tick' "$serial3")
    if [ "$(vshb domstate "$dom3" 2>/dev/null)" = running ] &&
        [ "$(vsh domstate "$dom3" 2>/dev/null)" != running ]; then
        ok "virsh migrate --live moved the domain to host B in $((($(date +%s%N) - t0) / 1000000)) ms (downtime ${down:-not reported}) with the checker running ($n_before rounds)"
    else
        bad "after virsh migrate the domain runs on host B and not on A (A: $(vsh domstate "$dom3" 2>/dev/null), B: $(vshb domstate "$dom3" 2>/dev/null))"
        return
    fi
    dom_of_check=$dom3
    checker_went_on "virsh migrate to host B" serial-mig.log "$n_before" vshb "$b_daemon_log"
    # The rounds after the move ran on host B's workers: its daemon
    # welcomed the domain's QEMU there, and the source's daemon's link
    # to the domain closed.
    if grep -aq "($dom3, QEMU pid .*welcome" "$b_daemon_log" &&
        grep -aq "($dom3): link closed" "$VCU_DAEMON_LOG"; then
        ok "host B's vcu-daemon serves the moved domain; host A's let it go"
    else
        bad "host B's vcu-daemon serves the moved domain and host A's let it go (B: $(grep -a "$dom3" "$b_daemon_log" | tail -n 2 | tr '\n' ' '); A: $(grep -a "$dom3" "$VCU_DAEMON_LOG" | tail -n 2 | tr '\n' ' '))"
    fi
}
migrate_domain

# ---- cleanup ------------------------------------------------------------------
cleanup
left=
[ -n "$our_libvirtd" ] && kill -0 "$our_libvirtd" 2>/dev/null && left="$left libvirtd"
[ -n "$our_virtlogd" ] && kill -0 "$our_virtlogd" 2>/dev/null && left="$left virtlogd"
kill -0 "$dpid" 2>/dev/null && left="$left vcu-daemon"
[ -d "$hostb" ] && left="$left host B's folders"
if [ -f "/etc/libvirt/qemu/$dom.xml" ] || [ -f "/etc/libvirt/qemu/$dom2.xml" ] ||
    [ -f "/etc/libvirt/qemu/$dom3.xml" ]; then
    left="$left a domain's definition"
fi
if [ -z "$left" ]; then
    ok "cleaned up: domain undefined, the daemons this run started stopped"
else
    bad "cleaned up (still there:$left)"
fi
note "done"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
