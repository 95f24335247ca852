#!/usr/bin/env bash
# The libvirt suite: docs/libvirt/virtio-cuda-domain.xml validates against
# libvirt's domain schema (virt-xml-validate), a copy without the qemu
# namespace does not (the check is live), and the parts libvirt hands to
# QEMU as they are (the memfd shared memory backing and the -device
# argument) start the QEMU build with the device against the CPU stand-in,
# both GPUs taken.  No libvirtd runs here.  Last line: N passed, N failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
work=$root/build/pkg-libvirt
xml=docs/libvirt/virtio-cuda-domain.xml
qemu=${VCU_QEMU:-$root/build/qemu/bin/qemu-system-x86_64}
fake=${VCU_QTEST_LIBCUDA:-$root/build/fakecuda/libcuda.so.1}
passed=0
failed=0

ok() { echo "PASS $*"; passed=$((passed + 1)); }
bad() { echo "FAIL $*"; failed=$((failed + 1)); }

rm -rf "$work"
mkdir -p "$work"

if ! command -v virt-xml-validate >/dev/null; then
    bad "virt-xml-validate is installed (libvirt-clients, scripts/deps.sh)"
else
    if virt-xml-validate "$xml" domain >"$work/validate.log" 2>&1; then
        ok "$xml validates as a libvirt domain"
    else
        bad "$xml validates as a libvirt domain"
        cat "$work/validate.log"
    fi
    sed 's/ xmlns:qemu=[^>]*//' "$xml" >"$work/no-ns.xml"
    if virt-xml-validate "$work/no-ns.xml" domain >"$work/no-ns.log" 2>&1; then
        bad "a copy without xmlns:qemu is refused (the validator checks nothing?)"
    else
        ok "a copy without xmlns:qemu is refused"
    fi
fi

# What libvirt makes of the XML for QEMU, reduced to the device and memory.
python3 - "$xml" "$qemu" "$fake" >"$work/device.log" 2>&1 <<'EOF'
import os, subprocess, sys
import xml.etree.ElementTree as ET

xml, qemu, fake = sys.argv[1:4]
Q = '{http://libvirt.org/schemas/domain/qemu/1.0}'
fails = 0
def report(ok, name):
    global fails
    print(('PASS ' if ok else 'FAIL ') + name)
    fails += not ok

d = ET.parse(xml).getroot()
mb = d.find('memoryBacking')
report(mb is not None and mb.find('source') is not None and mb.find('source').get('type') == 'memfd'
       and mb.find('access') is not None and mb.find('access').get('mode') == 'shared',
       'guest RAM is shared memory (memoryBacking memfd, access shared)')
args = [a.get('value') for a in d.findall(f'{Q}commandline/{Q}arg')]
devs = [args[i + 1] for i in range(len(args) - 1) if args[i] == '-device' and
        args[i + 1].startswith('virtio-cuda-pci')]
report(len(devs) == 1, f'one -device virtio-cuda-pci in qemu:commandline ({devs})')
emu = d.findtext('devices/emulator') or ''
report(emu.endswith('/bin/qemu-system-x86_64') and emu != '/usr/bin/qemu-system-x86_64',
       f'the emulator is the QEMU build with the device ({emu})')

unit = {'KiB': 1 << 10, 'MiB': 1 << 20, 'GiB': 1 << 30}
mem = d.find('memory')
size = int(mem.text) * unit[mem.get('unit', 'KiB')]
machine = d.find('os/type').get('machine', 'pc')
if devs and os.path.exists(qemu) and os.path.exists(fake):
    cmd = [qemu, '-machine', f'{machine},accel=qtest,memory-backend=pc.ram',
           '-object', f'memory-backend-memfd,id=pc.ram,share=on,size={size}', '-m', f'{size >> 20}M',
           '-qtest', 'stdio', '-display', 'none', '-nodefaults',
           # The XML's loader is Debian's SeaBIOS; the build's own firmware
           # stands in for it here.
           '-L', os.path.join(os.path.dirname(qemu), '..', 'share'), '-bios', 'qboot.rom',
           '-device', devs[0] + f',libcuda={fake}']
    q = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    up = False
    try:
        q.stdin.write('endianness\n'); q.stdin.flush()
        up = q.stdout.readline().startswith('OK')
    except BrokenPipeError:
        pass
    if q.poll() is None:
        q.kill()
    err = q.communicate(timeout=30)[1]
    said = [l for l in err.splitlines() if l.startswith(os.path.basename(qemu) + ':') or
            l.startswith('qemu:')]
    said = [l for l in said if ': info: ' not in l]
    report(up and not said, f'QEMU starts with memfd shared RAM and "{devs[0]}", no complaint'
           + (f': {said}' if said else ''))
else:
    report(False, f'QEMU ({qemu}) and the CPU stand-in ({fake}) are built')
sys.exit(1 if fails else 0)
EOF
rc=$?
cat "$work/device.log"
passed=$((passed + $(grep -c '^PASS ' "$work/device.log")))
failed=$((failed + $(grep -c '^FAIL ' "$work/device.log")))
# A crash before any verdict counts too.
[ $rc = 0 ] || grep '^FAIL ' "$work/device.log" >/dev/null || failed=$((failed + 1))
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
