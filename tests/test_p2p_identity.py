"""Identity key and PSK files: created 0600, reused across restarts, bad files refused."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from swarmnode.p2p.identity import (
    IdentityError,
    create_psk,
    identity_path,
    load_or_create_identity,
    load_psk,
    peer_id_of,
)


def test_identity_created_private_and_reused(tmp_path: Path) -> None:
    path = identity_path(tmp_path / "node")
    kp, created = load_or_create_identity(path)
    assert created
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again, created_again = load_or_create_identity(path)
    assert not created_again
    assert peer_id_of(again) == peer_id_of(kp)
    assert peer_id_of(kp).startswith("12D3KooW")  # Ed25519 peer IDs


def test_identity_refuses_world_readable_and_garbage(tmp_path: Path) -> None:
    path = identity_path(tmp_path)
    load_or_create_identity(path)
    path.chmod(0o644)
    with pytest.raises(IdentityError, match="chmod 600"):
        load_or_create_identity(path)
    path.chmod(0o600)
    path.write_bytes(b"not a key")
    with pytest.raises(IdentityError):
        load_or_create_identity(path)


def test_key_file_setting_overrides_data_dir(tmp_path: Path) -> None:
    assert identity_path(tmp_path, str(tmp_path / "k" / "id")) == tmp_path / "k" / "id"


def test_psk_file_format_and_checks(tmp_path: Path) -> None:
    path = tmp_path / "swarm.key"
    key = create_psk(path)
    assert path.read_text().splitlines() == ["/key/swarm/psk/1.0.0/", "/base16/", key]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_psk(path) == key and len(key) == 64
    with pytest.raises(IdentityError, match="already exists"):
        create_psk(path)
    path.write_text("/key/swarm/psk/1.0.0/\n/base16/\nabc\n")
    with pytest.raises(IdentityError, match="64 hex"):
        load_psk(path)
    path.write_text("/key/swarm/psk/1.0.0/\n/base64/\n" + "0" * 64 + "\n")
    with pytest.raises(IdentityError, match=r"not a swarm\.key"):
        load_psk(path)
