"""Round benchmark: one swarmnode round vs one TRL GRPOTrainer step, side by side.

Both systems do the same work on this CPU, in one process, with the same torch
thread count: the embedded SmolLM2-135M-Instruct (fp32), a fresh LoRA adapter
(r=16, alpha=32, every linear layer, no dropout), 2 reasoning-gym questions from
swarmnode's default task mix (same items, same system prompt, same chat
template) x 8 completions of at most 48 new tokens at temperature 1.0, rewarded
by ``swarmnode.learn.rewards.accuracy_reward``, then one optimizer step (AdamW, lr 2e-4,
clip 0.2/0.28, token-level loss, grad-norm clip 1.0).

- swarmnode: ``Trainer.rollout(r)`` (shared-prefix KV-cache sampling + scoring)
  then ``Trainer.update(groups)`` (one GRPO step), as ``node.run_round`` does,
  at its defaults: it samples with bf16 weights where the CPU has bf16
  instructions (``rollout.dtype: auto``; ``--rollout-dtype float32`` to compare
  like for like) and trains in fp32.
  ``update`` skips groups without signal (reward std < ``SIGNAL_MIN_STD``); with
  a 135M model that is most groups, which would time an empty step. Unless
  ``--allow-skip`` is given, such a group's rewards are replaced by alternating
  0/1 (timing only: the step's cost does not depend on the values) so that every
  completion is trained on, as TRL trains on every completion.
- TRL: ``GRPOTrainer`` at its fastest correct settings here: beta=0 (no reference
  forward), num_iterations=1 and one gradient-accumulation step of 16 completions
  (so no "old log-prob" forward and exactly one generation per optimizer step;
  ``--trl-micro-batch 8`` splits its forward/backward in two, as swarmnode
  splits per group, and lowers its memory peak),
  no gradient checkpointing (TRL's default is on), fp32, plain
  ``model.generate``, logging and saving off. Each optimizer step is timed by a
  ``TrainerCallback`` (on_step_begin .. on_step_end); its generation + scoring by
  wrapping ``_generate_and_score_completions``; train = step - generation. By
  design TRL also computes per-token entropies in its loss forward.

The two alternate inside TRL's training loop (TRL step k, then swarmnode round k;
the order flips every round) so machine noise hits both alike. The first
``--warmup`` rounds of each are not timed. The prompts TRL tokenised are checked
against swarmnode's. Peak memory is ~10 GiB, mostly TRL's 16-row loss forward
(full-vocabulary logits and entropies). The last line is ``name=value`` pairs; ``ratio`` is
ours / TRL of the median round times (goal: <= 0.5). It also carries the proof that
both did the whole work: ``*_groups_trained`` and ``*_tokens_trained`` (medians per
timed round; ours from ``StepStats``, TRL's from the completion masks its loss saw).

    .venv/bin/python scripts/bench_round.py                # 1 warm-up + 5 timed rounds
    .venv/bin/python scripts/bench_round.py --rounds 2 --threads 1
    python scripts/bench_round.py --device cuda --questions 8 --max-new-tokens 256

``--device cuda`` runs both systems on the GPU in bf16 (weights, sampling and
training; TRL with ``bf16=True``) and adds ``peak_cuda_mib`` to the last line;
``--questions`` and ``--max-new-tokens`` size the round (defaults as above).
``--model`` runs both on another model (a folder or Hugging Face id);
``--packed-update`` and ``--micro-batch-tokens`` set swarmnode's update path
(``train.packed_update``: ``auto`` packs rows of several groups on CUDA).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from typing import Any

QUESTIONS = 2
COMPLETIONS = 8
MAX_NEW_TOKENS = 48


@dataclass
class Timing:
    """One round of one system: seconds, split, and how much it produced."""

    total: float = 0.0
    gen: float = 0.0
    tokens: int = 0  # completion tokens generated (EOS included)
    groups_trained: int = 0  # groups whose completions entered the loss
    tokens_trained: int = 0  # completion tokens the loss covered
    note: str = ""

    @property
    def train(self) -> float:
        return self.total - self.gen


@dataclass
class Results:
    ours: dict[int, Timing] = field(default_factory=dict)
    trl: dict[int, Timing] = field(default_factory=dict)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5, help="timed rounds per system (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1)")
    p.add_argument(
        "--threads",
        type=int,
        default=os.cpu_count() or 1,
        help="torch threads (default: all cores)",
    )
    p.add_argument(
        "--allow-skip",
        action="store_true",
        help="let swarmnode skip groups without reward signal (times its real, often empty, step)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed for both systems (default 0)")
    p.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cpu",
        help="cpu (fp32, the default) or cuda (both systems in bf16; torch threads still apply)",
    )
    p.add_argument(
        "--questions",
        type=int,
        default=QUESTIONS,
        help=f"questions per round, x{COMPLETIONS} completions each (default {QUESTIONS})",
    )
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=MAX_NEW_TOKENS,
        help=f"completion length cap (default {MAX_NEW_TOKENS})",
    )
    p.add_argument(
        "--rollout-dtype",
        choices=["auto", "float32", "bfloat16"],
        default="auto",
        help="swarmnode's rollout.dtype (default auto: bf16 where the CPU has bf16 instructions)",
    )
    from swarmnode.config import EMBEDDED_MODEL

    p.add_argument(
        "--model",
        default=EMBEDDED_MODEL,
        help="model.name for both systems: the embedded default, a Hugging Face id or a folder",
    )
    p.add_argument(
        "--packed-update",
        choices=["auto", "on", "off"],
        default="auto",
        help="swarmnode's train.packed_update (auto: packed on cuda, per group on cpu)",
    )
    p.add_argument(
        "--micro-batch-tokens",
        type=int,
        help="swarmnode's train.micro_batch_tokens (default: the config's; configs/gpu.yaml 8192)",
    )
    p.add_argument(
        "--trl-micro-batch",
        type=int,
        choices=[2, 4, 8, 16],
        default=16,
        help="TRL completions per forward/backward (default 16 = one pass; 8 halves its memory)",
    )
    args = p.parse_args()
    if args.rounds < 1 or args.warmup < 0 or args.threads < 1:
        p.error("--rounds and --threads must be >= 1, --warmup >= 0")
    if args.questions < 1 or args.max_new_tokens < 1:
        p.error("--questions and --max-new-tokens must be >= 1")
    if args.questions * COMPLETIONS % args.trl_micro_batch:
        p.error(f"--questions x {COMPLETIONS} must be a multiple of --trl-micro-batch")
    return args


def with_signal(group: Any) -> Any:
    """The group itself if it has signal, else a copy with rewards 0, 1, 0, 1, ...

    Only for timing: it makes ``grpo_step`` do the forward/backward that TRL does
    on every group, instead of skipping a group without signal.
    """
    if group.has_signal:
        return group
    return replace(group, rewards=[float(j % 2) for j in range(len(group.rewards))])


def completion_text(completion: Any) -> str:
    """TRL passes conversational completions as [{"role": "assistant", "content": ...}]."""
    if isinstance(completion, list):
        return "".join(m.get("content", "") for m in completion if isinstance(m, dict))
    return str(completion)


def bench_config(args: argparse.Namespace) -> Any:
    """swarmnode's config for the round both systems do (fp32 on CPU, bf16 on cuda)."""
    from swarmnode.config import parse_config

    dtype = "bfloat16" if args.device == "cuda" else "float32"
    train: dict[str, Any] = {"seed": args.seed, "kl_coef": 0.0, "packed_update": args.packed_update}
    if args.micro_batch_tokens:  # else the config's default
        train["micro_batch_tokens"] = args.micro_batch_tokens
    return parse_config(
        {
            "model": {
                "name": args.model,
                "device": args.device,
                "dtype": dtype,
                "threads": args.threads,
            },
            "rollout": {
                "questions_per_round": args.questions,
                "completions_per_question": COMPLETIONS,
                "max_new_tokens": args.max_new_tokens,
                "temperature": 1.0,
                "top_p": 1.0,
                "dtype": args.rollout_dtype,
            },
            "train": train,
        },
        "bench",
    )


def same_items(
    ours: Any, questions: int, steps: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[list[tuple[int, ...]]]]:
    """The items of every step, as swarmnode samples them: (entries, TRL's dataset rows,
    per step the sorted prompt token ids swarmnode would use).

    Step k of TRL and round k of swarmnode see the same items: node rounds count from
    1, and TRL's sampler (shuffle off) walks the dataset in order."""
    tasks = ours.tasks
    entries: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    for k in range(steps):
        for ref in tasks.sample(k + 1, questions):
            entry = tasks.regenerate(ref)
            rows.append({"prompt": tasks.messages(entry["question"]), "item": len(entries)})
            entries.append(entry)
    expected_prompts = [
        sorted(
            {
                tuple(ours.prompt_ids(entries[k * questions + i]["question"]))
                for i in range(questions)
            }
        )
        for k in range(steps)
    ]
    return entries, rows, expected_prompts


def accuracy_of(entries: list[dict[str, Any]]) -> Any:
    """TRL's reward function: swarmnode's accuracy reward of each completion's item."""
    from swarmnode.learn.rewards import accuracy_reward

    def accuracy(completions: list[Any], item: list[int], **_: Any) -> list[float]:
        return [
            accuracy_reward(completion_text(c), entries[i])
            for c, i in zip(completions, item, strict=True)
        ]

    return accuracy


def trl_config(args: argparse.Namespace, cfg: Any) -> Any:
    """GRPOConfig at TRL's fastest correct settings for this round (module docstring)."""
    from trl import GRPOConfig

    cuda = args.device == "cuda"
    t = cfg.train
    return GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="bench-round-"),
        use_cpu=not cuda,
        bf16=cuda,
        fp16=False,
        model_init_kwargs={"dtype": "bfloat16" if cuda else "float32"},
        gradient_checkpointing=False,  # TRL turns it on by default: recomputation costs time
        # One generation batch of 16 = one optimizer step (steps_per_generation defaults
        # to gradient_accumulation_steps, so nothing is generated twice or reused).
        per_device_train_batch_size=args.trl_micro_batch,
        gradient_accumulation_steps=args.questions * COMPLETIONS // args.trl_micro_batch,
        num_generations=COMPLETIONS,
        num_iterations=1,  # on-policy: no old-log-prob forward
        beta=0.0,  # no KL: no reference model, no reference forward
        max_completion_length=args.max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=t.learning_rate,
        lr_scheduler_type="constant",
        weight_decay=t.weight_decay,
        max_grad_norm=t.max_grad_norm,
        epsilon=0.2,  # TRL's clip (inert on policy, as ours would be: we have none)
        epsilon_high=0.28,
        loss_type="dapo",  # token-level mean, as swarmnode's loss
        scale_rewards="group",
        max_steps=args.warmup + args.rounds,
        shuffle_dataset=False,
        seed=args.seed,
        logging_strategy="no",
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        log_completions=False,
        dataloader_num_workers=0,
    )


def trl_trainer(
    args: argparse.Namespace, cfg: Any, source: Any, rows: list[dict[str, Any]], reward: Any
) -> Any:
    """TRL's GRPOTrainer on the same model folder, LoRA, items and reward as ours."""
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOTrainer

    from swarmnode.learn.model import load_tokenizer

    lora = cfg.model.lora
    trl_args = trl_config(args, cfg)
    peft_config = LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        task_type="CAUSAL_LM",
    )
    reward_funcs: list[Any] = [reward]  # TRL types a reward as returning list[float | None]
    return GRPOTrainer(
        model=str(source),
        reward_funcs=reward_funcs,
        args=trl_args,
        train_dataset=Dataset.from_list(rows),
        processing_class=load_tokenizer(source),
        peft_config=peft_config,
    )


class Bench:
    """Both systems and their timings: swarmnode's ``Trainer`` (``ours``), TRL's
    ``GRPOTrainer`` (``theirs``, instrumented), the prompts TRL must see each step and
    what it generated (``gen_calls``: per TRL step, the prompt ids of each generate call)."""

    def __init__(
        self, args: argparse.Namespace, ours: Any, expected_prompts: list[list[tuple[int, ...]]]
    ) -> None:
        self.args, self.ours, self.expected_prompts = args, ours, expected_prompts
        self.cuda = args.device == "cuda"
        self.theirs: Any = None
        self.results = Results()
        self.gen_calls: list[list[list[int]]] = []

    def current_step(self) -> int:
        return int(self.theirs.state.global_step)

    def sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()

    def instrument(self, theirs: Any) -> None:
        """Wrap TRL's loss (tokens and groups trained), its generation + scoring (timed)
        and its generate calls (tokens, prompts)."""
        self.theirs = theirs
        theirs.compute_loss = self.counted_loss(theirs.compute_loss)
        theirs._generate_and_score_completions = self.timed_generate_and_score(
            theirs._generate_and_score_completions
        )
        theirs._generate_single_turn = self.counted_generate(theirs._generate_single_turn)

    def timed_generate_and_score(self, inner: Any) -> Any:
        def wrapper(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            out = inner(*a, **kw)
            self.results.trl[self.current_step()].gen += time.perf_counter() - t0
            return out

        return wrapper

    def counted_generate(self, inner: Any) -> Any:
        def wrapper(prompt_ids: list[list[int]], *a: Any, **kw: Any) -> Any:
            completion_ids, logprobs = inner(prompt_ids, *a, **kw)
            self.gen_calls.append([list(p) for p in prompt_ids])
            self.results.trl[self.current_step()].tokens += sum(len(c) for c in completion_ids)
            return completion_ids, logprobs

        return wrapper

    def counted_loss(self, inner: Any) -> Any:
        def wrapper(model: Any, inputs: dict[str, Any], *a: Any, **kw: Any) -> Any:
            timing = self.results.trl[self.current_step()]
            timing.tokens_trained += int(inputs["completion_mask"].sum())
            rows = int(inputs["completion_mask"].shape[0])
            timing.groups_trained += rows  # completions for now; divided by G at step end
            return inner(model, inputs, *a, **kw)

        return wrapper

    def run_ours(self, k: int) -> None:
        """swarmnode's round k, as ``node.run_round`` does it, timed."""
        t0 = time.perf_counter()
        groups, gen = self.ours.rollout(k + 1)
        t1 = time.perf_counter()
        natural_skips = sum(1 for g in groups if not g.has_signal)
        if not self.args.allow_skip:
            groups = [with_signal(g) for g in groups]
        step = self.ours.update(groups)
        self.sync()
        t2 = time.perf_counter()
        note = f"no-signal groups {natural_skips}, trained {step.groups_trained}"
        self.results.ours[k] = Timing(
            total=t2 - t0,
            gen=t1 - t0,
            tokens=gen.tokens,
            groups_trained=step.groups_trained,
            tokens_trained=step.tokens_trained,
            note=note,
        )

    def end_trl_step(self, k: int, elapsed: float, calls_before: int) -> Timing:
        """Close TRL step k's timing: its total, its groups, whether it generated once
        on the expected prompts (a warning if not)."""
        timing = self.results.trl[k]
        timing.total = elapsed
        timing.groups_trained //= COMPLETIONS  # every completion of a group, or none
        calls = self.gen_calls[calls_before:]
        prompts = sorted({tuple(p) for c in calls for p in c})
        same = prompts == self.expected_prompts[k]
        timing.note = f"generate calls {len(calls)}, prompts {'same' if same else 'DIFFER'}"
        if len(calls) != 1 or not same:
            print(f"warning: TRL step {k}: {timing.note}", file=sys.stderr)
        return timing


def interleave(bench: Bench) -> Any:
    """A TRL callback that times each optimizer step and runs swarmnode's round k
    before it (odd k) or after it (even k)."""
    import torch
    from transformers import TrainerCallback

    class Interleave(TrainerCallback):
        """Times each TRL optimizer step; runs swarmnode's round k before or after it."""

        def __init__(self) -> None:
            self.t0 = 0.0
            self.calls_before = 0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            k = state.global_step
            if k % 2 == 1:
                bench.run_ours(k)
            if torch.get_num_threads() != bench.args.threads:
                torch.set_num_threads(bench.args.threads)
            bench.results.trl[k] = Timing()
            self.calls_before = len(bench.gen_calls)
            self.t0 = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            bench.sync()
            elapsed = time.perf_counter() - self.t0
            k = state.global_step - 1  # already advanced past the step that just ended
            timing = bench.end_trl_step(k, elapsed, self.calls_before)
            if k % 2 == 0:
                bench.run_ours(k)
            print_round(k, bench.results.ours[k], timing, bench.args.warmup)

    return Interleave()


def print_round(k: int, ours_t: Timing, timing: Timing, warmup: int) -> None:
    tag = "warm-up" if k < warmup else "timed  "
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"round {k} {tag} ours {ours_t.total:6.2f}s (gen {ours_t.gen:5.2f} + train "
        f"{ours_t.train:5.2f}, {ours_t.tokens} tok, {ours_t.tokens_trained} trained, "
        f"{ours_t.note}) | TRL {timing.total:6.2f}s "
        f"(gen {timing.gen:5.2f} + train {timing.train:5.2f}, {timing.tokens} tok, "
        f"{timing.tokens_trained} trained, {timing.groups_trained} groups, "
        f"{timing.note}) peak RSS {rss_mb:.0f} MiB",
        flush=True,
    )


def header(args: argparse.Namespace, ours: Any) -> str:
    import torch
    import trl

    dtype = "bfloat16" if args.device == "cuda" else "float32"
    return (
        f"bench_round: torch {torch.__version__}, trl {trl.__version__}, threads {args.threads}, "
        f"device {args.device}, ours samples in {str(ours.sample_dtype).removeprefix('torch.')}, "
        f"TRL in {dtype}, "
        f"TRL micro-batch {args.trl_micro_batch}, "
        f"{args.questions}x{COMPLETIONS} completions <= {args.max_new_tokens} tokens, "
        f"warm-up {args.warmup}, timed {args.rounds}, "
        f"skip {'allowed' if args.allow_skip else 'off'}"
    )


def last_line(args: argparse.Namespace, results: Results) -> str:
    """The medians over the timed rounds as ``name=value`` pairs, and the peaks."""
    import torch

    timed = range(args.warmup, args.warmup + args.rounds)

    def med(system: dict[int, Timing], attr: str) -> float:
        return statistics.median(getattr(system[k], attr) for k in timed)

    ours_med, trl_med = med(results.ours, "total"), med(results.trl, "total")
    figures = {
        "ours_median_s": ours_med,
        "trl_median_s": trl_med,
        "ratio": ours_med / trl_med,
        "ours_gen_s": med(results.ours, "gen"),
        "ours_train_s": med(results.ours, "train"),
        "trl_gen_s": med(results.trl, "gen"),
        "trl_train_s": med(results.trl, "train"),
        "ours_tokens": med(results.ours, "tokens"),
        "trl_tokens": med(results.trl, "tokens"),
        "ours_groups_trained": med(results.ours, "groups_trained"),
        "trl_groups_trained": med(results.trl, "groups_trained"),
        "ours_tokens_trained": med(results.ours, "tokens_trained"),
        "trl_tokens_trained": med(results.trl, "tokens_trained"),
    }
    cuda = args.device == "cuda"
    return (
        " ".join(f"{k}={v:.3f}" for k, v in figures.items())
        + f" rounds={args.rounds} threads={args.threads}"
        + f" peak_rss_mib={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}"
        + (f" peak_cuda_mib={torch.cuda.max_memory_allocated() // 2**20}" if cuda else "")
        + f" device={args.device} packed_update={args.packed_update}"
    )


def offline() -> None:
    """Everything is local: never touch the hub."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> int:
    args = parse_args()
    offline()
    try:
        import trl  # noqa: F401
        from trl import GRPOConfig, GRPOTrainer  # noqa: F401
    except ImportError as err:
        print(
            f"error: TRL is needed for this benchmark ({err}); "
            "install the dev extra: pip install -e '.[dev]'",
            file=sys.stderr,
        )
        return 2

    import torch

    from swarmnode.learn.model import load_policy, quiet_transformers, resolve_source
    from swarmnode.learn.trainer import Trainer

    torch.set_num_threads(args.threads)
    quiet_transformers()
    cfg = bench_config(args)
    lora = cfg.model.lora
    assert lora.enabled and lora.rank == 16 and lora.alpha == 32 and lora.dropout == 0.0
    source = resolve_source(cfg.model)  # the dequantized embedded model, a plain HF folder
    ours = Trainer(cfg, load_policy(cfg.model, seed=args.seed))
    entries, rows, expected_prompts = same_items(ours, args.questions, args.warmup + args.rounds)
    theirs = trl_trainer(args, cfg, source, rows, accuracy_of(entries))
    torch.set_num_threads(args.threads)  # in case accelerate changed it
    bench = Bench(args, ours, expected_prompts)
    bench.instrument(theirs)
    theirs.add_callback(interleave(bench))
    print(header(args, ours), flush=True)
    theirs.train()
    print(last_line(args, bench.results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
