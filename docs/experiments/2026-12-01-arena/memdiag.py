"""Per-round memory breakdown of a node.yaml trainer in one process (diagnostic).

    python memdiag.py ROUNDS                       # model work on the main thread (run1)
    THREAD=1 ARENA=2 python memdiag.py ROUNDS      # on one worker thread, two arenas (run2)
    THREAD=1 ARENA=1 python memdiag.py ROUNDS      # on one worker thread, one arena (run3)
"""
import ctypes, os, sys, time, json
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
from swarmnode.memory import release_free_memory, tune_allocator
import swarmnode.memory as _m; _m.ARENA_MAX = int(os.environ.get("ARENA", "2")); tune_allocator()
import torch
torch.set_num_threads(1)
from swarmnode.config import load_config
from swarmnode.node import build_trainer
from swarmnode.checkpoint import Checkpointer

class MI2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL("libc.so.6"); libc.mallinfo2.restype = MI2

def st():
    d = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        k, _, v = line.partition(":")
        if k in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
            d[k] = int(v.split()[0]) / 1024
    m = libc.mallinfo2()
    d.update(arena=m.arena / 2**20, mmap=m.hblkhd / 2**20, inuse=m.uordblks / 2**20, free=m.fordblks / 2**20, nmmap=m.hblks)
    d["pyblocks"] = sys.getallocatedblocks()
    return d

over = {"model.threads": 1, "node.data_dir": "/tmp/memdiag/data"}
for kv in sys.argv[2:]:
    k, _, v = kv.partition("="); import yaml; over[k] = yaml.safe_load(v)
cfg = load_config(Path(__file__).resolve().parents[3] / "configs" / "node.yaml", over)
from concurrent.futures import ThreadPoolExecutor
EX = ThreadPoolExecutor(1)
W = (lambda f, *a: EX.submit(f, *a).result()) if os.environ.get("THREAD") else (lambda f, *a: f(*a))
trainer = W(build_trainer, cfg)
ck = Checkpointer(Path("/tmp/memdiag/data/ck"), keep=3)
rounds = int(sys.argv[1])
prev = st()
for r in range(1, rounds + 1):
    t = time.time()
    groups, gen = W(trainer.rollout, r)
    a = st()
    step = W(trainer.update, groups)
    W(release_free_memory)
    b = st()
    ck_note = ""
    if r % 10 == 0:
        W(ck.save, r, trainer.policy.model, trainer.optimizer, trainer.generator)
        W(release_free_memory)
        c = st(); ck_note = f" ck:rss{c['VmRSS']-b['VmRSS']:+.1f} anon{c['RssAnon']-b['RssAnon']:+.1f}"
        b = c
    print(f"r{r} tr={step.groups_trained} tok={gen.tokens} rss={b['VmRSS']:.1f} d={b['VmRSS']-prev['VmRSS']:+.1f} anon={b['RssAnon']-prev['RssAnon']:+.1f} file={b['RssFile']-prev['RssFile']:+.1f} "
          f"heap_inuse={b['inuse']-prev['inuse']:+.2f} heap_arena={b['arena']-prev['arena']:+.2f} mmap={b['mmap']-prev['mmap']:+.2f}({b['nmmap']}) pyblk={b['pyblocks']-prev['pyblocks']:+d} "
          f"after_gen_rss={a['VmRSS']:.0f}{ck_note} {time.time()-t:.1f}s", flush=True)
    prev = b
