"""The teacher-target cache filled under DDP (2 gloo processes on the CPU, through torchrun): each rank embeds only
its share of the missing sentences, together they embed each once, every rank then reads the whole table, which is
bit for bit a single process's, and a rerun (2 ranks or 1) finds every part and computes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import sample_lines

from helpers import REPO

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PART_SIZE = 4  # 30 distinct sentences: 8 parts, 4 for each rank (a real fill cuts 4096 a part)
TEXTS = sample_lines("en", 30, seed=3)
DRAWN = TEXTS + TEXTS[::3]  # sentences drawn more than once are embedded once

# Each rank records the sentences it embedded and writes the table it reads (every drawn sentence, in order).
# Rank 1 reads the cache a second late, so that rank 0 has written its first part by then.
RANK_SCRIPT = """
import json, sys
from pathlib import Path
import numpy as np
import torch
import torch.distributed as dist
from transformers import AutoModel, AutoTokenizer
from mlminilm.distillation import targets

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
teacher_dir, cache, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
targets.PART_SIZE = int(sys.argv[4])
texts = json.loads((out / "texts.json").read_text(encoding="utf-8"))
embedded, real = [], targets.embed_sources

def counting(teacher, tokenizer, chunk, **kw):
    embedded.extend(chunk)
    return real(teacher, tokenizer, chunk, **kw)

targets.embed_sources = counting
if rank == 1:  # rank 1 reads the folder late: rank 0's first part must not change what rank 1 finds missing
    import time
    real_load, late = targets.TargetStore.load, [1.0]

    def late_load(self, *args, **kwargs):
        time.sleep(late.pop() if late else 0.0)  # its first read only
        return real_load(self, *args, **kwargs)

    targets.TargetStore.load = late_load
teacher = AutoModel.from_pretrained(teacher_dir).eval()
tokenizer = AutoTokenizer.from_pretrained(teacher_dir)
table = targets.prepare(cache, teacher, tokenizer, texts, ("mean",), True, prefix="query: ", max_length=32,
                        device=torch.device("cpu"), rank=rank, world=world, barrier=dist.barrier)
np.save(out / f"table-{rank}.npy", table(texts).numpy())
(out / f"embedded-{rank}.json").write_text(json.dumps(embedded), encoding="utf-8")
dist.destroy_process_group()
"""


def _two_ranks(teacher: Path, cache: Path, out: Path) -> tuple[list[list[str]], list[np.ndarray]]:
    """What each of 2 ranks embedded and the table each read, after `targets.prepare` of DRAWN under torchrun."""
    from ddp_launch import free_port

    out.mkdir()
    (out / "texts.json").write_text(json.dumps(DRAWN), encoding="utf-8")
    script = out / "rank.py"
    script.write_text(RANK_SCRIPT, encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MLMINILM_NO_PROGRESS": "1", "HF_HUB_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        str(script),
        str(teacher),
        str(cache),
        str(out),
        str(PART_SIZE),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    embedded = [json.loads((out / f"embedded-{r}.json").read_text(encoding="utf-8")) for r in (0, 1)]
    return embedded, [np.load(out / f"table-{r}.npy") for r in (0, 1)]


def _single_process(teacher_dir: Path, cache: Path, monkeypatch) -> tuple[list[str], np.ndarray]:
    """What one process (no DDP) embeds of DRAWN under `cache`, and the table it reads."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from mlminilm.distillation import targets

    monkeypatch.setattr(targets, "PART_SIZE", PART_SIZE)
    embedded, real = [], targets.embed_sources

    def counting(teacher, tokenizer, chunk, **kw):
        embedded.extend(chunk)
        return real(teacher, tokenizer, chunk, **kw)

    monkeypatch.setattr(targets, "embed_sources", counting)
    teacher = AutoModel.from_pretrained(teacher_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(teacher_dir)
    table = targets.prepare(
        cache, teacher, tokenizer, DRAWN, ("mean",), True, prefix="query: ", max_length=32, device=torch.device("cpu")
    )
    return embedded, table(DRAWN).numpy()


def test_two_ranks_split_the_fill_and_read_a_single_process_table(st_teacher, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    embedded, tables = _two_ranks(st_teacher, cache, tmp_path / "first")

    # Each rank embedded its own share, none all of it; together every missing sentence exactly once.
    assert all(0 < len(mine) < len(TEXTS) for mine in embedded), [len(mine) for mine in embedded]
    assert sorted(embedded[0] + embedded[1]) == sorted(TEXTS)
    assert [len(mine) for mine in embedded] == [16, 14]  # parts 0, 2, 4, 6 and 1, 3, 5, 7 of 4 sentences
    (folder,) = [p for p in cache.iterdir() if p.is_dir()]
    assert len(list(folder.glob("part-*.safetensors"))) == 8  # one per part: no rank's part replaced another's
    assert not [p for p in folder.iterdir() if ".tmp-" in p.name]

    # Every rank reads the whole table, bit for bit what one process computes in a cache of its own.
    alone, expected = _single_process(st_teacher, tmp_path / "alone", monkeypatch)
    assert sorted(alone) == sorted(TEXTS)
    for table in tables:
        np.testing.assert_array_equal(table, expected)


@pytest.mark.slow
def test_a_rerun_finds_every_part_of_a_two_rank_fill(st_teacher, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    _, first = _two_ranks(st_teacher, cache, tmp_path / "first")
    (folder,) = [p for p in cache.iterdir() if p.is_dir()]
    before = sorted(p.name for p in folder.iterdir())

    embedded, again = _two_ranks(st_teacher, cache, tmp_path / "again")
    assert embedded == [[], []]
    for table in again:
        np.testing.assert_array_equal(table, first[0])
    # And a single process (a rerun without torchrun) finds them all too.
    alone, table = _single_process(st_teacher, cache, monkeypatch)
    assert alone == []
    np.testing.assert_array_equal(table, first[0])
    assert sorted(p.name for p in folder.iterdir()) == before  # nothing rewritten, nothing added
