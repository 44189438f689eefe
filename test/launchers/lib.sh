# shellcheck shell=bash
# Sourced by the launcher test scripts (test_launchers.sh,
# test_torchrun.sh): the counters, the PASS / SKIP lines, what a missing
# prerequisite is (a skip, or a failure in CI), and the traps that run the
# script's cleanup. Each script defines its own fail (FAIL: NAME (WHY) and
# the output it keeps) and cleanup, and prints the summary.

# in_ci: set when CI is true, 1 or yes (any case).
case $(printf '%s' "${CI:-}" | tr '[:upper:]' '[:lower:]') in
    true | 1 | yes) in_ci=1 ;;
    *) in_ci= ;;
esac

# shellcheck disable=SC2034 # failed: counted by the script's fail
passed=0 failed=0 skipped=0
pass() { echo "PASS: $1"; passed=$((passed + 1)); }
skip() { echo "SKIP: $1 ($2)"; skipped=$((skipped + 1)); }
# missing NAME WHY: a prerequisite that is not there (a launcher, torch): a
# skip on a developer machine, a failure in CI.
missing() {
    if [ -n "$in_ci" ]; then fail "$1" "$2; required when CI=$CI"; else skip "$1" "$2"; fi
}

# trap_cleanup: the script's cleanup runs at exit, also on an interrupt
# (exit status 130) or TERM (143).
trap_cleanup() {
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}
