"""Human-readable views of a node's status reply (``swarmnode status`` / ``peers``).

Pure formatting of the JSON the control socket returns: no I/O, no heavy imports,
and tolerant of missing keys (a bootstrap node or a node still loading answers with
fewer fields), so the CLI never crashes on an older or partial reply.
"""

from __future__ import annotations

from typing import Any

from swarmnode.learn.metrics import RoundRecord


def _counts(d: dict[str, Any] | None) -> str:
    if not d:
        return "none"
    return ", ".join(f"{k}={v}" for k, v in sorted(d.items()))


def _short(peer: str) -> str:
    return peer if len(peer) <= 16 else f"{peer[:8]}..{peer[-6:]}"


def format_peers(reply: dict[str, Any]) -> str:
    sw = reply.get("swarm") or {}
    if not sw:
        return "swarm disabled: this node trains alone"
    peers = sw.get("connected_peers") or []
    lines = [
        f"peer id:   {sw.get('peer_id')}",
        f"topic:     {sw.get('topic')}",
        f"connected: {len(peers)}   mesh: {sw.get('mesh_size', 0)}   "
        f"topic peers: {sw.get('topic_peers', 0)}   dht: {sw.get('dht_routing_table', 0)}",
    ]
    kinds = (sw.get("nat") or {}).get("connections") or {}
    lines += [f"  {p}  {kinds.get(p, '')}".rstrip() for p in peers]
    lines += _nat_lines(sw)
    lines += _score_lines(sw)
    return "\n".join(lines)


def _nat_lines(sw: dict[str, Any]) -> list[str]:
    """Reachability (AutoNAT), relay slots held and served, peers reached via a relay."""
    nat = sw.get("nat") or {}
    if not nat:
        return []
    auto = nat.get("autonat") or {}
    slots = [_short(r.get("relay", "?")) for r in nat.get("relay_reservations") or []]
    kinds = nat.get("connections") or {}
    relayed = sum(1 for k in kinds.values() if k == "relayed")
    lines = [
        f"reachability: {nat.get('reachability', 'unknown')}"
        + (
            f" (AutoNAT: {auto.get('servers_ok', 0)} dialled back, "
            f"{auto.get('servers_failed', 0)} not)"
            if auto
            else " (AutoNAT off)"
        ),
        f"relay slots: {', '.join(slots) or 'none'}   relayed peers: {relayed}"
        f"   direct: {len(kinds) - relayed}",
    ]
    if nat.get("relay_serving"):
        lines.append(
            f"relaying for others: {nat.get('relay_reservations_served', 0)} slots, "
            f"{nat.get('relay_circuits_served', 0)} circuits"
        )
    via = (sw.get("counters") or {}).get("msgs_in_via_relay", 0)
    lines[-1] += f"   msgs in via relay: {via}"
    punched = nat.get("hole_punched") or {}
    if punched:
        lines.append(
            "hole punched (s from relayed to direct): "
            + _counts({_short(k): (v or {}).get("after_s") for k, v in punched.items()})
        )
    return lines


def _reading_lines(sw: dict[str, Any]) -> list[str]:
    """CPU outside training against ``swarm.max_net_share``, and whether it binds."""
    rd = sw.get("reading") or {}
    if not rd:
        return []
    level = rd.get("net_share_level")
    held = "no peer held back" if level is None else f"heavy peers held to {level} units/s"
    share, cap = rd.get("net_share"), rd.get("net_share_cap")
    return [f"cpu outside training {share} of a core (cap {cap}): {held}"]


def _score_lines(sw: dict[str, Any]) -> list[str]:
    """Peer scores (lowest first, as the transport lists them) and who is graylisted."""
    graylisted = sw.get("graylisted") or []
    lines = [f"graylisted: {len(graylisted)}"] + [f"  {p}" for p in graylisted]
    scores = sw.get("peer_scores") or {}
    if scores:
        lines.append("peer scores (lowest first):")
    for peer, row in scores.items():
        mark = "  GRAYLISTED" if row.get("graylisted") else ""
        lines.append(
            f"  {_short(peer)}  {row.get('score', 0.0):>8.2f}{mark}  {_counts(row.get('verdicts'))}"
        )
    return lines


def format_status(reply: dict[str, Any]) -> str:
    node = reply.get("node") or {}
    sw = reply.get("swarm") or {}
    role, state = node.get("role", "?"), node.get("state", "-")
    lines = [f"pid {reply.get('pid')}  role {role}  state {state}"]
    if "node_error" in reply:
        lines.append(f"status error: {reply['node_error']}")
    if node.get("swarm_failure"):
        lines.append(f"SWARM FAILURE: {node['swarm_failure']}")
    if sw:
        lines += [
            f"peer id {sw.get('peer_id')}  running {sw.get('running')}",
            f"listen  {' '.join(sw.get('listen_addrs') or [])}",
            *_nat_lines(sw),
            f"peers {sw.get('num_peers', 0)}  mesh {sw.get('mesh_size', 0)}  "
            f"msgs in {sw.get('msgs_in', 0)} out {sw.get('msgs_out', 0)}  "
            f"bytes in {sw.get('bytes_in', 0)} out {sw.get('bytes_out', 0)}",
            f"rejected {sw.get('rejected_total', 0)}: {_counts(sw.get('rejected'))}",
            f"inbox {sw.get('inbox_len', 0)} (dropped {sw.get('inbox_dropped', 0)})  "
            f"outbox dropped {sw.get('outbox_dropped', 0)}",
            *_reading_lines(sw),
            *_score_lines(sw),
        ]
    else:
        lines.append("swarm disabled")
    if "round" in node:
        lines.append(f"round {node['round']}  (max {node.get('max_rounds')})")
    ing = node.get("ingest")
    if ing:
        lines += [
            f"ingest accepted {ing.get('ingest_accepted', 0)}  "
            f"rejected: {_counts(ing.get('ingest_rejected'))}",
            f"queue {ing.get('queue_groups', 0)} groups, {ing.get('queue_bytes', 0)} bytes  "
            f"evicted: {_counts(ing.get('ingest_evicted'))}  "
            f"false claims {ing.get('ingest_claims_false', 0)}",
            f"ingest time share {ing.get('ingest_time_share', 0.0)}"
            f"  (busy {ing.get('ingest_busy_s', 0.0)}s,"
            f" waited for budget {ing.get('ingest_budget_wait_s', 0.0)}s)",
        ]
        if ing.get("ingest_unverified"):  # sapo.verify: when_drawn
            lines.append(
                f"queued unverified {ing['ingest_unverified']}, verified when drawn "
                f"{ing.get('ingest_late_verified', 0)} ({ing.get('ingest_late_verify_s', 0.0)}s)"
            )
        lines += [
            "queue per peer: "
            + _counts({_short(k): v for k, v in (ing.get("per_peer") or {}).items()}),
        ]
    if node.get("decode_failures"):
        lines.append(f"decode failures: {_counts(node['decode_failures'])}")
    if node.get("published"):
        lines.append(
            f"published: {_counts(node['published'])}"
            + (
                f"  dropped: {_counts(node['publish_dropped'])}"
                if node.get("publish_dropped")
                else ""
            )
        )
    if node.get("trained_from"):
        lines.append(
            "trained on external groups from: "
            + _counts({_short(k): v for k, v in node["trained_from"].items()})
        )
    last = node.get("last_round")
    if last:
        rec = RoundRecord.from_json(last)
        lines.append(
            f"last round: round={rec.round}  reward_mean={rec.reward_mean}"
            f"  accuracy={rec.accuracy}  groups_trained={rec.groups_trained}"
            f"  groups_skipped={rec.groups_skipped}  local_groups={rec.local_groups}"
            f"  external_groups={rec.external_groups}  external_peers={rec.external_peers}"
            f"  external_shortfall={rec.external_shortfall}  queue_groups={rec.queue_groups}"
            f"  gen_seconds={rec.gen_seconds}  train_seconds={rec.train_seconds}"
        )
    return "\n".join(lines)
