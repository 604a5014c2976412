"""``swarmnode ask``: the trained model answers, streamed, beside a running node and
without writing into its data directory; ``--item`` shows the verifier's score."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from swarmnode.learn.rewards import accuracy_reward
from swarmnode.learn.tasks import HELDOUT_SEED
from swarmnode.ops.ask import answer, draw_item, from_data_dir, make_streamer, verdict
from swarmnode.ops.nodedir import node_config
from tests.helpers import ENV, REPO, run_cli, start_node, tiny_config, wait_rounds, write_config

CLI = (sys.executable, "-m", "swarmnode.cli")


def _config(model_dir: Path, tmp: Path) -> Path:
    raw = tiny_config(model_dir, tmp / "node", train={"learning_rate": 0.01})
    return write_config(tmp / "node.yaml", raw)


@pytest.fixture(scope="module")
def trained(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("ask")
    proc = subprocess.run(
        [*CLI, "start", "-c", str(_config(tiny_model_dir, tmp)), "--max-rounds", "2"],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return tmp / "node"


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def _ask(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "ask", *args],
        cwd=REPO,
        env=ENV,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_streamed_text_is_the_answer(trained: Path) -> None:
    ans = from_data_dir(node_config(None, trained))
    out = io.StringIO()
    text = answer(ans, "What is 2 + 3?", out)
    assert text and out.getvalue().strip() == text.strip()
    assert answer(ans, "What is 2 + 3?", io.StringIO()) == text  # greedy: the same answer


def test_streamer_writes_as_words_arrive(trained: Path) -> None:
    ans = from_data_dir(node_config(None, trained))
    writes: list[str] = []

    class Out(io.StringIO):
        def write(self, s: str) -> int:
            writes.append(s)
            return len(s)

    streamer = make_streamer(ans.tokenizer, Out())
    ids = ans.tokenizer("one two three four", add_special_tokens=False, return_tensors="pt")
    streamer.put(ids["input_ids"][0][:0])  # skip_prompt: the first put is the prompt
    for token in ids["input_ids"][0]:
        streamer.put(token.reshape(1))
    streamer.end()
    assert len([w for w in writes if w.strip()]) >= 3 and "".join(writes).strip() == (
        "one two three four"
    )


def test_item_and_its_score(trained: Path) -> None:
    cfg = node_config(None, trained)
    ref, entry = draw_item(cfg, "basic_arithmetic", index=5, data_dir=trained)
    assert ref.seed == HELDOUT_SEED and ref.index == 5 and "+" in entry["question"]
    right = f"<answer>{entry['answer']}</answer>"
    assert verdict(right, entry).endswith("score: 1.000 (right)")
    assert verdict("<answer>x</answer>", entry).endswith("score: 0.000 (wrong)")
    proc = _ask("--data-dir", str(trained), "--item", "basic_arithmetic", "--index", "5")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == f"[basic_arithmetic item 5, held-out seed] {entry['question']}"
    shown = "\n".join(lines[1:-1])
    assert lines[-1] == verdict(shown, entry)
    assert f"{accuracy_reward(shown, entry):.3f}" in lines[-1]


def test_ask_export_and_data_dir_agree(trained: Path, tmp_path: Path) -> None:
    out = tmp_path / "model"
    assert run_cli("export", "--data-dir", str(trained), "--out", str(out)).returncode == 0
    before = _tree(trained)
    from_dir = _ask("--data-dir", str(trained), stdin="What is 6 + 1?\n")  # from stdin
    from_export = _ask("--model", str(out), "What is 6 + 1?")
    assert from_dir.returncode == 0 and from_export.returncode == 0, from_dir.stderr
    assert from_dir.stdout == from_export.stdout and from_dir.stdout.strip()
    assert "checkpoint round-000002" in from_dir.stderr and "export" in from_export.stderr
    assert _tree(trained) == before  # read-only on the data dir


def test_refusals(trained: Path, tmp_path: Path) -> None:
    for args, stdin, says in [
        (("--data-dir", str(trained)), "  \n", "no question"),
        (("--data-dir", str(trained), "--item", "chess"), "", "not one of this node's datasets"),
        (("--model", str(tmp_path), "hi"), "", "not a model folder"),
        (("--model", str(tmp_path), "--data-dir", str(trained), "hi"), "", "not both"),
        (("--data-dir", str(tmp_path), "hi"), "", "config.resolved.yaml"),
    ]:
        proc = _ask(*args, stdin=stdin)
        assert proc.returncode == 2 and says in proc.stderr, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_ask_beside_a_running_node(tiny_model_dir: Path, tmp_path: Path) -> None:
    config = _config(tiny_model_dir, tmp_path)
    node = start_node(config)
    try:
        wait_rounds(tmp_path / "node" / "metrics.jsonl", 2, node, timeout=300)
        proc = _ask("--config", str(config), "What is 1 + 2?")
        assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr
        assert node.poll() is None  # the node trains on
    finally:
        node.terminate()
        assert node.wait(timeout=120) == 0
