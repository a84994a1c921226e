# N "hosts" on this machine (sourced by tests and benchmarks): network namespaces ${node_ns[i]}
# with addresses ${node_addr[i]} = 10.233.0.(i+1) on interfaces ${node_if[i]}, each joined by a veth pair to a bridge in a
# hub namespace of their own, so that one node's link can be cut (netns_node_link down I) while
# the others still reach each other. Needs root and iproute2; removed again by netns_nodes_down.
# usage: source scripts/lib/netns_nodes.sh; trap netns_nodes_down EXIT; netns_nodes_up N
ns_hub=ddph$$
node_ns=() node_addr=() node_if=()

netns_nodes_available() { [[ $(id -u) -eq 0 ]] && command -v ip >/dev/null; }

netns_nodes_down() {
  local ns
  for ns in "${node_ns[@]}" "$ns_hub"; do
    # Whatever still runs in a namespace goes with it (a test that failed half-way).
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  return 0
}

netns_nodes_up() {
  local n=$1 i
  ip netns add "$ns_hub" && ip -n "$ns_hub" link add br0 type bridge &&
    ip -n "$ns_hub" link set br0 up || return 1
  for ((i = 0; i < n; i++)); do
    node_ns[i]=ddpn$$_$i
    node_addr[i]=10.233.0.$((i + 1))
    node_if[i]=vn$$_$i
    ip netns add "${node_ns[i]}" &&
      ip link add "vn$$_$i" type veth peer name "vh$$_$i" &&
      ip link set "vn$$_$i" netns "${node_ns[i]}" && ip link set "vh$$_$i" netns "$ns_hub" &&
      ip -n "$ns_hub" link set "vh$$_$i" master br0 up &&
      ip -n "${node_ns[i]}" addr add "${node_addr[i]}/24" dev "vn$$_$i" &&
      ip -n "${node_ns[i]}" link set "vn$$_$i" up && ip -n "${node_ns[i]}" link set lo up ||
      return 1
  done
}

# netns_node_link I up|down: node I's cable, plugged in or pulled.
netns_node_link() { ip -n "$ns_hub" link set "vh$$_$1" "$2"; }

# The processes still running in node I's namespace.
netns_node_pids() { ip netns pids "${node_ns[$1]}" 2>/dev/null; }
