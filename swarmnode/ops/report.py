"""Human-readable views of a node's status reply (``swarmnode status`` / ``peers``).

Pure formatting of the JSON the control socket returns, read back into the typed
status first (``ops.status.ControlReply.from_json``): no I/O, no heavy imports, and
tolerant of missing keys (a bootstrap node or a node still loading answers with
fewer fields, each then at its default), so the CLI never crashes on an older or
partial reply. The nested figures only the libp2p transport gives (``nat``,
``reading``, ``counters``) are read as the dicts they are.
"""

from __future__ import annotations

from typing import Any

from swarmnode.learn.metrics import RoundRecord
from swarmnode.ops.status import ControlReply, TrainerStatus
from swarmnode.share.exchange import IngestFigures
from swarmnode.share.transport import TransportStats


def _counts(d: dict[str, Any] | None) -> str:
    if not d:
        return "none"
    return ", ".join(f"{k}={v}" for k, v in sorted(d.items()))


def _short(peer: str) -> str:
    return peer if len(peer) <= 16 else f"{peer[:8]}..{peer[-6:]}"


def format_peers(reply: dict[str, Any]) -> str:
    sw = ControlReply.from_json(reply).swarm
    if sw is None:
        return "swarm disabled: this node trains alone"
    peers = sw["connected_peers"]
    lines = [
        f"peer id:   {sw['peer_id']}",
        f"topic:     {sw.get('topic')}",
        f"connected: {len(peers)}   mesh: {sw['mesh_size']}   "
        f"topic peers: {sw.get('topic_peers', 0)}   dht: {sw.get('dht_routing_table', 0)}",
    ]
    kinds = (sw.get("nat") or {}).get("connections") or {}
    lines += [f"  {p}  {kinds.get(p, '')}".rstrip() for p in peers]
    lines += _nat_lines(sw)
    lines += _score_lines(sw)
    return "\n".join(lines)


def _nat_lines(sw: TransportStats) -> list[str]:
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


def _reading_lines(sw: TransportStats) -> list[str]:
    """CPU outside training against ``swarm.max_net_share``, and whether it binds."""
    rd = sw.get("reading") or {}
    if not rd:
        return []
    level = rd.get("net_share_level")
    held = "no peer held back" if level is None else f"heavy peers held to {level} units/s"
    share, cap = rd.get("net_share"), rd.get("net_share_cap")
    return [f"cpu outside training {share} of a core (cap {cap}): {held}"]


def _score_lines(sw: TransportStats) -> list[str]:
    """Peer scores (lowest first, as the transport lists them) and who is graylisted."""
    graylisted = sw["graylisted"]
    lines = [f"graylisted: {len(graylisted)}"] + [f"  {p}" for p in graylisted]
    scores = sw["peer_scores"]
    if scores:
        lines.append("peer scores (lowest first):")
    for peer, row in scores.items():
        mark = "  GRAYLISTED" if row.get("graylisted") else ""
        lines.append(
            f"  {_short(peer)}  {row.get('score', 0.0):>8.2f}{mark}  {_counts(row.get('verdicts'))}"
        )
    return lines


def format_status(reply: dict[str, Any]) -> str:
    st = ControlReply.from_json(reply)
    node = st.node
    role, state = (node.role, node.state) if node is not None else ("?", "-")
    lines = [f"pid {st.pid}  role {role}  state {state}"]
    if st.node_error is not None:
        lines.append(f"status error: {st.node_error}")
    trainer = node if isinstance(node, TrainerStatus) else None
    if trainer is not None and trainer.exchange is not None and trainer.exchange.swarm_failure:
        lines.append(f"SWARM FAILURE: {trainer.exchange.swarm_failure}")
    lines += ["swarm disabled"] if st.swarm is None else _swarm_lines(st.swarm)
    if trainer is not None:
        lines += _trainer_lines(trainer)
    return "\n".join(lines)


def _swarm_lines(sw: TransportStats) -> list[str]:
    return [
        f"peer id {sw['peer_id']}  running {sw['running']}",
        f"listen  {' '.join(sw['listen_addrs'])}",
        *_nat_lines(sw),
        f"peers {sw['num_peers']}  mesh {sw['mesh_size']}  "
        f"msgs in {sw['msgs_in']} out {sw['msgs_out']}  "
        f"bytes in {sw.get('bytes_in', 0)} out {sw.get('bytes_out', 0)}",
        f"rejected {sw['rejected_total']}: {_counts(sw['rejected'])}",
        f"inbox {sw['inbox_len']} (dropped {sw['inbox_dropped']})  "
        f"outbox dropped {sw.get('outbox_dropped', 0)}",
        *_reading_lines(sw),
        *_score_lines(sw),
    ]


def _trainer_lines(node: TrainerStatus) -> list[str]:
    lines = [f"round {node.round}  (max {node.max_rounds})"]
    ex = node.exchange
    if ex is not None:
        lines += _ingest_lines(ex.ingest)
        if ex.decode_failures:
            lines.append(f"decode failures: {_counts(ex.decode_failures)}")
        if ex.published:
            dropped = f"  dropped: {_counts(ex.publish_dropped)}" if ex.publish_dropped else ""
            lines.append(f"published: {_counts(ex.published)}{dropped}")
    if node.trained_from:
        forgotten = node.trained_from_forgotten
        lines.append(
            "trained on external groups from: "
            + _counts({_short(k): v for k, v in node.trained_from.items()})
            + (f"  (and {forgotten} peers forgotten)" if forgotten else "")
        )
    if node.last_round is not None:
        lines.append(_last_round_line(node.last_round))
    return lines


def _ingest_lines(ing: IngestFigures) -> list[str]:
    lines = [
        f"ingest accepted {ing.ingest_accepted}  rejected: {_counts(ing.ingest_rejected)}",
        f"queue {ing.queue_groups} groups, {ing.queue_bytes} bytes  "
        f"evicted: {_counts(ing.ingest_evicted)}  false claims {ing.ingest_claims_false}",
        f"ingest time share {ing.ingest_time_share}  (busy {ing.ingest_busy_s}s,"
        f" waited for budget {ing.ingest_budget_wait_s}s)",
    ]
    if ing.ingest_unverified:  # sapo.verify: when_drawn
        lines.append(
            f"queued unverified {ing.ingest_unverified}, verified when drawn "
            f"{ing.ingest_late_verified} ({ing.ingest_late_verify_s}s)"
        )
    per_peer = {_short(k): v for k, v in ing.per_peer.items()}
    return [*lines, "queue per peer: " + _counts(per_peer)]


def _last_round_line(rec: RoundRecord) -> str:
    return (
        f"last round: round={rec.round}  reward_mean={rec.reward_mean}"
        f"  accuracy={rec.accuracy}  groups_trained={rec.groups_trained}"
        f"  groups_skipped={rec.groups_skipped}  local_groups={rec.local_groups}"
        f"  external_groups={rec.external_groups}  external_peers={rec.external_peers}"
        f"  external_shortfall={rec.external_shortfall}  queue_groups={rec.queue_groups}"
        f"  gen_seconds={rec.gen_seconds}  train_seconds={rec.train_seconds}"
    )
