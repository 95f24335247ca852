#!/bin/sh
# The carried outputs run from wherever they land (the GPU machine unpacks
# them under a checkout of its own): a copy of what tests/gpu/prepare.sh
# carries (build/qemu, build/vm's guest kernel and the echo image) and of
# the scripts that run them, at another path, boots the echo suite with
# VCU_NO_BUILD=1, the host daemon started from the copy; and no carried
# text file names this checkout's path.  Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
top=$PWD
passed=0
failed=0
verdict() {
    if [ "$1" = 0 ]; then echo "PASS relocatable/$2"; passed=$((passed + 1));
    else echo "FAIL relocatable/$2 ${3:-}"; failed=$((failed + 1)); fi
}

bad=$(grep -lsF "$top" build/vm/guest.env build/vm/*.env 2>/dev/null | tr '\n' ' ')
[ -z "$bad" ]; verdict $? "no-checkout-path-in-guest-env" "($bad)"

dst=$(mktemp -d /tmp/vcu-relocated.XXXXXX)
chmod 755 "$dst"
mkdir -p "$dst/build/vm" "$dst/tests"
cp -a build/qemu build/fakecuda "$dst/build/"
cp -a build/vm/guest.env build/vm/vmlinuz-* build/vm/initrd-echo.img "$dst/build/vm/"
cp -a tests/vm "$dst/tests/"
mv "$top/build/vm/guest.env" "$top/build/vm/guest.env.held"
out=$(cd "$dst" && VCU_NO_BUILD=1 VCU_ECHO_MIB=16 VCU_VM_TIMEOUT=120 \
    tests/vm/run.sh echo 2>&1)
rc=$?
mv "$top/build/vm/guest.env.held" "$top/build/vm/guest.env"
line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
[ $rc = 0 ] && [ -n "$line" ] && [ "${line#* passed, }" = "0 failed" ]
verdict $? "echo-suite-from-a-copy" "(rc $rc: $(printf '%s\n' "$out" | tail -n 8 | tr '\n' ' '))"
echo "info: from $dst: $line"
rm -rf "$dst"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
