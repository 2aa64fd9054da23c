# llama-server's router for the benchmarks that serve the roster through it (sourced, not run):
# one child server per roster model, each with PARALLEL slots, every model loaded before the
# clock starts; and its stop, children included.
#
#   router_keys=(…) router_names=(…) router_files=(…)   # roster model, served name, GGUF file
#   router_start BIN PREFIX PORT PARALLEL CTX_PER_SLOT THREADS   # writes PREFIX.ini and PREFIX.log
#   …                                                             # $router_pid is the router
#   router_stop
#
# A section is named by the roster model (a section name with a colon would be read as a
# repository and tag, the tag upper-cased) and answers to the served name as its alias.

router_pid=""

router_start() {
  local bin=$1 prefix=$2 port=$3 parallel=$4 ctx=$5 threads=$6 i
  {
    echo "version = 1"
    echo "[*]"
    echo "parallel = $parallel"
    echo "ctx-size = $((parallel * ctx))"
    echo "threads = $threads"
    echo "threads-batch = $threads"
    for i in "${!router_keys[@]}"; do
      echo "[${router_keys[$i]}]"
      echo "alias = ${router_names[$i]}"
      echo "model = $(realpath "${router_files[$i]}")"
      echo "load-on-startup = true"
    done
  } > "$prefix.ini"
  "$bin/llama-server" --models-preset "$prefix.ini" --models-max "${#router_keys[@]}" \
    --host 127.0.0.1 --port "$port" > "$prefix.log" 2>&1 &
  router_pid=$!
  local loaded=0
  for _ in $(seq 900); do
    loaded=$(curl -sf "http://127.0.0.1:$port/models" 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)["data"]
print(sum(1 for m in d if (m.get("status") or {}).get("value") == "loaded"))' 2>/dev/null || echo 0)
    ((loaded >= ${#router_keys[@]})) && break
    kill -0 "$router_pid" 2>/dev/null || break
    sleep 1
  done
  if ((loaded < ${#router_keys[@]})); then
    echo "llama-server's router loaded $loaded of ${#router_keys[@]} models; its log:" >&2
    tail -n 40 "$prefix.log" >&2
    return 1
  fi
}

# The router and its children (one server process per model), and their memory back.
router_stop() {
  [[ -n $router_pid ]] || return 0
  local kids
  kids=$(pgrep -P "$router_pid" || true)
  kill "$router_pid" $kids 2>/dev/null || true
  wait "$router_pid" 2>/dev/null || true
  for _ in $(seq 60); do
    kill -0 $kids 2>/dev/null || break
    sleep 1
  done
  router_pid=""
}
