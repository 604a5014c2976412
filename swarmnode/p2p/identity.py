"""Node identity and private-swarm key files.

Role: make, load and check the two secrets a node keeps on disk.

Invariants:
- The identity is an Ed25519 key stored as the standard libp2p protobuf private
  key (the format go-libp2p and py-libp2p use), created on first use with file
  mode 0600 and reused afterwards, so the peer ID survives restarts. An existing
  key is never overwritten; a key file readable by group/others is refused.
- A pre-shared key (PSK) file uses the libp2p ``swarm.key`` text format::

      /key/swarm/psk/1.0.0/
      /base16/
      <64 hex digits>

  Loading returns the 64 hex digits, the form ``libp2p.new_host(psk=...)`` takes.
- Files are written atomically (temp file + rename) so a crash never leaves a
  half-written key behind.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from google.protobuf.message import DecodeError
from libp2p.crypto.ed25519 import Ed25519PrivateKey
from libp2p.crypto.exceptions import CryptographyError
from libp2p.crypto.keys import KeyPair, KeyType
from libp2p.crypto.serialization import deserialize_private_key
from libp2p.peer.id import ID

from swarmnode.errors import SwarmnodeError

IDENTITY_FILE = "identity.key"
PSK_FILE = "swarm.key"
PSK_HEADER = "/key/swarm/psk/1.0.0/"
PSK_ENCODING = "/base16/"


class IdentityError(SwarmnodeError):
    """A key file that exists but cannot be used; the message names the file."""


def _write_private(path: Path, data: bytes) -> None:
    """Create ``path`` with mode 0600 atomically; refuse to replace an existing file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        # link() fails if the target appeared meanwhile: two starters never clobber a key.
        os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _check_private(path: Path) -> None:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise IdentityError(
            f"{path}: key file mode is {mode:o}; it must be readable by its owner only "
            f"(chmod 600 {path})"
        )


def identity_path(data_dir: Path, key_file: str | None = None) -> Path:
    """Where the identity key lives: ``key_file`` if set, else ``<data_dir>/identity.key``."""
    return Path(key_file).expanduser() if key_file else Path(data_dir) / IDENTITY_FILE


def load_identity(path: Path) -> KeyPair:
    """Read an existing Ed25519 identity; raise IdentityError if unusable."""
    _check_private(path)
    try:
        key = deserialize_private_key(path.read_bytes())
    except (OSError, ValueError, DecodeError, CryptographyError) as err:
        raise IdentityError(
            f"{path}: not a libp2p private key ({err.__class__.__name__})"
        ) from None
    if key.get_type() != KeyType.Ed25519:
        raise IdentityError(f"{path}: key type {key.get_type().name}, expected Ed25519")
    return KeyPair(key, key.get_public_key())


def load_or_create_identity(path: Path) -> tuple[KeyPair, bool]:
    """Return (key pair, created): load the key at ``path`` or make one (mode 0600)."""
    if not path.exists():
        key = Ed25519PrivateKey.new()
        try:
            _write_private(path, key.serialize())
        except FileExistsError:
            pass  # another process made it first: load theirs below
        else:
            return KeyPair(key, key.get_public_key()), True
    return load_identity(path), False


def peer_id_of(key_pair: KeyPair) -> str:
    """The base58 peer ID ("12D3KooW...") of a key pair."""
    return ID.from_pubkey(key_pair.public_key).to_base58()


def create_psk(path: Path) -> str:
    """Write a fresh 32-byte PSK in swarm.key format (mode 0600); return its hex."""
    if path.exists():
        raise IdentityError(f"{path}: already exists; remove it first to make a new key")
    hex_key = secrets.token_hex(32)
    _write_private(path, f"{PSK_HEADER}\n{PSK_ENCODING}\n{hex_key}\n".encode())
    return hex_key


def load_psk(path: Path) -> str:
    """Read a swarm.key file and return its key as 64 lowercase hex digits."""
    try:
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as err:
        raise IdentityError(f"{path}: cannot read PSK ({err.__class__.__name__})") from None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) != 3 or lines[0] != PSK_HEADER or lines[1] != PSK_ENCODING:
        raise IdentityError(
            f"{path}: not a swarm.key file (expected '{PSK_HEADER}', '{PSK_ENCODING}', "
            "then 64 hex digits)"
        )
    key = lines[2].lower()
    if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
        raise IdentityError(f"{path}: PSK must be 64 hex digits (32 bytes)")
    return key
