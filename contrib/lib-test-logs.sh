# shellcheck shell=bash
# Sourced by contrib/test.sh and contrib/sanitize.sh, in the top directory
# of a build tree where `make check` ran.

# failing_test_logs N: "=== LOG" and the last N lines of every test log
# whose .trs says FAIL or ERROR.
failing_test_logs() {
    local log trs
    for log in test/*.log test/*/*.log; do
        [ -f "$log" ] || continue
        case "$log" in */test-suite.log) continue ;; esac
        trs="${log%.log}.trs"
        if [ -f "$trs" ] && grep -q ":test-result: FAIL\|:test-result: ERROR" "$trs"; then
            echo "=== $log"
            tail -"$1" "$log"
        fi
    done
}
