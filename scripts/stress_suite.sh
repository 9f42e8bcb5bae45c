#!/usr/bin/env bash
# Run the test suite on a deliberately busy machine.
#
# Starts N CPU-bound busy loops (default 6; `-n N` or STRESS_BUSY=N), runs the README's test
# command (`python -m pytest`, with any further arguments passed through, e.g. a module or
# `-k` expression), and prints the load average before, during (every STRESS_SAMPLE_S seconds,
# default 30) and after, the wall time and pytest's result. The busy loops and the sampler are
# always stopped (trap on exit, Ctrl-C and SIGTERM; a SIGTERM is passed on to pytest, whose
# conftest turns it into an interruption that still runs every fixture's finaliser). Exits with
# pytest's status.
#
#   scripts/stress_suite.sh                          # the whole suite under 6 busy loops
#   scripts/stress_suite.sh -n 4 tests/test_hooks_e2e.py
#   STRESS_BUSY=10 scripts/stress_suite.sh -k watcher -x
#
# PYTHON selects the interpreter (default: python3 on PATH, e.g. the activated venv's).

set -u

busy="${STRESS_BUSY:-6}"
sample_s="${STRESS_SAMPLE_S:-30}"
python="${PYTHON:-python3}"

usage() {
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
}

while [ $# -gt 0 ]; do
    case "$1" in
        -n) [ $# -ge 2 ] || { usage >&2; exit 2; }; busy="$2"; shift 2 ;;
        -n*) busy="${1#-n}"; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; break ;;
        *) break ;;  # the rest goes to pytest
    esac
done
case "$busy" in
    ''|*[!0-9]*) echo "stress_suite: -n needs a whole number of busy processes, not '$busy'" >&2; exit 2 ;;
esac
case "$sample_s" in
    ''|*[!0-9]*|0) echo "stress_suite: STRESS_SAMPLE_S must be a positive whole number of seconds" >&2; exit 2 ;;
esac

cd "$(dirname "$0")/.." || exit 2

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

busy_pids=()
sampler_pid=""
pytest_pid=""

cleanup() {
    trap - EXIT INT TERM
    [ -n "$sampler_pid" ] && kill "$sampler_pid" 2>/dev/null
    if [ ${#busy_pids[@]} -gt 0 ]; then
        kill "${busy_pids[@]}" 2>/dev/null
        wait "${busy_pids[@]}" 2>/dev/null
    fi
    [ -n "$sampler_pid" ] && wait "$sampler_pid" 2>/dev/null
    busy_pids=()
    sampler_pid=""
}

interrupted() {
    # Pass the signal on to pytest (it stops its daemons in its finalisers), then wait for it.
    [ -n "$pytest_pid" ] && kill -TERM "$pytest_pid" 2>/dev/null
}

trap cleanup EXIT
trap interrupted INT TERM

echo "stress_suite: load average before: $(loadavg) ($(nproc) cores)"
echo "stress_suite: starting $busy busy processes"
for _ in $(seq 1 "$busy"); do
    # A plain shell loop: pure CPU, no I/O, no memory, easy to kill.
    bash -c 'while :; do :; done' &
    busy_pids+=("$!")
done

(
    nap=""
    trap '[ -n "$nap" ] && kill "$nap" 2>/dev/null; exit 0' TERM
    while :; do
        sleep "$sample_s" &
        nap=$!
        wait "$nap"
        echo "stress_suite: load average during: $(loadavg)"
    done
) &
sampler_pid=$!

echo "stress_suite: $python -m pytest $*"
started=$(date +%s.%N)
# A background job of a non-interactive shell starts with SIGINT ignored, and every process under it
# would inherit that (a test's Ctrl-C would be lost): exec pytest with SIGINT back to its default.
"$python" -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' \
    "$python" -m pytest "$@" &
pytest_pid=$!
status=0
# `wait` returns early when a trapped signal arrives: wait again until pytest has exited.
while :; do
    wait "$pytest_pid"
    status=$?
    kill -0 "$pytest_pid" 2>/dev/null || break
done
pytest_pid=""
finished=$(date +%s.%N)
echo "stress_suite: load average at the end, still busy: $(loadavg)"

cleanup
sleep 1
echo "stress_suite: load average after the busy processes stopped: $(loadavg)"
wall=$(awk -v a="$started" -v b="$finished" 'BEGIN { printf "%.1f", b - a }')
if [ "$status" -eq 0 ]; then result="passed"; else result="FAILED"; fi
echo "stress_suite: wall time ${wall} s with $busy busy processes; pytest exit status $status ($result)"
exit "$status"
