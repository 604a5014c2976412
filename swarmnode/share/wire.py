"""The gossip wire format: one message = one batch of rollout groups, msgpack-encoded.

Role: turn a round's ``RolloutGroup``s into bytes for gossipsub and back, refusing
anything a peer could use to crash, confuse or bloat a receiver.

Invariants:
- ``decode_batch`` is strict and total: it either returns a fully checked ``Batch``
  or raises ``WireError(reason)``; no other exception escapes (fuzzed in tests).
  ``reason`` is a short stable string (``WIRE_REASONS``), usable as a counter label.
- Every limit below is checked on decode *and* on encode, so a node never
  publishes what its peers would reject.
- No pickle, no msgpack ext types, no bin fields: only maps with string keys,
  arrays, strings, ints, floats, bools and nil.
- A message never carries ground truth: receivers regenerate the item from its
  ``ItemRef`` and score completions with their own verifier.

Schema, version 2 (a msgpack map; keys exactly these, no more, no fewer)::

    v:      int    protocol version: 2 is sent, 3 when the groups carry log-probs;
                   1 is still accepted
    swarm:  str    swarm name of the sender (the receiver rejects other swarms)
    round:  int    the sender's round number when it generated these groups (>= 0)
    groups: array  1..MAX_GROUPS rollout groups, each a map with keys:
        ref:         map    the reasoning-gym item, no ground truth:
            dataset: str    reasoning-gym dataset name
            config:  map    dataset config kwargs (JSON-like, nesting and size capped)
            seed:    int    dataset seed (>= 0)
            index:   int    item index within that seed (>= 0)
        question:    str    the question text as the sender rendered it (receiver re-checks)
        completions: array  2..MAX_COMPLETIONS completion texts (str)
        rewards:     array  the sender's reward per completion (float, informational only)
        model:       str    the sender's model name (may be empty)
        created:     float  unix seconds when the group was generated (finite, > 0)
        finished:    array  per completion, true if it ended by itself (EOS), false if
                            cut at the sender's token cap; same length as completions

Version 1 is version 2 without ``finished`` (receivers treat its completions as
finished). Version 3 is version 2 plus, in each group::

        logprobs:    array  per completion, nil or the sum of its sampled tokens'
                            log-probs under the sender's policy (float, -1e6..0)

sent only by nodes with ``train.importance_weights`` on (a v2-only receiver would
refuse it). Any other version is rejected.

The sender's peer ID is not in the payload: it comes from the signed gossipsub
envelope, which the transport verifies.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from swarmnode.learn.groups import ItemRef, RolloutGroup

WIRE_VERSION = 2  # what a node sends unless its groups carry log-probs
LOGPROBS_VERSION = 3
ACCEPTED_VERSIONS = (1, 2, 3)
MIN_LOGPROB = -1e6
# gossipsub (py-libp2p) refuses RPC frames over 1 MiB; leave room for the signed
# envelope (topic, from, seqno, key, signature: ~200 bytes) around our payload.
MAX_MESSAGE_BYTES = 1024 * 1024 - 4096
MAX_GROUPS = 64
MAX_COMPLETIONS = 256
MIN_COMPLETIONS = 2
MAX_COMPLETION_CHARS = 65_536
MAX_QUESTION_CHARS = 16_384
MAX_NAME_CHARS = 256  # swarm, dataset and model names
MAX_CONFIG_DEPTH = 4  # nesting levels inside ItemRef.config
MAX_CONFIG_ITEMS = 64  # scalars + containers in ItemRef.config, all levels together
MAX_CONFIG_STR_CHARS = 256
MAX_INT = 2**63 - 1

_TOP_KEYS = frozenset({"v", "swarm", "round", "groups"})
_GROUP_KEYS_V1 = frozenset({"ref", "question", "completions", "rewards", "model", "created"})
_GROUP_KEYS = _GROUP_KEYS_V1 | {"finished"}
_GROUP_KEYS_V3 = _GROUP_KEYS | {"logprobs"}
_REF_KEYS = frozenset({"dataset", "config", "seed", "index"})

WIRE_REASONS = (
    "too_large",  # payload over MAX_MESSAGE_BYTES
    "msgpack",  # not decodable msgpack, trailing bytes, ext/bin types, nesting
    "version",  # v missing or not one of ACCEPTED_VERSIONS
    "schema",  # wrong type, missing or extra key
    "limit",  # a count or length over its limit
    "value",  # right type, impossible value (negative index, NaN, length mismatch)
)


class WireError(Exception):
    """A message that breaks the wire format; ``reason`` is one of WIRE_REASONS."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class Batch:
    """One decoded message: a sender's groups from one round."""

    version: int
    swarm: str
    round: int
    groups: tuple[RolloutGroup, ...]

    def rollout_groups(self, origin: str) -> list[RolloutGroup]:
        """Fresh RolloutGroup copies attributed to ``origin`` (the sender's peer ID)."""
        return [
            RolloutGroup(
                ref=g.ref,
                question=g.question,
                completions=list(g.completions),
                rewards=list(g.rewards),
                origin=origin,
                round=g.round,
                model=g.model,
                created=g.created,
                finished=None if g.finished is None else list(g.finished),
                logprobs=None if g.logprobs is None else list(g.logprobs),
            )
            for g in self.groups
        ]


# ---- checks: each raises WireError with a stable reason ----------------------------


def _keys(obj: Any, keys: frozenset[str], what: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise WireError("schema", f"{what} is {type(obj).__name__}, expected map")
    if obj.keys() != keys:
        got = set(obj.keys())
        raise WireError(
            "schema",
            f"{what} keys: missing {sorted(keys - got)}, extra {sorted(map(str, got - keys))[:5]}",
        )
    return obj


def _str(obj: Any, what: str, limit: int) -> str:
    if not isinstance(obj, str):
        raise WireError("schema", f"{what} is {type(obj).__name__}, expected str")
    if len(obj) > limit:
        raise WireError("limit", f"{what} has {len(obj)} chars > {limit}")
    return obj


def _int(obj: Any, what: str) -> int:
    if not isinstance(obj, int) or isinstance(obj, bool):
        raise WireError("schema", f"{what} is {type(obj).__name__}, expected int")
    if not 0 <= obj <= MAX_INT:
        raise WireError("value", f"{what} = {obj} out of range")
    return obj


def _float(obj: Any, what: str) -> float:
    if not isinstance(obj, int | float) or isinstance(obj, bool):
        raise WireError("schema", f"{what} is {type(obj).__name__}, expected float")
    value = float(obj)
    if not math.isfinite(value):
        raise WireError("value", f"{what} is not finite")
    return value


def _list(obj: Any, what: str, lo: int, hi: int) -> list[Any]:
    if not isinstance(obj, list):
        raise WireError("schema", f"{what} is {type(obj).__name__}, expected array")
    if len(obj) > hi:
        raise WireError("limit", f"{what} has {len(obj)} entries > {hi}")
    if len(obj) < lo:
        raise WireError("value", f"{what} has {len(obj)} entries < {lo}")
    return obj


def _check_config(obj: Any, depth: int, budget: list[int]) -> None:
    """JSON-like values only; ``budget`` counts every node across the whole tree."""
    budget[0] -= 1
    if budget[0] < 0:
        raise WireError("limit", f"ref.config has more than {MAX_CONFIG_ITEMS} items")
    if obj is None or isinstance(obj, bool | int | float):
        if isinstance(obj, float) and not math.isfinite(obj):
            raise WireError("value", "ref.config holds a non-finite float")
        return
    if isinstance(obj, str):
        _str(obj, "ref.config string", MAX_CONFIG_STR_CHARS)
        return
    if depth >= MAX_CONFIG_DEPTH:
        raise WireError("limit", f"ref.config nested deeper than {MAX_CONFIG_DEPTH}")
    if isinstance(obj, list):
        for item in obj:
            _check_config(item, depth + 1, budget)
    elif isinstance(obj, dict):
        for key, item in obj.items():
            _str(key, "ref.config key", MAX_CONFIG_STR_CHARS)
            _check_config(item, depth + 1, budget)
    else:
        raise WireError("schema", f"ref.config holds {type(obj).__name__}")


def _ref(obj: Any) -> ItemRef:
    d = _keys(obj, _REF_KEYS, "ref")
    config = d["config"]
    if not isinstance(config, dict):
        raise WireError("schema", "ref.config is not a map")
    _check_config(config, 0, [MAX_CONFIG_ITEMS + 1])
    return ItemRef(
        dataset=_str(d["dataset"], "ref.dataset", MAX_NAME_CHARS),
        config=config,
        seed=_int(d["seed"], "ref.seed"),
        index=_int(d["index"], "ref.index"),
    )


def _logprobs(obj: Any, n: int) -> list[float | None]:
    values = _list(obj, "logprobs", 0, MAX_COMPLETIONS)
    if len(values) != n:
        raise WireError("value", f"{len(values)} logprobs for {n} completions")
    out: list[float | None] = []
    for v in values:
        if v is None:
            out.append(None)
            continue
        lp = _float(v, "logprob")
        if not MIN_LOGPROB <= lp <= 0:
            raise WireError("value", f"logprob {lp} outside [{MIN_LOGPROB}, 0]")
        out.append(lp)
    return out


def _group(obj: Any, round_: int, version: int) -> RolloutGroup:
    keys = {1: _GROUP_KEYS_V1, 2: _GROUP_KEYS}.get(version, _GROUP_KEYS_V3)
    d = _keys(obj, keys, "group")
    completions = _list(d["completions"], "completions", MIN_COMPLETIONS, MAX_COMPLETIONS)
    texts = [_str(c, "completion", MAX_COMPLETION_CHARS) for c in completions]
    rewards = [_float(r, "reward") for r in _list(d["rewards"], "rewards", 0, MAX_COMPLETIONS)]
    if len(rewards) != len(texts):
        raise WireError("value", f"{len(rewards)} rewards for {len(texts)} completions")
    created = _float(d["created"], "created")
    if created <= 0:
        raise WireError("value", "created must be > 0")
    finished = None
    if version >= 2:
        flags = _list(d["finished"], "finished", 0, MAX_COMPLETIONS)
        if len(flags) != len(texts):
            raise WireError("value", f"{len(flags)} finished flags for {len(texts)} completions")
        if not all(isinstance(f, bool) for f in flags):
            raise WireError("schema", "finished must hold booleans")
        finished = list(flags)
    logprobs = _logprobs(d["logprobs"], len(texts)) if version >= 3 else None
    return RolloutGroup(
        ref=_ref(d["ref"]),
        question=_str(d["question"], "question", MAX_QUESTION_CHARS),
        completions=texts,
        rewards=rewards,
        origin="",
        round=round_,
        model=_str(d["model"], "model", MAX_NAME_CHARS),
        created=created,
        finished=finished,
        logprobs=logprobs,
    )


def _check(obj: Any) -> Batch:
    if not isinstance(obj, dict):
        raise WireError("schema", f"message is {type(obj).__name__}, expected map")
    version = obj.get("v")
    # exactly an int: 2.0 == 2 and True == 1 in Python, neither is a version here
    if type(version) is not int or version not in ACCEPTED_VERSIONS:
        raise WireError("version", f"version {version!r}, this node reads {ACCEPTED_VERSIONS}")
    d = _keys(obj, _TOP_KEYS, "message")
    round_ = _int(d["round"], "round")
    groups = _list(d["groups"], "groups", 1, MAX_GROUPS)
    return Batch(
        version=version,
        swarm=_str(d["swarm"], "swarm", MAX_NAME_CHARS),
        round=round_,
        groups=tuple(_group(g, round_, version) for g in groups),
    )


def _no_ext(code: int, data: bytes) -> Any:
    raise WireError("msgpack", f"ext type {code} not allowed")


# ---- public API ------------------------------------------------------------------


def decode_batch(data: bytes) -> Batch:
    """Decode and check one message; raise WireError(reason) on anything wrong."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise WireError("schema", f"payload is {type(data).__name__}, expected bytes")
    if len(data) > MAX_MESSAGE_BYTES:
        raise WireError("too_large", f"{len(data)} bytes > {MAX_MESSAGE_BYTES}")
    try:
        obj = msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=True,
            use_list=True,
            ext_hook=_no_ext,
            max_bin_len=0,
            max_ext_len=0,
            max_str_len=MAX_MESSAGE_BYTES,
            max_array_len=max(MAX_COMPLETIONS, MAX_GROUPS, MAX_CONFIG_ITEMS),
            max_map_len=2 * MAX_CONFIG_ITEMS,  # the precise cap is _check_config
        )
    except WireError:
        raise
    # msgpack signals bad input with ValueError subclasses (ExtraData, FormatError,
    # StackError, limit overruns), UnicodeDecodeError (a ValueError), OutOfData
    # (UnpackException) and TypeError/OverflowError for odd keys and ints.
    except (ValueError, TypeError, OverflowError, msgpack.UnpackException) as err:
        raise WireError("msgpack", err.__class__.__name__) from None
    return _check(obj)


def _wire_logprobs(g: RolloutGroup) -> list[float | None]:
    lps = g.logprobs or [None] * len(g.completions)
    return [None if lp is None else max(MIN_LOGPROB, min(0.0, float(lp))) for lp in lps]


def encode_batch(swarm: str, round: int, groups: Sequence[RolloutGroup]) -> bytes:
    """Encode one round's groups; raise WireError if the result breaks a limit.

    Version 3 (log-probs) when any group carries them, else version 2."""
    with_lp = any(g.logprobs is not None for g in groups)
    obj = {
        "v": LOGPROBS_VERSION if with_lp else WIRE_VERSION,
        "swarm": swarm,
        "round": round,
        "groups": [
            {
                "ref": {
                    "dataset": g.ref.dataset,
                    "config": g.ref.config,
                    "seed": g.ref.seed,
                    "index": g.ref.index,
                },
                "question": g.question,
                "completions": list(g.completions),
                "rewards": [float(r) for r in g.rewards],
                "model": g.model,
                "created": float(g.created),
                "finished": [bool(f) for f in (g.finished or [True] * len(g.completions))],
                **({"logprobs": _wire_logprobs(g)} if with_lp else {}),
            }
            for g in groups
        ],
    }
    try:
        data: bytes = msgpack.packb(obj, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as err:
        raise WireError("schema", f"cannot encode: {err}") from None
    if len(data) > MAX_MESSAGE_BYTES:
        raise WireError("too_large", f"{len(data)} bytes > {MAX_MESSAGE_BYTES}")
    _check(msgpack.unpackb(data, raw=False, strict_map_key=True))  # same rules as peers
    return data
