# Sourced by the recording scripts (gpu_topology.sh, gpu_parity.sh) after they set $out and $log:
#   step SECONDS OUTFILE CMD...   run CMD bounded by `timeout`, its stdout into OUTFILE, its
#                                 stderr appended to $out/stderr.txt, and its exit status noted
#                                 in $log; a failed step never stops the script.
step() {
    local secs=$1 file=$2; shift 2
    timeout "$secs" "$@" >"$file" 2>>"$out/stderr.txt"
    echo "exit $? (${secs}s limit): $* > $(basename "$file")" >>"$log"
}
