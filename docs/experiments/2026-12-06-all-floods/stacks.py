"""Where a py-spy profile's samples went: per thread, then the busiest non-trainer
thread's functions (inclusive: the share of its samples a function is on the stack).

usage: python stacks.py PROFILE.collapsed[.gz] [TOP]
(py-spy record --format raw --threads: one line a stack, "thread (0x..);frame;... count")
"""

import gzip
import sys
from collections import Counter
from pathlib import Path

path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 25
by_thread: Counter[str] = Counter()
stacks: list[tuple[str, list[str], int]] = []
text = (
    gzip.decompress(Path(path).read_bytes()).decode()
    if path.endswith(".gz")
    else Path(path).read_text()
)
for ln in text.splitlines():
    stack, _, n = ln.rpartition(" ")
    if not stack:
        continue
    frames = stack.split(";")
    thread, frames = frames[0], frames[1:]
    by_thread[thread] += int(n)
    stacks.append((thread, frames, int(n)))
total = sum(by_thread.values())
print(f"samples {total}")
for t, n in by_thread.most_common():
    print(f"  {n:7d} {n / total:6.1%} {t}")


def short(frame: str) -> str:
    """'fn (path/to/file.py:123)' -> 'fn (file.py)'"""
    fn, _, where = frame.partition(" (")
    return f"{fn} ({where.rsplit('/', 1)[-1].split(':')[0]})" if where else fn


for thread, _ in by_thread.most_common()[:3]:
    own = [(f, n) for t, f, n in stacks if t == thread]
    n_all = sum(n for _, n in own)
    inclusive: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    for frames, n in own:
        for f in {short(f) for f in frames}:
            inclusive[f] += n
        if frames:
            leaf[short(frames[-1])] += n
    print(f"\n{thread}: {n_all} samples; inclusive top {top}")
    for f, n in inclusive.most_common(top):
        print(f"  {n / n_all:6.1%} {f}")
    print(f"  self top {top // 2}")
    for f, n in leaf.most_common(top // 2):
        print(f"  {n / n_all:6.1%} {f}")
