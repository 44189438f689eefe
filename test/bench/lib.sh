# shellcheck shell=bash
# Sourced by the benchmark test scripts (test_osu_validate.sh,
# test_soak.sh): the counters, a line per case ("PASS NAME" or "FAIL
# NAME"), and the summary "N passed, M failed, K skipped" that
# contrib/test.sh adds up.
passed=0 failed=0 skipped=0

pass() { passed=$((passed + 1)); echo "PASS $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }

# show_tail N FILE: the last N lines of FILE (a case's output), indented.
show_tail() { sed 's/^/    /' "$2" | tail -"$1"; }

# require_built PROG: without PROG the script fails at once.
require_built() {
    [ -x "$1" ] && return 0
    echo "FAIL: $1 is not built"
    echo "0 passed, 1 failed, 0 skipped"
    exit 1
}

# summary: the last line; its status is the script's (1 when a case failed).
summary() {
    echo "$passed passed, $failed failed, $skipped skipped"
    [ "$failed" -eq 0 ]
}
