"""Collectors (AGGREGATE): job-wide facts gathered from context events, for the refiners that follow."""

from __future__ import annotations

import ipaddress

from firstfault.engine.rules_api import Expect, RuleCase, collector
from firstfault.engine.workspace import Workspace


def _routable(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return not (ip.is_loopback or ip.is_unspecified or ip.is_link_local)


@collector("IpToNodeMap", doc="""
Map the addresses NCCL uses (Bootstrap / OOB interface lines) to the node that printed them, so that peers
named by IP in network errors can be resolved to nodes. An address printed by more than one node (127.0.0.1,
a container bridge's 172.17.0.1) identifies no node and is left out; so are loopback and link-local ones.
""", cases=[
    RuleCase(title="peer named by two nodes", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>",
                     "2025-01-01T00:10:00Z a:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.3<1> with status=12 opcode=0 len=0 vendor err 129 (Send)"],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.2<0>",
                     "2025-01-01T00:10:00Z b:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.3<1> with status=12 opcode=0 len=0 vendor err 129 (Send)"],
        "c/applog": ["2025-01-01T00:00:01Z c:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.3<0>"]},
        expect=Expect(fired=True, culprits=["c"], sub_domain="network")),
])
def ip_to_node_map(ws: Workspace) -> None:
    claims: dict[str, set[str]] = {}
    for event in ws.facts_of("ip_map"):
        if not event.node:
            continue
        for address in set(event.values.get("address", [])) | {str(event.attributes.get("address", ""))}:
            if address and _routable(address):
                claims.setdefault(address, set()).add(event.node)
    mapping = {ip: next(iter(nodes)) for ip, nodes in claims.items() if len(nodes) == 1}
    ws.facts["ip_to_node"] = mapping
    shared = sorted(ip for ip, nodes in claims.items() if len(nodes) > 1)
    if mapping or shared:
        ws.note("collect", f"{len(mapping)} node addresses from NCCL interface lines"
                + (f"; ignored (claimed by several nodes): {', '.join(shared)}" if shared else ""))
