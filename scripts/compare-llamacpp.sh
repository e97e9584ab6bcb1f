#!/usr/bin/env bash
# Decode tokens/s of lynx-moe beside reference engines (ik_llama.cpp with run-time repack,
# llama.cpp) on the same GGUF files, with B DISTINCT sequences: every engine decodes the same B
# prompts of random token ids (one line each of a prompt file), so that each sequence routes on
# its own (llama-batched-bench feeds token 0 to every sequence: all route alike, which is not an
# MoE batch). Per file and pass the engines run one after the other over all batch sizes, their
# order rotating pass by pass; the ratios are taken within a pass (what the machine's drift
# between passes does not move) and reported as the median and the range over passes. Beside
# it: prompt tokens/s of one 512-token prompt (lynx-moe with bench --warmup, an untimed prefill
# of the same prompt in the same context first, as a serving process has done; the peers' -q
# run comes after their decode runs in the same process, in a fresh context), and the
# machine's best read bandwidth measured in
# the same run (a probe at the start of every pass over several buffer sizes, plus each lynx-moe
# run's own probe; the peak over all of them) as the limit: tokens/s if the weight bytes that
# lynx-moe reads per step (its bench counts them for these very sequences) streamed at that
# peak. Prints one markdown table per file.
#
#   IK_LLAMA_DIR=/path/to/ik_llama.cpp LLAMA_CPP_DIR=/path/to/llama.cpp \
#     bash scripts/compare-llamacpp.sh [-p PASSES] [-b 1,2,4,8,16,32] [-t THREADS] [-g TOKENS]
#       [-P PROMPT] [-q PREFILL] [-e lynx,lynx2,ik,llama] [-V VOCAB] [-w passive|active] FILE.gguf...
#
# The reference engines are not part of this project and this script does not build them:
# build each beside the project (CPU backend, native instructions, Release; libllama as a
# shared library, the default) and point IK_LLAMA_DIR / LLAMA_CPP_DIR at its source tree (the
# headers under include/ and ggml/include/; libllama.so is looked up under build/, or set
# IK_LLAMA_LIB / LLAMA_CPP_LIB to its directory). The script compiles scripts/peer-decode.cc,
# a small client of each engine's library, into a temporary directory. An engine whose
# directory is not set is skipped; one that cannot load a file (an architecture it lacks) shows
# "-" for that file. lynx-moe: build/release/bin/lynx-moe, or LYNX_MOE; LYNX_ARGS adds flags to
# its bench runs (e.g. LYNX_ARGS=--bf16-acts for the BF16 fast mode, ik_llama.cpp's arithmetic).
# Engine lynx2 is a second lynx-moe run with LYNX2_ARGS instead (default --bf16-acts), so that
# two modes of lynx-moe are measured interleaved in the same passes: -e lynx,lynx2,ik.
#
# BW_SIZES sets the buffers (MiB) of the bandwidth probe (default 256,512,1024,2048; smaller
# inside a memory cgroup, scripts/offload-bench.sh); IK_RTR=0 runs ik_llama.cpp without -rtr
# (the weights then stay in the file mapping, as llama.cpp's do). PEER_CACHE_TYPE=f16|q8_0 sets
# the peers' K and V cache type (-ctk/-ctv; their default is f16), to match LYNX_ARGS's
# --cache-type-k/--cache-type-v.
#
# -w sets OMP_WAIT_POLICY for the peers (OpenMP threads; default passive): with the default
# active policy their barriers spin, and on a machine whose cores are shared with other work a
# spinning thread holds the core its partner needs; on this project's shared 2-vCPU VM that made
# llama.cpp 50-200x slower on the bundled 8x2 model (2-5 tok/s against 230-400 with passive).
# On a dedicated machine run both and keep the faster. lynx-moe's pool sleeps when idle.
#
# Each engine computes in its own arithmetic: lynx-moe exact F32 products on F32/F16/BF16
# weights and ggml's Q8_0 activations on Q8_0/Q4_0 weights; ik_llama.cpp with -rtr rounds
# activations to bf16 on BF16 weights and, on CPUs with AVX512_BF16, turns F16 weights into
# BF16; its 8-bit activations are not ggml's Q8_0 (docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/.."
passes=3
batches=1,2,4,8,16,32
threads=2
gen=32
prompt=32
prefill=512
engines=lynx,ik,llama
vocab=32000
omp_wait=passive
while getopts "p:b:t:g:P:q:e:V:w:" opt; do
  case $opt in
    p) passes=$OPTARG ;;
    b) batches=$OPTARG ;;
    t) threads=$OPTARG ;;
    g) gen=$OPTARG ;;
    P) prompt=$OPTARG ;;
    q) prefill=$OPTARG ;;
    e) engines=$OPTARG ;;
    V) vocab=$OPTARG ;;
    w) omp_wait=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -gt 0 ]] || {
  echo "usage: $0 [-p N] [-b LIST] [-t N] [-g N] [-P N] [-q N] [-e LIST] [-V N] [-w POLICY]" \
    "FILE.gguf..." >&2
  exit 2
}
lynx=${LYNX_MOE:-build/release/bin/lynx-moe}
[[ -x $lynx ]] || { echo "build lynx-moe first (make build) or set LYNX_MOE" >&2; exit 1; }
command -v jq >/dev/null || { echo "needs jq (scripts/install-deps.sh)" >&2; exit 1; }
for f in "$@"; do [[ -f $f ]] || { echo "no such file: $f" >&2; exit 1; }; done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
raw=$work/raw  # lines: file engine pass batch decode_tps | file engine pass prefill tps
touch "$raw"

# Compile the library client against one engine; prints nothing, leaves $work/peer-NAME.
source scripts/peer-lib.sh
compile_client() { peer_compile "$1" "$2" "$3" "$4" "$work"; }
active=()
for e in ${engines//,/ }; do
  case $e in
    lynx | lynx2) active+=("$e") ;;
    ik)
      if [[ -n ${IK_LLAMA_DIR:-} ]]; then
        compile_client ik "$IK_LLAMA_DIR" "${IK_LLAMA_LIB:-}" -DPEER_IK && active+=(ik)
      else
        echo "IK_LLAMA_DIR not set: ik_llama.cpp skipped" >&2
      fi
      ;;
    llama)
      if [[ -n ${LLAMA_CPP_DIR:-} ]]; then
        compile_client llama "$LLAMA_CPP_DIR" "${LLAMA_CPP_LIB:-}" "" && active+=(llama)
      else
        echo "LLAMA_CPP_DIR not set: llama.cpp skipped" >&2
      fi
      ;;
    *) echo "unknown engine $e (lynx, lynx2, ik, llama)" >&2; exit 2 ;;
  esac
done

# Prompts: one line per sequence of random ids below -V (default 32000: inside the vocabulary
# of every real shape), each as long as the prefill prompt; decode uses the first $prompt ids of the first B lines.
maxb=$(tr , '\n' <<<"$batches" | sort -n | tail -1)
awk -v n="$maxb" -v vocab="$vocab" -v len="$((prefill > prompt ? prefill : prompt))" 'BEGIN {
  srand(20261201)
  for (i = 0; i < n; ++i) {
    line = ""
    for (j = 0; j < len; ++j) line = line (j ? " " : "") int(rand() * vocab)
    print line
  } }' >"$work/prompts"

# Waits (at most 30 s) until the machine steals no CPU time from this VM for a whole second.
# Right after a process frees gigabytes, the VM's host reclaims them on this VM's CPUs: a
# 512-token prefill started then ran 0.75x as fast, with 210 ms of steal time, against no
# steal 20 s later (docs/benchmarks.md, "The KV cache reserved, not grown"). Every timed run
# waits here first, whichever engine ran before it.
settle() {
  local i s0 s1
  for ((i = 0; i < 30; ++i)); do
    s0=$(awk '/^cpu /{print $9}' /proc/stat)
    sleep 1
    s1=$(awk '/^cpu /{print $9}' /proc/stat)
    ((s1 == s0)) && return 0
  done
}

probe_bw() {  # the peak over buffer sizes of lynx-moe's segment-best read probe
  "$lynx" bench -m models/lynx-moe-8x2.gguf --batch 1 --prompt 1 --gen 1 -r 1 \
    --threads "$threads" --bw-sizes "${BW_SIZES:-256,512,1024,2048}" -o json 2>/dev/null |
    jq -r ".peak_read_bandwidth_gbps[\"$threads\"]"
}

run_engine() {  # engine file pass
  local e=$1 f=$2 pass=$3 out=$work/out
  case $e in
    lynx | lynx2)
      local args=${LYNX_ARGS:-}
      [[ $e == lynx2 ]] && args=${LYNX2_ARGS:---bf16-acts}
      settle
      # shellcheck disable=SC2086  # extra bench flags, word-split on purpose
      if "$lynx" bench -m "$f" --batch "$batches" --threads "$threads" --prompt "$prompt" \
        --gen "$gen" -r 1 --prompt-file "$work/prompts" $args -o json >"$out" \
        2>"$work/err"; then
        jq -r --arg f "$f" --arg e "$e" --arg p "$pass" '.rows[] |
          "\($f) \($e) \($p) \(.batch) \(.decode_tps) \(.bytes_per_step) \(.storage_bytes_per_token // 0)"' \
          "$out" >>"$raw"
        jq -r ".peak_read_bandwidth_gbps[\"$threads\"]" "$out" >>"$work/bw"
      else
        echo "lynx-moe failed on $f: $(tail -1 "$work/err")" >&2
      fi
      settle
      # shellcheck disable=SC2086
      if "$lynx" bench -m "$f" --batch 1 --threads "$threads" --prompt "$prefill" --gen 1 -r 1 \
        --prompt-file "$work/prompts" --bandwidth 1 --warmup $args -o json >"$out" 2>"$work/err"; then
        jq -r --arg f "$f" --arg e "$e" --arg p "$pass" '.rows[] | "\($f) \($e) \($p) prefill \(.prefill_tps)"' \
          "$out" >>"$raw"
      fi
      ;;
    ik | llama)
      local rtr=""
      [[ $e == ik && ${IK_RTR:-1} != 0 ]] && rtr=--rtr
      [[ -n ${PEER_CACHE_TYPE:-} ]] && rtr+=" --cache-type $PEER_CACHE_TYPE"
      settle
      # shellcheck disable=SC2086  # $rtr: the peer's extra flags, word-split on purpose
      if OMP_WAIT_POLICY=$omp_wait LD_LIBRARY_PATH="$(cat "$work/lib-$e")" "$work/peer-$e" -m "$f" -f "$work/prompts" \
        -b "$batches" -p "$prompt" -g "$gen" -t "$threads" -q "$prefill" $rtr \
        >"$out" 2>"$work/err"; then
        awk -v f="$f" -v e="$e" -v p="$pass" '{
          for (i = 1; i <= NF; ++i) { split($i, kv, "="); v[kv[1]] = kv[2] }
          if (v["gen"] > 0) print f, e, p, v["batch"], v["decode_tps"], v["distinct_tokens"],
            v["storage_bytes_per_token"] + 0
          else print f, e, p, "prefill", v["prefill_tps"] }' "$out" >>"$raw"
      else
        echo "$e could not run $f: $(grep -v '^llama\|^llm_\|^load\|^print_info' "$work/err" |
          tail -1)" >&2
      fi
      ;;
  esac
}

echo "engines: ${active[*]}; $passes passes, B = $batches, $threads threads, prompts of $prompt" \
  "random ids, $gen decode steps, prefill $prefill tokens, peers with OMP_WAIT_POLICY=$omp_wait" >&2
for pass in $(seq 1 "$passes"); do
  probe_bw >>"$work/bw"
  n=${#active[@]}
  for f in "$@"; do
    for i in $(seq 0 $((n - 1))); do
      e=${active[$(((i + pass - 1) % n))]}
      echo "pass $pass $(basename "$f") $e $(uptime | sed 's/.*load/load/')" >&2
      run_engine "$e" "$f" "$pass"
    done
  done
done
peak=$(sort -g "$work/bw" | tail -1)
echo "read bandwidth probes (GB/s): $(sort -g "$work/bw" | tr '\n' ' ')" >&2

# One table per file: per engine the median tok/s and its range over passes; per peer the
# median of lynx-moe's per-pass ratios and their range; the limit from the peak bandwidth.
ikname="ik_llama.cpp -rtr"
[[ ${IK_RTR:-1} == 0 ]] && ikname="ik_llama.cpp (mmap)"
awk -v peak="$peak" -v engines="${active[*]}" -v lynx2="${LYNX2_ARGS:---bf16-acts}" -v passes="$passes" -v gen="$gen" -v ikname="$ikname" '
  function median(s,   a, n, i, j, t) {
    n = split(s, a, " ")
    for (i = 2; i <= n; ++i) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; --j) {
      t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  function lo(s,   a, n, i, m) { n = split(s, a, " "); m = a[1]
    for (i = 2; i <= n; ++i) if (a[i] + 0 < m + 0) m = a[i]; return m }
  function hi(s,   a, n, i, m) { n = split(s, a, " "); m = a[1]
    for (i = 2; i <= n; ++i) if (a[i] + 0 > m + 0) m = a[i]; return m }
  function cell(s) { return s == "" ? "-" : sprintf("%.1f (%.1f-%.1f)", median(s), lo(s), hi(s)) }
  function rcell(s) { return s == "" ? "-" : sprintf("%.2f (%.2f-%.2f)", median(s), lo(s), hi(s)) }
  { f = $1; e = $2; p = $3; b = $4
    if (!(f in seen)) { seen[f] = 1; files[++nf] = f }
    k = f SUBSEP e SUBSEP b
    tps[k] = tps[k] (tps[k] == "" ? "" : " ") $5
    val[f SUBSEP e SUBSEP b SUBSEP p] = $5
    if (b != "prefill" && !((f SUBSEP b) in bseen)) { bseen[f SUBSEP b] = 1; bl[f] = bl[f] " " b }
    if (e ~ /^lynx/ && b != "prefill") bytes[f SUBSEP e SUBSEP b] = bytes[f SUBSEP e SUBSEP b] " " $6
    if (e !~ /^lynx/ && b != "prefill") dist[f SUBSEP e SUBSEP b] = dist[f SUBSEP e SUBSEP b] " " $6
    if (b != "prefill" && NF >= 7) {
      io[f SUBSEP e SUBSEP b] = io[f SUBSEP e SUBSEP b] " " $7
      if ($7 > 0) anyio[f] = 1 } }
  END {
    ne = split(engines, en, " ")
    name["lynx"] = "lynx-moe"; name["lynx2"] = "lynx-moe " lynx2; name["ik"] = ikname; name["llama"] = "llama.cpp"
    for (fi = 1; fi <= nf; ++fi) {
      f = files[fi]; short = f; sub(".*/", "", short)
      printf "\n%s: decode tok/s, median (min-max) over %d passes; limit at %.1f GB/s\n\n", \
        short, passes, peak
      hdr = "| B |"; sep = "|--:|"
      for (i = 1; i <= ne; ++i) { hdr = hdr " " name[en[i]] " |"; sep = sep "--:|" }
      for (l = 1; l <= ne; ++l) if (en[l] ~ /^lynx/)
        for (i = 1; i <= ne; ++i) if (en[i] !~ /^lynx/) {
          hdr = hdr " " name[en[l]] " / " name[en[i]] " |"; sep = sep "--:|" }
      hdr = hdr " limit tok/s |"; sep = sep "--:|"
      print hdr; print sep
      nb = split(bl[f], bs, " ")
      for (j = 1; j <= nb; ++j) {
        b = bs[j]; row = "| " b " |"
        for (i = 1; i <= ne; ++i) row = row " " cell(tps[f SUBSEP en[i] SUBSEP b]) " |"
        for (l = 1; l <= ne; ++l) if (en[l] ~ /^lynx/)
          for (i = 1; i <= ne; ++i) if (en[i] !~ /^lynx/) {
            r = ""
            for (p = 1; p <= passes; ++p) {
              y = val[f SUBSEP en[l] SUBSEP b SUBSEP p]; x = val[f SUBSEP en[i] SUBSEP b SUBSEP p]
              if (y != "" && x != "" && x > 0) r = r (r == "" ? "" : " ") y / x
            }
            row = row " " rcell(r) " |"
          }
        by = bytes[f SUBSEP "lynx" SUBSEP b]
        if (by == "") by = bytes[f SUBSEP "lynx2" SUBSEP b]
        lim = by == "" ? "-" : sprintf("%.1f", b * peak * 1e9 / median(by))
        row = row " " lim " |"
        print row
      }
      row = "| prefill " "'"$prefill"'" " |"
      for (i = 1; i <= ne; ++i) row = row " " cell(tps[f SUBSEP en[i] SUBSEP "prefill"]) " |"
      for (l = 1; l <= ne; ++l) if (en[l] ~ /^lynx/)
        for (i = 1; i <= ne; ++i) if (en[i] !~ /^lynx/) {
          r = ""
          for (p = 1; p <= passes; ++p) {
            y = val[f SUBSEP en[l] SUBSEP "prefill" SUBSEP p]
            x = val[f SUBSEP en[i] SUBSEP "prefill" SUBSEP p]
            if (y != "" && x != "" && x > 0) r = r (r == "" ? "" : " ") y / x
          }
          row = row " " rcell(r) " |"
        }
      print row " |"
      for (i = 1; i <= ne; ++i) if (en[i] !~ /^lynx/) {
        line = ""
        for (j = 1; j <= nb; ++j) {
          d = dist[f SUBSEP en[i] SUBSEP bs[j]]
          if (d != "") line = line sprintf(" B=%s: %.1f", bs[j], median(d))
        }
        if (line != "") printf "\n%s distinct next tokens per step (a check that the " \
          "sequences differ):%s\n", name[en[i]], line
      }
      if (f in anyio) {  # a model larger than memory: what each engine read from storage
        printf "\nMB read from storage per decoded token (/proc/self/io read_bytes over the " \
          "decode steps), median over passes:\n\n"
        hdr = "| B |"; sep = "|--:|"
        for (i = 1; i <= ne; ++i) { hdr = hdr " " name[en[i]] " |"; sep = sep "--:|" }
        print hdr; print sep
        for (j = 1; j <= nb; ++j) {
          row = "| " bs[j] " |"
          for (i = 1; i <= ne; ++i) {
            d = io[f SUBSEP en[i] SUBSEP bs[j]]
            row = row " " (d == "" ? "-" : sprintf("%.1f", median(d) / 1e6)) " |"
          }
          print row
        }
      }
    }
  }' "$raw"
