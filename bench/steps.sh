# Sourced by the bench/h200_*.sh device scripts: logs under $OUT (default ./h200-logs), and
#   step NAME SECONDS COMMAND...   run COMMAND with its own time limit (a slow step cannot eat
#                                  the device call), keep its log, print its last $TAIL lines
set -uo pipefail
OUT=${OUT:-h200-logs}
mkdir -p "$OUT"
step() {
    local name=$1 secs=$2; shift 2
    local t0=$SECONDS
    timeout "$secs" "$@" > "$OUT/$name.log" 2>&1
    echo "== $name (rc $?, $((SECONDS - t0)) s)"; grep -v "it/s" "$OUT/$name.log" | tail -n "${TAIL:-14}" | cut -c1-200
}
# packed_logs NAME: the steps' logs under $LOGS = $OUT/logs (absolute: a step may run from
# another folder, as an A/B's baseline tree does), and `pack` tars them to
# $OUT/NAME-logs.tgz (the device returns 8 files: pack after every step, so a call cut
# short still returns what ran)
packed_logs() {
    OUT=$(cd "$OUT" && pwd)
    LOGS=$OUT/logs
    PACKED=$OUT/$1-logs.tgz
    mkdir -p "$LOGS"
}
pack() { tar czf "$PACKED" -C "$LOGS" . ; }
# same_digests NAME SECONDS KIND ROWS TUNE: check_layer's digests of KIND (glm5, fp8, cuda) at
# ROWS with the defaults and with --tune TUNE, compared (the step fails on any difference)
same_digests() {
    local name=$1 secs=$2 kind=$3 rows=$4 tune=$5
    local cl="python3 -m tools.check_layer --kind $kind --config glm5 --rows $rows --kv fp8"
    OUT=$LOGS step "$name" "$secs" bash -c "$cl --backend cuda --dump $LOGS/d_a && $cl \
        --backend cuda --tune $tune --dump $LOGS/d_b && python3 -m tools.check_layer \
        --compare $LOGS/d_a $LOGS/d_b"
    pack
    rm -rf "$LOGS/d_a" "$LOGS/d_b"
}
