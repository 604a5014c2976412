"""The ``keygen`` and ``id`` commands: a node's identity and swarm key, as text for the CLI.

Role: the CLI's view of ``p2p.identity`` (the key files themselves); ``id`` asks a
running node for its live addresses and falls back to the configured ones.

Invariants:
- An existing identity key is kept, never overwritten; a PSK is never overwritten.
- ``id`` never fails because no node runs: it says where its addresses came from.
"""

from __future__ import annotations

from pathlib import Path

from swarmnode.config import Config
from swarmnode.ops.control import ControlError, query_status
from swarmnode.p2p.identity import (
    PSK_FILE,
    create_psk,
    identity_path,
    load_or_create_identity,
    peer_id_of,
)


def keygen(data_dir: Path, psk: bool = False) -> str:
    """``swarmnode keygen [--psk]``: make the identity (or a PSK file); return a report."""
    if psk:
        path = Path(data_dir) / PSK_FILE
        create_psk(path)
        return (
            f"wrote a pre-shared key to {path} (mode 0600)\n"
            "copy it to every node of the private swarm and set swarm.psk_file to it"
        )
    path = identity_path(Path(data_dir))
    kp, created = load_or_create_identity(path)
    verb = "created" if created else "kept existing"
    return f"{verb} identity {path}\npeer id: {peer_id_of(kp)}"


def node_id(cfg: Config) -> str:
    """``swarmnode id``: peer ID plus listen multiaddrs (live ones if the node runs)."""
    data_dir = Path(cfg.node.data_dir)
    kp, _ = load_or_create_identity(identity_path(data_dir, cfg.swarm.key_file))
    pid = peer_id_of(kp)
    try:
        addrs = list(query_status(data_dir, timeout=2.0)["swarm"]["listen_addrs"])
        source = "running node"
    except (ControlError, KeyError, TypeError):
        addrs = [f"{a}/p2p/{pid}" for a in (cfg.swarm.announce or cfg.swarm.listen)]
        source = "config (node not running; port 0 means chosen at start)"
    return "\n".join([f"peer id: {pid}", f"addresses ({source}):", *(f"  {a}" for a in addrs)])
