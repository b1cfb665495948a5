#!/bin/sh
# A long fuzz campaign: every target, one at a time, each with CASES inputs (default
# 100000), built with optimizations but with overflow checks and debug assertions on, so
# an overflow panics exactly as in the debug builds `cargo test` uses (that is how the
# campaign-found overflows show), only faster. Prints one line per target:
#   fuzz TARGET: N cases, M inputs, T s, slowest case S ms; 0 crashes, 0 hangs (seed X)
# and stops at the first failure, which names the smallest failing input and the seed
# that replays it. Usage, from the repository root: crates/gang-fuzz/campaign.sh [CASES] [TARGET...]
set -eu
cases=${1:-100000}
[ $# -gt 0 ] && shift
export PROPTEST_CASES="$cases"
# New inputs every campaign (cargo test uses a fixed seed per target, for repeatable CI).
export GANG_FUZZ_SEED="${GANG_FUZZ_SEED:-random}"
export CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS=true
export CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true

# target, then the cargo arguments that select the test binary holding it
targets="
proto_submit|-p gang-master --lib
proto_cancel|-p gang-master --lib
proto_get_job|-p gang-master --lib
proto_list_jobs|-p gang-master --lib
proto_watch|-p gang-master --lib
proto_attach|-p gang-master --lib
proto_node|-p gang-master --lib
proto_issue_token|-p gang-master --lib
proto_register|-p gang-master --lib
proto_heartbeat|-p gang-master --lib
proto_rank_exit|-p gang-master --lib
proto_fence|-p gang-master --lib
proto_output_batch|-p gang-master --lib
output_retries|-p gang-master --lib
proto_switch_report|-p gang-master --lib
proto_clock_probe|-p gang-master --lib
swf|-p gang-sim --test fuzz
request|-p gang-core --test fuzz
target|-p gang-proto --test fuzz
cli_duration|-p gang-cli --lib
cli_node|-p gang-cli --lib
cli_mesh|-p gang-cli --lib
pmi1_wire|-p gang-agent --lib
pmi2_wire|-p gang-agent --lib
ctl_frame|-p gang-agent --lib
proto_launch|-p gang-agent --lib
proto_node_table|-p gang-agent --lib
proto_signal|-p gang-agent --lib
proto_stdin|-p gang-agent --lib
"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "$targets" | while IFS='|' read -r name args; do
    [ -n "$name" ] || continue
    if [ $# -gt 0 ]; then
        case " $* " in *" $name "*) ;; *) continue ;; esac
    fi
    # shellcheck disable=SC2086 # the cargo arguments are meant to split
    if cargo test -q --release $args "fuzz_$name" -- --nocapture --test-threads 1 >"$out" 2>&1; then
        grep -E "^fuzz $name:" "$out"
    else
        grep -E "^fuzz $name|smallest failing|replay:" "$out" || tail -n 40 "$out"
        exit 1
    fi
done
