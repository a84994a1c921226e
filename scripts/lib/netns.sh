# Two "hosts" on this machine (sourced by tests and benchmarks): network namespaces $ns_a and
# $ns_b joined by a veth pair, 10.231.0.1 and 10.231.0.2, removed again on exit. Needs root and
# iproute2; `netns_pair_available` says whether they are there.
# usage: source scripts/lib/netns.sh; trap netns_pair_down EXIT; netns_pair_up [RATE]
#        (RATE: e.g. 1gbit, each direction shaped with tbf)
ns_a=ddpa$$ ns_b=ddpb$$ veth_a=va$$ veth_b=vb$$
addr_a=10.231.0.1 addr_b=10.231.0.2

netns_pair_available() { [[ $(id -u) -eq 0 ]] && command -v ip >/dev/null; }

netns_pair_down() {
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
  return 0
}

netns_pair_up() {
  local rate=${1:-}
  ip netns add "$ns_a" && ip netns add "$ns_b" &&
    ip link add "$veth_a" type veth peer name "$veth_b" &&
    ip link set "$veth_a" netns "$ns_a" && ip link set "$veth_b" netns "$ns_b" &&
    ip -n "$ns_a" addr add "$addr_a/30" dev "$veth_a" &&
    ip -n "$ns_b" addr add "$addr_b/30" dev "$veth_b" &&
    ip -n "$ns_a" link set lo up && ip -n "$ns_b" link set lo up &&
    ip -n "$ns_a" link set "$veth_a" up && ip -n "$ns_b" link set "$veth_b" up || return 1
  if [[ -n $rate ]]; then
    # Token bucket on both ends: each direction runs at RATE (this kernel has no netem, so no
    # added delay).
    ip netns exec "$ns_a" tc qdisc add dev "$veth_a" root tbf rate "$rate" burst 128kb latency 50ms &&
      ip netns exec "$ns_b" tc qdisc add dev "$veth_b" root tbf rate "$rate" burst 128kb latency 50ms
  fi
}

# Runs one ddprun node in each namespace: `DDPRUN --nnodes 2 --master-addr $addr_a --node-rank R
# ARGS...`, node 0 in $ns_a and node 1 in $ns_b, each bounded by SECONDS, their output in LOG_A
# and LOG_B. Sets netns_rc_a and netns_rc_b to their exit codes; fails when either failed.
# usage: netns_run_two_nodes SECONDS DDPRUN LOG_A LOG_B ARGS...
netns_run_two_nodes() {
  local seconds=$1 ddprun=$2 log_a=$3 log_b=$4
  shift 4
  local both=(--nnodes 2 --master-addr "$addr_a")
  ip netns exec "$ns_a" timeout "$seconds" "$ddprun" "${both[@]}" --node-rank 0 "$@" >"$log_a" 2>&1 &
  local pa=$!
  ip netns exec "$ns_b" timeout "$seconds" "$ddprun" "${both[@]}" --node-rank 1 "$@" >"$log_b" 2>&1 &
  local pb=$!
  netns_rc_a=0 netns_rc_b=0
  wait "$pa" || netns_rc_a=$?
  wait "$pb" || netns_rc_b=$?
  ((netns_rc_a == 0 && netns_rc_b == 0))
}
