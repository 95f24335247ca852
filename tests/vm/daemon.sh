# The host daemon for a test run (sourced by tests/vm/run.sh, scripts/run.sh
# and the GPU scripts): vcu_daemon_start starts build/qemu/bin/vcu-daemon
# in the background, as an operator would run it, and waits for its
# socket; vcu_daemon_stop ends it (SIGTERM: it kills its workers first).
#
#   vcu_daemon_start RUNDIR [vcu-daemon options...]
#       RUNDIR: the daemon's run folder (made; the socket is RUNDIR/vcu.sock,
#       the log RUNDIR/daemon.log).  Sets VCU_DAEMON_PID, VCU_DAEMON_SOCK,
#       VCU_DAEMON_LOG.  Returns non-zero at once (printing the log's tail)
#       if the daemon ends before its socket is there, or after 20 s.
#   vcu_daemon_stop
#
# VCU_ROOT is the checkout (or the unpacked GPU bundle); VCU_DAEMON=PATH
# names another daemon binary; VCU_DAEMON_ARGS adds options to every daemon
# started (say "--seccomp log").  POSIX sh.

vcu_daemon_start() {
    _vd_run=$1
    shift
    _vd_bin=${VCU_DAEMON:-$VCU_ROOT/build/qemu/bin/vcu-daemon}
    [ -x "$_vd_bin" ] || { echo "vcu-daemon: no $_vd_bin (make qemu)" >&2; return 1; }
    mkdir -p "$_vd_run" && chmod 755 "$_vd_run" || return 1
    VCU_DAEMON_SOCK=$_vd_run/vcu.sock
    VCU_DAEMON_LOG=$_vd_run/daemon.log
    rm -f "$VCU_DAEMON_SOCK"
    # shellcheck disable=SC2086
    # Started from a subshell: not a job of the caller's shell, whose bare
    # `wait` (for its VMs) would otherwise wait for the daemon too.
    (
        "$_vd_bin" --run-dir "$_vd_run" --metrics off "$@" ${VCU_DAEMON_ARGS:-} \
            >"$VCU_DAEMON_LOG" 2>&1 &
        echo $! >"$_vd_run/daemon.pid"
    )
    VCU_DAEMON_PID=$(cat "$_vd_run/daemon.pid")
    for _vd_i in $(seq 1 200); do
        [ -S "$VCU_DAEMON_SOCK" ] && return 0
        if ! kill -0 "$VCU_DAEMON_PID" 2>/dev/null; then
            echo "vcu-daemon ended at start:" >&2
            tail -n 20 "$VCU_DAEMON_LOG" >&2
            return 1
        fi
        sleep 0.1
    done
    echo "vcu-daemon: no socket after 20 s:" >&2
    tail -n 20 "$VCU_DAEMON_LOG" >&2
    return 1
}

vcu_daemon_stop() {
    [ -n "${VCU_DAEMON_PID:-}" ] || return 0
    kill "$VCU_DAEMON_PID" 2>/dev/null
    # It reaps its workers, then goes (10 s at most, then SIGKILL).
    for _vd_i in $(seq 1 100); do
        kill -0 "$VCU_DAEMON_PID" 2>/dev/null || break
        sleep 0.1
    done
    kill -9 "$VCU_DAEMON_PID" 2>/dev/null
    VCU_DAEMON_PID=
}

# The options QEMU gets for the device's daemon link and its sandbox, as
# libvirt starts it; the device option itself needs ",chardev=vcud".
vcu_qemu_daemon_args() {
    printf '%s\n' -chardev "socket,id=vcud,path=$1,reconnect-ms=1000" \
        -sandbox on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny
}
