"""Wire format: round trip, every limit, version, and fuzzing (no exception but WireError)."""

from __future__ import annotations

import random

import msgpack
import pytest

from swarmnode.learn.groups import ItemRef, RolloutGroup
from swarmnode.share import wire
from swarmnode.share.wire import WIRE_REASONS, WireError, decode_batch, encode_batch


def group(n: int = 8, chars: int = 200, **kw: object) -> RolloutGroup:
    base: dict = dict(
        ref=ItemRef("basic_arithmetic", {"min_terms": 2, "ops": ["+", "-"]}, 7, 42),
        question="What is 3 + 4?",
        completions=[f"{i}" * chars for i in range(n)],
        rewards=[float(i % 2) for i in range(n)],
        model="embedded:smollm2-135m",
        created=1_700_000_000.5,
    )
    base.update(kw)
    return RolloutGroup(**base)


def valid_obj() -> dict:
    return msgpack.unpackb(encode_batch("default", 3, [group()]), raw=False)


def reason_of(obj: object) -> str:
    with pytest.raises(WireError) as info:
        decode_batch(msgpack.packb(obj, use_bin_type=True))
    return info.value.reason


def test_round_trip_keeps_every_field() -> None:
    g = group()
    batch = decode_batch(encode_batch("default", 3, [g, group(n=4)]))
    assert (batch.version, batch.swarm, batch.round) == (2, "default", 3)
    got = batch.rollout_groups(origin="12D3KooWpeer")[0]
    assert got.finished == [True] * 8  # unknown on the sender counts as finished
    assert got.ref == g.ref and got.ref.config == g.ref.config
    assert (got.question, got.completions, got.rewards) == (g.question, g.completions, g.rewards)
    assert (got.model, got.created, got.round) == (g.model, g.created, 3)
    assert got.origin == "12D3KooWpeer"
    assert got.completion_ids is None and not got.is_local
    assert len(batch.groups[1].completions) == 4


def test_finished_flags_travel_and_version_1_is_still_read() -> None:
    flags = [i % 3 != 0 for i in range(8)]
    got = decode_batch(encode_batch("default", 3, [group(finished=flags)])).groups[0]
    assert got.finished == flags
    v1 = valid_obj()
    v1["v"] = 1
    v1["groups"][0].pop("finished")
    old = decode_batch(msgpack.packb(v1, use_bin_type=True))
    assert old.version == 1 and old.groups[0].finished is None
    v1["groups"][0]["finished"] = [True] * 8  # v1 knows no such key
    assert reason_of(v1) == "schema"


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda o: o.update(v=4), "version"),
        (lambda o: o.update(v=0), "version"),
        (lambda o: o["groups"][0].pop("finished"), "schema"),
        (lambda o: o["groups"][0].update(finished=[True] * 3), "value"),
        (lambda o: o["groups"][0].update(finished=[1] * 8), "schema"),
        (lambda o: o.pop("v"), "version"),
        (lambda o: o.update(v=True), "version"),
        (lambda o: o.pop("round"), "schema"),
        (lambda o: o.update(extra=1), "schema"),
        (lambda o: o.update(round="3"), "schema"),
        (lambda o: o.update(round=-1), "value"),
        (lambda o: o.update(round=True), "schema"),
        (lambda o: o.update(groups=[]), "value"),
        (lambda o: o.update(groups={}), "schema"),
        (lambda o: o["groups"][0].pop("rewards"), "schema"),
        (lambda o: o["groups"][0].update(ground_truth="7"), "schema"),
        (lambda o: o["groups"][0].update(completions=["a", 3]), "schema"),
        (lambda o: o["groups"][0].update(completions=["only one"], rewards=[1.0]), "value"),
        (lambda o: o["groups"][0].update(rewards=[1.0] * 3), "value"),
        (lambda o: o["groups"][0].update(rewards=[float("nan")] * 8), "value"),
        (lambda o: o["groups"][0].update(rewards=[None] * 8), "schema"),
        (lambda o: o["groups"][0].update(created=0.0), "value"),
        (lambda o: o["groups"][0].update(question=None), "schema"),
        (lambda o: o["groups"][0]["ref"].update(index=-5), "value"),
        (lambda o: o["groups"][0]["ref"].update(seed=2**64 - 1), "value"),
        (lambda o: o["groups"][0]["ref"].update(config=[1]), "schema"),
        (
            lambda o: o["groups"][0]["ref"].update(config={"a": {"b": {"c": {"d": {"e": 1}}}}}),
            "limit",
        ),
        (lambda o: o["groups"][0]["ref"].update(config={str(i): i for i in range(65)}), "limit"),
        (lambda o: o["groups"][0]["ref"].update(config={"k": "x" * 300}), "limit"),
        (lambda o: o["groups"][0]["ref"].update(dataset="d" * 300), "limit"),
        (lambda o: o.update(swarm="s" * 300), "limit"),
    ],
)
def test_each_violation_is_rejected_with_its_reason(mutate, reason: str) -> None:
    obj = valid_obj()
    mutate(obj)
    assert reason_of(obj) == reason


def test_count_and_length_limits() -> None:
    obj = valid_obj()
    obj["groups"] = obj["groups"] * (wire.MAX_GROUPS + 1)
    assert reason_of(obj) in ("limit", "msgpack")  # array cap in the unpacker or the check
    obj = valid_obj()
    obj["groups"][0]["completions"] = ["a"] * (wire.MAX_COMPLETIONS + 1)
    obj["groups"][0]["rewards"] = [0.0] * (wire.MAX_COMPLETIONS + 1)
    assert reason_of(obj) in ("limit", "msgpack")
    obj = valid_obj()
    obj["groups"][0]["completions"][0] = "x" * (wire.MAX_COMPLETION_CHARS + 1)
    assert reason_of(obj) == "limit"
    obj = valid_obj()
    obj["groups"][0]["question"] = "q" * (wire.MAX_QUESTION_CHARS + 1)
    assert reason_of(obj) == "limit"


def test_oversized_message_rejected_before_parsing_and_on_encode() -> None:
    with pytest.raises(WireError) as info:
        decode_batch(b"\x00" * (wire.MAX_MESSAGE_BYTES + 1))
    assert info.value.reason == "too_large"
    big = [group(n=16, chars=wire.MAX_COMPLETION_CHARS) for _ in range(2)]  # ~2 MiB
    with pytest.raises(WireError) as info:
        encode_batch("default", 1, big)
    assert info.value.reason == "too_large"


def test_encode_refuses_what_peers_would_refuse() -> None:
    with pytest.raises(WireError) as info:
        encode_batch("default", 1, [group(rewards=[1.0])])
    assert info.value.reason == "value"
    with pytest.raises(WireError):
        encode_batch("default", 1, [])


def test_no_bin_ext_or_trailing_bytes() -> None:
    good = encode_batch("default", 1, [group()])
    with pytest.raises(WireError) as info:
        decode_batch(good + b"\x00")
    assert info.value.reason == "msgpack"
    obj = valid_obj()
    obj["groups"][0]["question"] = b"bytes, not text"
    assert reason_of(obj) == "msgpack"
    obj = valid_obj()
    obj["groups"][0]["model"] = msgpack.ExtType(5, b"x")
    assert reason_of(obj) == "msgpack"
    assert reason_of({1: 2}) == "msgpack"  # strict_map_key: int keys refused
    with pytest.raises(WireError):
        decode_batch(b"\x91" * 100_000)  # 100k nested arrays


def _random_obj(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 2**63, 2**64 - 1, rng.randrange(-(2**40), 2**40)])
    if kind == 3:
        return rng.choice([0.0, float("inf"), float("nan"), rng.random()])
    if kind == 4:
        return rng.choice(["", "v", "groups", "x" * rng.randrange(100)])
    if kind == 5:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(8)))
    if kind == 6:
        return [_random_obj(rng, depth + 1) for _ in range(rng.randrange(5))]
    keys = [
        "v",
        "swarm",
        "round",
        "groups",
        "ref",
        "question",
        "completions",
        "rewards",
        "finished",
        "model",
        "created",
        "dataset",
        "config",
        "seed",
        "index",
        "zzz",
    ]
    return {rng.choice(keys): _random_obj(rng, depth + 1) for _ in range(rng.randrange(7))}


def test_fuzz_random_bytes_and_structures_only_raise_wire_error() -> None:
    rng = random.Random(1234)
    good = encode_batch("default", 1, [group(n=3, chars=5)])
    seen: set[str] = set()
    for i in range(6000):
        if i % 3 == 0:
            data = bytes(rng.randrange(256) for _ in range(rng.randrange(64)))
        elif i % 3 == 1:  # a valid message with a few bytes flipped or cut
            buf = bytearray(good)
            for _ in range(rng.randrange(1, 4)):
                buf[rng.randrange(len(buf))] = rng.randrange(256)
            data = bytes(buf[: rng.randrange(len(buf) + 1)])
        else:
            obj = _random_obj(rng)
            if isinstance(obj, dict) and rng.random() < 0.5:
                obj = {**valid_obj(), **obj}  # mostly valid, some fields replaced
            data = msgpack.packb(obj, use_bin_type=True)
        try:
            decode_batch(data)
        except WireError as err:
            assert err.reason in WIRE_REASONS
            seen.add(err.reason)
    assert {"msgpack", "schema", "version"} <= seen
